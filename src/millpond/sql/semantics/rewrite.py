"""The binder: types every expression of a qualified query, scope by scope (inner scopes first),
and rewrites it into the form whose meaning is PostgreSQL's in both engines.

The rules live beside it: literals and casts in :mod:`~millpond.sql.semantics.casts`, operators,
comparisons and CASE in :mod:`~millpond.sql.semantics.operators`, functions in
:mod:`~millpond.sql.semantics.functions` (and ``aggregates``, ``datetime``, ``regex``). A node no
rule knows is refused by name (:func:`refuse`): nothing reaches an engine untranslated.
"""

from __future__ import annotations

from typing import Callable, Mapping

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from millpond.sql.semantics import types as T
from millpond.sql.semantics.types import SqlType, Typed, refuse

__all__ = ["Binder"]

Schema = Mapping[str, Mapping[str, SqlType]]


class Binder:
    """One binding run over a query: ``tables`` maps table (and view) names to column types;
    ``view`` is True in a materialized view (no volatile functions there)."""

    def __init__(self, tables: Schema, *, view: bool):
        self.tables = tables
        self.view = view
        self.outputs: dict[int, list[tuple[str, SqlType]]] = {}  # id(scope expression) -> output columns
        self.scope: Scope | None = None

    # -- scopes ---------------------------------------------------------------------------------
    def bind(self, query: exp.Expression) -> exp.Expression:
        for scope in traverse_scope(query):
            self.scope = scope
            node = scope.expression
            if isinstance(node, exp.Select):
                self._select(node)
            elif isinstance(node, exp.SetOperation):
                self._set_operation(node)
            elif isinstance(node, exp.Values):
                self._values(node)
        return query

    def _select(self, q: exp.Select) -> None:
        from millpond.sql.semantics.interval_keys import group_by_span, normalize_keys

        group_by_span(self, q)
        items = []
        for item in q.expressions:
            body = item.this if isinstance(item, exp.Alias) else item
            put = _slot(body)
            new, t = self.value(body, keep=True)
            if t.kind == "null" and not _set_branch(q):  # an untyped NULL column is text, as PostgreSQL
                new, t = exp.Cast(this=new, to=T.datatype(T.TEXT)), T.TEXT  # resolves it (in a UNION: the others' type)
            elif t.kind == "unknown":
                t = T.TEXT
            if new is not body:
                put(new)
            items.append((item.alias_or_name, t))
        self.outputs[id(q)] = items
        for key in ("where", "having", "qualify"):
            clause = q.args.get(key)
            if clause is not None:
                self._boolean_clause(clause)
        for join in q.args.get("joins") or []:
            if join.args.get("on") is not None:
                new, t = self.condition(join.args["on"])
                join.set("on", new)
        group = q.args.get("group")
        for g in list(group.expressions) if group else []:
            if _has_map(self._replace(g, keep=True)):  # as the SELECT list has it
                raise refuse("GROUP BY a MAP value is not supported (a map has no equality here): group by "
                             "its keys or values (map_keys, map_values, m[key])", g)
        order = q.args.get("order")
        for o in list(order.expressions) if order else []:
            self._ordered(o, limited=self.view and q.args.get("limit") is not None)
        distinct = q.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            for e in list(distinct.args["on"].expressions):
                if self._replace(e).kind == "interval":
                    raise refuse("DISTINCT ON an INTERVAL is not supported", e)
        if distinct is not None and (maps := [i for i, (_, t) in enumerate(items) if _has_map(t)]):
            raise refuse("SELECT DISTINCT of a MAP value is not supported (a map has no equality here)",
                         q.expressions[maps[0]] if maps[0] < len(q.expressions) else q)
        if distinct is not None and distinct.args.get("on") is None:
            normalize_keys(q, [i for i, (_, t) in enumerate(items) if t.kind == "interval"])

    def _boolean_clause(self, clause: exp.Expression) -> None:
        new, _ = self.condition(clause.this)
        clause.set("this", new)

    def _replace(self, node: exp.Expression, *, keep: bool = False) -> SqlType:
        put = _slot(node)
        new, t = self.value(node, keep=keep)
        if new is not node:
            put(new)
        return t

    def _ordered(self, o: exp.Expression, *, limited: bool = False) -> None:
        if isinstance(o, exp.Ordered):
            by = o.this
            by_type = self._replace(by)
            kind = by_type.kind
            if by_type.nested:  # PostgreSQL's order of arrays and records (the engines put NULL elements first)
                from millpond.sql.semantics.nested import order_key

                nulls_first = o.args.get("nulls_first")
                desc = bool(o.args.get("desc"))
                o.set("this", order_key(o.this, by_type, by, null_high=desc if nulls_first is None else nulls_first == desc))
            if kind == "jsonb":
                raise refuse("ORDER BY a jsonb value is not supported (PostgreSQL orders jsonb by rules of its own): "
                             "order by a field's text, j ->> 'k'", by)
            if kind == "interval":  # ordered by span, as PostgreSQL orders intervals
                if limited:
                    raise refuse("ORDER BY an INTERVAL with LIMIT in a materialized view is not supported; order "
                                 "by EXTRACT(EPOCH FROM ...)", by)
                from millpond.sql.semantics.intervals import span

                o.set("this", span(o.this))
            # PostgreSQL: NULLs sort as larger than every value (last ascending, first descending)
            if o.args.get("nulls_first") is None:
                o.set("nulls_first", bool(o.args.get("desc")))
        else:
            self._replace(o)

    def _set_operation(self, node: exp.SetOperation) -> None:
        branches = [self._branch_outputs(node.this), self._branch_outputs(node.expression)]
        left, right = branches
        if len(left) != len(right):
            raise refuse(f"each {node.key.upper()} query must have the same number of columns "
                         f"({len(left)} vs {len(right)})", node)
        out = []
        for i, ((name, a), (_, b)) in enumerate(zip(left, right)):
            t = T.common_type([a, b])
            if t is None:
                raise refuse(f"{node.key.upper()} types {a} and {b} cannot be matched (column {i + 1})", node)
            t = T.TEXT if t.untyped else t
            for side, st in ((node.this, a), (node.expression, b)):
                if st != t:
                    self.cast_output(side, i, t)
                if t.kind == "interval" and node.args.get("distinct"):  # equal intervals are one row
                    self._normalize_output(side, i)
            out.append((name, t))
        self.outputs[id(node)] = out

    def _branch_outputs(self, node: exp.Expression) -> list[tuple[str, SqlType]]:
        while isinstance(node, exp.Subquery):
            node = node.this
        return self.outputs.get(id(node), [])

    def cast_output(self, node: exp.Expression, i: int, t: SqlType) -> None:
        """Output column ``i`` of the query ``node`` (a branch of a set operation, a subquery) cast to ``t``."""
        self.map_output(node, i, lambda body, old: self.cast_to((body, old), t, body), t)

    def map_output(self, node: exp.Expression, i: int, fn: Callable[[exp.Expression, SqlType], exp.Expression],
                   t: SqlType) -> None:
        """Output column ``i`` of the query ``node`` as ``fn(expression, type)``, of type ``t``."""
        while isinstance(node, exp.Subquery):
            node = node.this
        if isinstance(node, exp.SetOperation):
            self.map_output(node.this, i, fn, t)
            self.map_output(node.expression, i, fn, t)
            return
        if isinstance(node, exp.Select):
            item = node.expressions[i]
            body = item.this if isinstance(item, exp.Alias) else item
            name = item.alias_or_name
            new = fn(body.copy(), self.outputs[id(node)][i][1])
            if isinstance(item, exp.Alias):
                body.replace(new)
            else:
                item.replace(exp.alias_(new, name, quoted=True))
            self.outputs[id(node)][i] = (name, t)

    def _normalize_output(self, node: exp.Expression, i: int) -> None:
        """Output column ``i`` (an interval) of a set operation's branch as its key
        (:func:`~millpond.sql.semantics.intervals.normal`)."""
        from millpond.sql.semantics.intervals import normal

        while isinstance(node, exp.Subquery):
            node = node.this
        if isinstance(node, exp.SetOperation):
            self._normalize_output(node.this, i)
            self._normalize_output(node.expression, i)
            return
        if isinstance(node, exp.Select):
            item = node.expressions[i]
            body = item.this if isinstance(item, exp.Alias) else item
            if isinstance(item, exp.Alias):
                body.replace(normal(body))
            else:
                item.replace(exp.alias_(normal(body), item.alias_or_name, quoted=True))

    def _values(self, node: exp.Values) -> None:
        rows = node.expressions
        width = len(rows[0].expressions) if rows else 0
        typed = []
        for row in rows:
            cells = []
            for cell in list(row.expressions):
                cells.append(self._replace(cell))
            typed.append(cells)
        names = [c.name for c in node.args["alias"].columns] if node.args.get("alias") else [
            f"column{i + 1}" for i in range(width)]
        out = []
        for i, name in enumerate(names):
            t = T.common_type([r[i] for r in typed]) or T.TEXT
            out.append((name, T.TEXT if t.untyped else t))
        self.outputs[id(node)] = out

    # -- columns --------------------------------------------------------------------------------
    def column_type(self, col: exp.Column) -> SqlType:
        scope = self.scope
        while scope is not None:
            source = scope.sources.get(col.table) if col.table else None
            if source is not None:
                return self._source_type(source, col)
            if not col.table:  # an output alias (ORDER BY n)
                for name, t in self.outputs.get(id(scope.expression), []):
                    if name == col.name:
                        return t
            scope = scope.parent
        raise refuse(f"column {col.sql('postgres')} could not be resolved", col)

    def _source_type(self, source: exp.Expression | Scope, col: exp.Column) -> SqlType:
        if isinstance(source, Scope):
            for name, t in self.outputs.get(id(source.expression), []):
                if name == col.name:
                    return t
            raise refuse(f"column {col.sql('postgres')} could not be resolved", col)
        if isinstance(source, exp.Table):
            cols = self.tables.get(source.name, {})
            if col.name in cols:
                return cols[col.name]
        raise refuse(f"column {col.sql('postgres')} could not be resolved", col)

    # -- expressions ----------------------------------------------------------------------------
    def value(self, node: exp.Expression, *, keep: bool = False) -> Typed:
        """``node`` rewritten, and its PostgreSQL type. A quotient (a numeric whose display scale is
        its value's own, :mod:`~millpond.sql.semantics.numerics`) stays one only with
        ``keep`` (its caller keeps the display scale); else its value is read as ``numeric(38,16)``."""
        from millpond.sql.semantics.functions import function
        from millpond.sql.semantics.operators import HANDLERS

        handler = HANDLERS.get(type(node))
        new, t = handler(self, node) if handler is not None else function(self, node)
        if t.dynamic and not keep:
            from millpond.sql.semantics.numerics import value

            return value(new), T.QUOTIENT_VALUE
        return new, t

    def condition(self, node: exp.Expression) -> Typed:
        new, t = self.value(node)
        if t.kind not in ("boolean", "null", "unknown"):
            raise refuse(f"argument of WHERE/ON/HAVING must be boolean, not {t}: {node.sql('postgres')}", node)
        if t.kind == "unknown":
            from millpond.sql.semantics.casts import literal_as

            return literal_as(new, T.BOOLEAN, node), T.BOOLEAN
        return new, T.BOOLEAN

    def values(self, nodes: list[exp.Expression], *, keep: bool = False) -> list[Typed]:
        return [self.value(n, keep=keep) for n in nodes]

    def cast_to(self, typed: Typed, target: SqlType, at: exp.Expression) -> exp.Expression:
        """``typed`` converted to ``target`` the way PostgreSQL's implicit (assignment) cast would."""
        node, t = typed
        if t == target:
            return node
        from millpond.sql.semantics.casts import cast, literal_as

        if t.untyped:
            return literal_as(node, target, at)
        return cast(node, t, target, at)


def _set_branch(q: exp.Expression) -> bool:
    """``q`` is a branch of a UNION, INTERSECT or EXCEPT (its untyped NULLs take the other branches' type)."""
    parent = q.parent
    while isinstance(parent, exp.Subquery):
        parent = parent.parent
    return isinstance(parent, exp.SetOperation) and q.arg_key in ("this", "expression") or \
        isinstance(parent, exp.SetOperation) and isinstance(q.parent, exp.Subquery)


def _slot(node: exp.Expression) -> Callable[[exp.Expression], None]:
    """A setter for the place ``node`` holds in its parent, taken before a rule may wrap ``node``
    (a wrapped node's parent is its wrapper)."""
    parent, key, index = node.parent, node.arg_key, node.index

    def put(new: exp.Expression) -> None:
        parent.set(key, new, index)
    return put


def _has_map(t: SqlType) -> bool:
    """Whether ``t`` is a MAP or holds one (an array of maps, a record with a map field)."""
    return t.kind == "map" or any(_has_map(a[1] if isinstance(a, tuple) else a) for a in t.args
                                  if isinstance(a, (SqlType, tuple)))
