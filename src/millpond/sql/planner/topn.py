"""Top-N: ``ORDER BY ... LIMIT n [OFFSET m]``, and ``ROW_NUMBER() OVER (PARTITION BY ... ORDER BY
...)`` filtered by ``rn <= N`` (or ``rn = 1``) in the enclosing query, as one
:class:`~millpond.engine.plan.TopN` node."""

from __future__ import annotations

from sqlglot import exp

from millpond.engine import plan as P
from millpond.engine.expressions import is_mp
from millpond.sql.planner.context import Context, err
from millpond.sql.planner.exprs import column, comparisons, count, rename, unalias

__all__ = ["plan_order_limit", "row_number_limit", "plan_row_number"]


def plan_order_limit(ctx: Context, q: exp.Select, node: P.Node, selects: list, names: list[str]) -> P.Node:
    limit, offset = q.args.get("limit"), q.args.get("offset")
    if limit is None:
        if offset is not None:
            raise err("OFFSET without LIMIT in a materialized view is not supported", offset)
        return node  # a view's rows have no order: ORDER BY alone changes nothing
    order, keys = [], []
    for o in (q.args["order"].expressions if q.args.get("order") else []):
        col = o.this
        # a quotient (its text) is ordered by its value, an array or record by its order key
        by_value = is_mp(col, "NUMERIC_VALUE") or is_mp(col, "ORDER_KEY")
        if by_value:
            col = col.expressions[0]
        name = _output(col, selects, names)
        if name is None:
            raise err(f"ORDER BY {o.this.sql('postgres')} with LIMIT: order by an output column "
                      "(add it to the SELECT list)", o)
        if by_value:
            keys.append((o.this.copy().transform(lambda n: column(name) if n == col else n), f"_order{len(keys)}"))
            name = keys[-1][1]
        order.append((name, bool(o.args.get("desc")), bool(o.args.get("nulls_first"))))
    if keys:
        node = P.Project(node, tuple([*((column(n), n) for n in names), *keys]))
    node = P.TopN(node, (), tuple(order), count(limit.expression, "LIMIT"),
                  count(offset.expression, "OFFSET") if offset is not None else 0, None, ctx.next_id())
    return P.Project(node, tuple((column(n), n) for n in names)) if keys else node


def _output(col: exp.Expression, selects: list, names: list[str]) -> str | None:
    """The output column ``col`` is (by name or as a SELECT item), or None."""
    bodies = [unalias(s) for s in selects]
    if isinstance(col, exp.Column) and not col.table and col.name in names:
        return col.name
    return names[bodies.index(col)] if col in bodies else None


def row_number_limit(item: exp.Expression, alias: str, where: list, ctes: dict) -> int | None:
    """N when FROM item ``item`` computes ROW_NUMBER() and the enclosing WHERE keeps ``rn <= N``."""
    inner = item.this if isinstance(item, exp.Subquery) else ctes.get(item.name) if isinstance(item, exp.Table) \
        else None
    if not isinstance(inner, exp.Select):
        return None
    rn = [s.alias_or_name for s in inner.expressions
          if isinstance(s, exp.Alias) and isinstance(s.this, exp.Window) and isinstance(s.this.this, exp.RowNumber)]
    bounds = []
    for cond in where:
        for op, col, lit in comparisons(cond):
            if col.table == alias and col.name in rn:
                n = int(lit)
                bounds.append({"<=": n, "<": n - 1, "=": n if n == 1 else None}.get(op))
    bounds = [b for b in bounds if b is not None]
    return min(bounds) if bounds else None


def plan_row_number(ctx: Context, q: exp.Select, node: P.Node, selects: list, limit: int
                    ) -> tuple[P.Node, list[str]]:
    """``selects`` with ``ROW_NUMBER() OVER (...) AS rn`` as their only window function, where the
    enclosing query keeps ``rn <= limit``: the first ``limit`` rows of each partition (the caller,
    :func:`~millpond.sql.planner.over.plan_window_functions`, checked that shape)."""
    if q.args.get("group") or any(a.find_ancestor(exp.Window) is None for s in selects
                                  for a in s.find_all(exp.AggFunc)):
        raise err("window functions together with aggregation are not supported", q)
    windows = [s for s in selects if s.find(exp.Window)]
    w = windows[0].find(exp.Window)
    exprs, names = [], []
    for s in selects:
        if s is windows[0]:
            continue
        exprs.append((rename(unalias(s)), s.alias_or_name))
        names.append(s.alias_or_name)
    partition = [(rename(p), f"_p{i}") for i, p in enumerate(w.args.get("partition_by") or [])]
    orders = w.args["order"].expressions if w.args.get("order") else []
    order = [(rename(o.this), f"_r{i}") for i, o in enumerate(orders)]
    node = P.Project(node, tuple([*exprs, *partition, *order]))
    rn = windows[0].alias_or_name
    node = P.TopN(node, tuple(n for _, n in partition),
                  tuple((n, bool(o.args.get("desc")), bool(o.args.get("nulls_first"))) for (_, n), o in zip(order, orders)),
                  limit, 0, rn, ctx.next_id())
    out = [s.alias_or_name for s in selects]
    dup = sorted({n for n in out if out.count(n) > 1})
    if dup:
        raise err(f"output column names must be unique; alias {', '.join(dup)}", q)
    return P.Project(node, tuple((column(n), n) for n in out)), out
