"""``generate_series(start, stop [, step])`` in the FROM of a query or DML, as PostgreSQL has it:
the integers from ``start`` to ``stop`` inclusive, ``step`` apart (default 1; a negative step
counts down; zero is PostgreSQL's error), an ``integer`` column unless a bound needs ``bigint``.
The column is named ``generate_series``, or after the alias (``AS x``: ``x``; ``AS t(x)``: table
``t``, column ``x``).

Binding sees a placeholder relation of that one column (:func:`placeholders`); the bound query
then reads DuckDB's own ``generate_series`` in its place (:func:`spell_out`), so a million rows
cost DuckDB's loop, not a literal list. Integer constants only: a timestamp series, or bounds
computed from columns, are refused by name. A materialized view has no use for it (a series never
changes: insert it into a table) and refuses it (``sql/planner/windows.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from millpond.errors import SqlError
from millpond.sql.semantics.types import BIGINT, INTEGER, SqlType
from millpond.sql.statements import position

__all__ = ["Series", "is_series", "placeholders", "spell_out"]

PREFIX = "#series"
_INT32 = (-(1 << 31), (1 << 31) - 1)


@dataclass(frozen=True)
class Series:
    column: str
    type: SqlType
    start: int
    stop: int
    step: int


def is_series(node: exp.Expression) -> bool:
    """Whether ``node`` is a ``generate_series(...)`` in FROM."""
    return isinstance(node, exp.Table) and isinstance(node.this, (exp.ExplodingGenerateSeries, exp.GenerateSeries))


def placeholders(query: exp.Expression) -> tuple[exp.Expression, dict[str, Series]]:
    """``query`` with each ``generate_series`` in FROM replaced by a relation named ``#series<n>``
    under the call's alias, and those relations (their one column, its type and the bounds)."""
    found: dict[str, Series] = {}

    def fn(node: exp.Expression) -> exp.Expression:
        if not is_series(node):
            return node
        alias = node.args.get("alias")
        columns = alias.columns if alias is not None else []
        if len(columns) > 1:
            raise _error(f"generate_series returns one column, not {len(columns)}", node)
        table = alias.name if alias is not None and alias.name else "generate_series"
        column = columns[0].name if columns else table
        call = node.this
        args = [call.args.get("start"), call.args.get("end"), call.args.get("step")]
        start, stop = (_integer(a, node) for a in args[:2])
        step = _integer(args[2], node) if args[2] is not None else 1
        if step == 0:
            line, col = position(node)
            raise SqlError("step size cannot equal zero", line=line, col=col, sqlstate="22023")
        wide = any(not _INT32[0] <= v <= _INT32[1] for v in (start, stop, step))
        name = f"{PREFIX}{len(found)}"
        found[name] = Series(column, BIGINT if wide else INTEGER, start, stop, step)
        return exp.Table(this=exp.to_identifier(name, quoted=True),
                         alias=exp.TableAlias(this=exp.to_identifier(table, quoted=True)))
    return query.transform(fn), found


def spell_out(bound: exp.Expression, series: dict[str, Series]) -> exp.Expression:
    """The bound query reading DuckDB's ``generate_series`` where binding read a placeholder."""
    if not series:
        return bound

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Table) and node.name in series):
            return node
        s = series[node.name]
        rows = exp.Table(this=exp.Anonymous(this="generate_series", expressions=[
            exp.Literal.number(s.start), exp.Literal.number(s.stop), exp.Literal.number(s.step)]))
        inner = exp.select(exp.alias_(exp.cast(exp.column("generate_series"), s.type.kind.upper()), s.column,
                                      quoted=True)).from_(rows)
        return exp.Subquery(this=inner, alias=node.args["alias"].copy())
    return bound.transform(fn)


def _integer(e: exp.Expression | None, node: exp.Expression) -> int:
    v = e
    while isinstance(v, exp.Paren):
        v = v.this
    negative = isinstance(v, exp.Neg)
    if negative:
        v = v.this
    if isinstance(v, exp.Literal) and not v.is_string:
        try:
            n = int(v.this)
        except ValueError:
            n = None
        if n is not None:
            n = -n if negative else n
            if -(1 << 63) <= n < (1 << 63):
                return n
    raise _error("generate_series takes integer constants here (start, stop and an optional step); "
                 "a series of timestamps, numerics or computed bounds is not supported yet", node)


def _error(message: str, node: exp.Expression) -> SqlError:
    line, col = position(node)
    return SqlError(message, line=line, col=col, sqlstate="0A000")
