"""Time windows: ``TUMBLE(t, ts, size)`` and ``HOP(t, ts, slide, size)`` in FROM.

Binding rewrites each call into a subquery over ``t`` that adds ``window_start`` and
``window_end`` as placeholders (:data:`~millpond.sql.planner.exprs.WINDOW_FN`); planning the
SELECT that uses them places a :class:`~millpond.engine.plan.Window` node and turns the
placeholders into references to its columns.
"""

from __future__ import annotations

import re

from sqlglot import exp

from millpond.catalog import Catalog
from millpond.engine import plan as P
from millpond.sql.planner.context import Context, err
from millpond.sql.planner.exprs import WINDOW_FN, column
from millpond.sql.series import is_series

__all__ = ["expand_table_functions", "spell_out_table_functions", "place_windows", "interval_us"]


def expand_table_functions(ctx: Context, query: exp.Expression) -> exp.Expression:
    """Binding rule: every TUMBLE/HOP in FROM becomes a subquery adding the window columns."""
    return query.transform(lambda node: _table_function(ctx, node))


def _table_function(ctx: Context, node: exp.Expression) -> exp.Expression:
    call = _window_call(ctx.catalog, node)
    if call is None:
        return node
    table, ts, size, slide = call
    wid = f"w{len(ctx.windows)}"
    ctx.windows[wid] = (size, slide)
    inner = exp.select(
        exp.Star(),
        exp.alias_(exp.Anonymous(this=WINDOW_FN, expressions=[ts.copy(), exp.Literal.string(wid),
                                                              exp.Literal.string("start")]), "window_start"),
        exp.alias_(exp.Anonymous(this=WINDOW_FN, expressions=[ts.copy(), exp.Literal.string(wid),
                                                              exp.Literal.string("end")]), "window_end"),
    ).from_(exp.to_table(table))
    # unaliased, the window's rows are named after its table (``SELECT bid.auction FROM HOP(bid, ...)``)
    return exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(node.alias or table)))


def spell_out_table_functions(catalog: Catalog, query: exp.Expression) -> exp.Expression:
    """For a query answered at once: every TUMBLE/HOP in FROM as the subquery of the rows it stands
    for, in plain SQL (``date_bin``; a HOP joins each row with its ``size / slide`` windows)."""
    def fn(node: exp.Expression) -> exp.Expression:
        call = _window_call(catalog, node)
        if call is None:
            return node
        table, ts, size, slide = call
        col = exp.column(ts.name, table)
        start: exp.Expression = exp.DateBin(this=_micros(slide), expression=col)
        rows = exp.select(exp.Column(this=exp.Star(), table=exp.to_identifier(table))).from_(exp.to_table(table))
        if size > slide:  # a row is in size / slide windows: window k starts k slides before its latest
            hops = exp.Values(expressions=[exp.Tuple(expressions=[exp.Literal.number(k)]) for k in range(size // slide)],
                              alias=exp.TableAlias(this=exp.to_identifier("_hops"), columns=[exp.to_identifier("k")]))
            rows = rows.join(hops, join_type="CROSS")
            start = exp.Sub(this=start, expression=exp.Mul(this=exp.column("k", "_hops"), expression=_micros(slide)))
        inner = rows.select(exp.alias_(start, "window_start"),
                            exp.alias_(exp.Add(this=start.copy(), expression=_micros(size)), "window_end")
                            ).where(exp.Not(this=exp.Is(this=col.copy(), expression=exp.Null())))
        return exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(node.alias or table)))
    return query.transform(fn)


def _micros(us: int) -> exp.Interval:
    return exp.Interval(this=exp.Literal.string(f"{us} microseconds"))


def _window_call(catalog: Catalog, node: exp.Expression) -> tuple[str, exp.Column, int, int] | None:
    """``(table, time column, size, slide)`` (in microseconds) of a TUMBLE/HOP in FROM, checked, or
    None when ``node`` is not a table function."""
    if is_series(node):
        raise err("generate_series in a materialized view is not supported: a series never changes, so "
                  "insert it into a table (INSERT INTO t SELECT ... FROM generate_series(...)) and read that", node)
    if not (isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous)):
        return None
    fn = node.this
    name = fn.name.upper()
    args = fn.expressions
    if name not in ("TUMBLE", "HOP"):
        raise err(f"unknown table function {fn.name}() (TUMBLE and HOP are supported)", fn)
    want = 3 if name == "TUMBLE" else 4
    if len(args) != want or not isinstance(args[0], exp.Column) or not isinstance(args[1], exp.Column):
        usage = "TUMBLE(table, time_column, size)" if name == "TUMBLE" else "HOP(table, time_column, slide, size)"
        raise err(f"{name} takes {usage}", fn)
    table = catalog.tables.get(args[0].name)
    types = {c.name: c.type for c in table.columns} if table is not None else {}
    if args[1].name in types and types[args[1].name] not in ("TIMESTAMP", "TIMESTAMPTZ"):
        raise err(f"{name}: column {args[1].name!r} is {types[args[1].name]}; a time window needs a "
                  "TIMESTAMP column", args[1])
    size = interval_us(args[-1])
    slide = size if name == "TUMBLE" else interval_us(args[2])
    if size % slide:
        raise err("HOP: the window size must be a multiple of the slide", fn)
    return args[0].name, exp.column(args[1].name), size, slide


def place_windows(ctx: Context, node: P.Node, selects: list[exp.Expression]) -> tuple[P.Node, list[exp.Expression]]:
    """Turn the placeholders in ``selects`` into a Window node over ``node`` and references to its columns."""
    done: set[str] = set()

    def fn(n: exp.Expression) -> exp.Expression:
        nonlocal node
        if not (isinstance(n, exp.Anonymous) and n.name.upper() == WINDOW_FN):
            return n
        ts, wid, which = (a for a in n.expressions)
        wid = wid.this
        if wid not in done:
            size, slide = ctx.windows[wid]
            node = P.Window(node, f"{ts.table}__{ts.name}", size, slide, f"_{wid}_start", f"_{wid}_end")
            done.add(wid)
        return column(f"_{wid}_{which.this}")
    out = [s.transform(fn) if s.find(exp.Anonymous) else s for s in selects]
    return node, out


_UNITS_US = {"microsecond": 1, "millisecond": 1000, "second": 10**6, "minute": 60 * 10**6,
             "hour": 3600 * 10**6, "day": 86400 * 10**6, "week": 7 * 86400 * 10**6}


def interval_us(e: exp.Expression) -> int:
    """A constant INTERVAL as microseconds (months and years have no fixed length: rejected)."""
    if isinstance(e, exp.Interval):
        text = f"{e.this.name} {e.unit.name if e.args.get('unit') else ''}".strip()
    elif isinstance(e, exp.Literal) and e.is_string:
        text = e.this
    else:
        raise err(f"a window size must be an INTERVAL constant, got {e.sql('postgres')}", e)
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]+?)s?\s*", text, re.IGNORECASE)
    unit = m.group(2).lower() if m else ""
    unit = {"us": "microsecond", "ms": "millisecond", "sec": "second", "min": "minute", "h": "hour"}.get(unit, unit)
    if not m or unit not in _UNITS_US or int(m.group(1)) <= 0:
        raise err(f"window size {e.sql('postgres')}: use a positive INTERVAL in microseconds .. weeks", e)
    return int(m.group(1)) * _UNITS_US[unit]
