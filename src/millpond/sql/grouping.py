"""``GROUP BY GROUPING SETS (...)``, ``ROLLUP (...)`` and ``CUBE (...)`` as a ``UNION ALL`` of one
plain ``GROUP BY`` per grouping set, before a query is bound (views and ad-hoc queries alike).

In the branch of a set, a grouping expression outside the set is NULL wherever the SELECT list or
HAVING uses it outside an aggregate, and ``GROUPING(a, b, ...)`` is the constant PostgreSQL gives
(bit ``i``, from the left, set when argument ``i`` is not grouped in this set). A view then keeps
one aggregation per set: each maintained incrementally, as any aggregate.

    >>> import sqlglot
    >>> expand(sqlglot.parse_one("SELECT a, b, count(*) FROM t GROUP BY ROLLUP (a, b)")).sql()
    'SELECT a, b, COUNT(*) FROM t GROUP BY a, b UNION ALL SELECT a, NULL AS b, COUNT(*) FROM t GROUP BY a UNION ALL SELECT NULL AS a, NULL AS b, COUNT(*) FROM t'
"""

from __future__ import annotations

import itertools

from sqlglot import exp

from millpond.errors import SqlError

__all__ = ["expand"]

MAX_SETS = 64  # a CUBE of 6 columns; more would make as many aggregations


def expand(query: exp.Expression) -> exp.Expression:
    """``query`` with every SELECT over grouping sets rewritten as a UNION ALL of its sets."""
    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Select) and _has_sets(node):
            return _union(node)
        return node
    if not any(_has_sets(s) for s in query.find_all(exp.Select)):
        return query
    return query.transform(rewrite, copy=False)


def _has_sets(select: exp.Select) -> bool:
    group = select.args.get("group")
    return bool(group and (group.args.get("grouping_sets") or group.args.get("cube") or group.args.get("rollup")
                           or any(isinstance(g, (exp.GroupingSets, exp.Cube, exp.Rollup)) for g in group.expressions)))


def _sets(group: exp.Group) -> list[list[exp.Expression]]:
    """The grouping sets of a GROUP BY clause: the cross product of its items' sets."""
    items: list[list[list[exp.Expression]]] = []
    plain = [g for g in group.expressions if not isinstance(g, (exp.GroupingSets, exp.Cube, exp.Rollup))]
    if plain:
        items.append([plain])
    for g in [*(g for g in group.expressions if isinstance(g, (exp.GroupingSets, exp.Cube, exp.Rollup))),
              *(group.args.get("grouping_sets") or []), *(group.args.get("rollup") or []),
              *(group.args.get("cube") or [])]:
        cols = [_members(e) for e in g.expressions]
        if isinstance(g, exp.Rollup):
            items.append([[c for part in cols[:i] for c in part] for i in range(len(cols), -1, -1)])
        elif isinstance(g, exp.Cube):
            items.append([[c for keep, part in zip(mask, cols) if keep for c in part]
                          for mask in itertools.product((True, False), repeat=len(cols))])
        else:
            items.append(cols)
    sets = [[e for part in combo for e in part] for combo in itertools.product(*items)]
    if len(sets) > MAX_SETS:
        raise SqlError(f"GROUP BY makes {len(sets)} grouping sets (at most {MAX_SETS} are supported)")
    return sets


def _members(e: exp.Expression) -> list[exp.Expression]:
    """A grouping set's expressions: ``(a, b)`` is two, ``()`` none, ``a`` one."""
    if isinstance(e, exp.Tuple):
        return list(e.expressions)
    if isinstance(e, exp.Paren):
        return [e.this]
    return [e]


def _union(select: exp.Select) -> exp.Expression:
    for arg in ("limit", "offset"):
        if select.args.get(arg):
            raise SqlError(f"{arg.upper()} together with GROUPING SETS, ROLLUP or CUBE is not supported; "
                           "wrap the grouped query in a subquery")
    sets = _sets(select.args["group"])
    with_ = select.args.get("with_")
    every = {e.sql(): e for s in sets for e in s}
    branches = []
    for members in sets:
        grouped = {e.sql() for e in members}
        branch = select.copy()
        branch.set("order", None)  # a view's rows have no order; ORDER BY alone changes nothing
        branch.set("with_", None)
        branch.set("group", exp.Group(expressions=[e.copy() for e in members]) if members else None)

        def fill(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Grouping):
                bits = [0 if a.sql() in grouped else 1 for a in node.expressions]
                return exp.Literal.number(int("".join(map(str, bits)) or "0", 2))
            if node.sql() in every and node.sql() not in grouped and node.find_ancestor(exp.AggFunc) is None:
                return exp.Null()
            return node

        outputs = []
        for e in branch.expressions:
            new = e.transform(fill)
            outputs.append(new if isinstance(e, exp.Alias) or new == e else exp.alias_(new, e.alias_or_name))
        branch.set("expressions", outputs)
        if branch.args.get("having"):
            branch.set("having", branch.args["having"].transform(fill))
        branches.append(branch)
    out = branches[0]
    for b in branches[1:]:
        out = exp.Union(this=out, expression=b, distinct=False)
    if with_ is not None:
        out.set("with_", with_)
    return out
