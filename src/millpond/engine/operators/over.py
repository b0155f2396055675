"""Window functions per partition with retraction: ``f(...) OVER (PARTITION BY ... ORDER BY ...
[frame])`` for ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD and COUNT/SUM/MIN/MAX over a frame, with
PostgreSQL's meaning (the default frame with ORDER BY reaches the current row's last peer).

Rows are sorted by the ORDER BY columns, ties broken by the remaining columns, so ROW_NUMBER, ROWS
frames, LAG and LEAD are well defined (identical rows are interchangeable: which copy gets which
number changes no output multiset).

State:
- ``rows``: every input row (an additive multiset keyed by partition hash and all columns): an
  epoch writes its consolidated delta's counts without reading.

Per epoch, each partition the delta touches is recomputed: its rows before the epoch are read, the
outputs of the old and of the new multiset are computed in one vectorized pass over all touched
partitions (the old ones tagged as a partition of their own), and the difference is emitted:
``-old``, ``+new``, consolidated, so rows whose outputs did not change cancel. Work follows the
touched partitions, not the whole state; a window with no PARTITION BY is one partition.

A frame aggregate over rows ``[lo, hi]`` of the sorted batch is folded from power-of-two blocks
(``2^k`` rows starting at each row, built level by level): ``log2(frame length)`` gathers per call,
whatever the frame. The blocks a frame uses lie inside it, so a result depends only on the frame's
rows — never on the other partitions read with it — and recomputing the old outputs at a later
epoch gives exactly what was emitted (a retraction must match its insert to the last bit).

    >>> spec = Over(("p", "v"), ("p",), (("v", False, False),),
    ...             (OverCall("sum", "v", "s", Frame("range", None, 0)),), name="t")  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import polars as pl

from millpond.columns import COUNT, KH, W
from millpond.engine.changelog import consolidate, state_rows
from millpond.engine.operators.base import Part, lookup
from millpond.engine.plan import OverCall
from millpond.errors import InvariantError
from millpond.store.state_table import StateTable

__all__ = ["Over", "output_type"]

_SIDE = "_side"  # 0: a touched partition before the epoch, 1: after it
_I, _G, _PG = "_i", "_g", "_pg"  # row index in the batch, partition number, peer group number
_LO_P, _HI_P, _LO_PEER, _HI_PEER = "_lo_p", "_hi_p", "_lo_peer", "_hi_peer"


@dataclass(frozen=True)
class Over:
    """Window functions per partition (an :class:`~millpond.engine.operators.base.Operator`)."""

    columns: tuple[str, ...]  # every input column (the rows' key)
    partition: tuple[str, ...]
    order: tuple[tuple[str, bool, bool], ...]  # (column, descending, nulls first)
    calls: tuple[OverCall, ...]
    name: str

    def parts(self) -> dict[str, Part]:
        return {"rows": Part(self.columns, additive=True)}

    def apply(self, delta: pl.DataFrame, states: Mapping[str, StateTable]
              ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
        return _apply(self, delta, states["rows"])


def output_type(call: OverCall, arg: pl.DataType | None) -> pl.DataType:
    """The type of ``call``'s output column given its argument's: PostgreSQL's bigint for counts and
    ranks; a SUM of integers is a bigint, of decimals a decimal of precision 38."""
    if call.func in ("row_number", "rank", "dense_rank", "count_star", "count"):
        return pl.Int64
    assert arg is not None
    if call.func == "sum":
        if arg.is_integer():
            return pl.Int64
        if isinstance(arg, pl.Decimal):
            return pl.Decimal(38, arg.scale)
        return pl.Float64 if arg.is_float() else arg
    return arg


def _apply(spec: Over, delta: pl.DataFrame, rows: StateTable) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    keys = [KH, *spec.columns]
    pkeys = [KH, *spec.partition]
    d = consolidate(delta.select(*keys, W))
    writes = {"rows": state_rows(d.rename({W: COUNT}), live=pl.lit(True))}  # additive: no read to write
    names = [c.name for c in spec.calls]
    if d.height == 0:
        schema = {**{c: d.schema[c] for c in spec.columns},
                  **{c.name: output_type(c, d.schema.get(c.arg) if c.arg else None) for c in spec.calls}, W: pl.Int64}
        return pl.DataFrame(schema=schema), writes

    schema = {**{c: d.schema[c] for c in keys}, COUNT: pl.Int64}
    old = lookup(rows, d.select(pkeys).unique(), pkeys, schema).rename({COUNT: W})
    new = consolidate(pl.concat([old, d]))
    if new.filter(pl.col(W) < 0).height:
        bad = new.filter(pl.col(W) < 0).drop(KH).row(0, named=True)
        raise InvariantError(f"window {spec.name}: retraction of a row that is not there: {bad}")
    both = pl.concat([old.with_columns(pl.lit(0, pl.Int8).alias(_SIDE)),
                      new.with_columns(pl.lit(1, pl.Int8).alias(_SIDE))])
    computed = _evaluate(spec, both)
    out = computed.select(*spec.columns, *names,
                          pl.when(pl.col(_SIDE) == 1).then(1).otherwise(-1).cast(pl.Int64).alias(W))
    return consolidate(out), writes


def _evaluate(spec: Over, rows: pl.DataFrame) -> pl.DataFrame:
    """Every copy of every row (``_w`` copies) with its window outputs; partitions are told apart
    by ``_side``, ``_kh`` and the partition columns."""
    rows = rows.filter(pl.col(W) > 0)
    rows = rows.with_columns(pl.int_ranges(pl.col(W)).alias("_copy")).explode("_copy").drop("_copy", W)
    ordered = [c for c, _, _ in spec.order]
    ties = [c for c in spec.columns if c not in ordered and c not in spec.partition]
    head = [_SIDE, KH, *spec.partition]
    rows = rows.sort([*head, *ordered, *ties],
                     descending=[False] * len(head) + [d for _, d, _ in spec.order] + [False] * len(ties),
                     nulls_last=[True] * len(head) + [not nf for _, _, nf in spec.order] + [True] * len(ties),
                     maintain_order=True)
    i = pl.col(_I)
    first = i == 0
    rows = rows.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(_I)).with_columns(
        (first | _changed(head)).alias("_new_part"),
    ).with_columns(
        pl.col("_new_part").cum_sum().alias(_G),
        (pl.col("_new_part") | _changed(ordered)).cum_sum().alias(_PG),
    ).with_columns(
        i.min().over(_G).alias(_LO_P), i.max().over(_G).alias(_HI_P),
        i.min().over(_PG).alias(_LO_PEER), i.max().over(_PG).alias(_HI_PEER),
    )
    outputs = []
    for call in spec.calls:
        outputs.append(_call(call, rows).cast(output_type(call, rows.schema.get(call.arg) if call.arg else None))
                       .alias(call.name))
    return rows.with_columns(outputs)


def _changed(cols: list[str]) -> pl.Expr:
    """A row differs from the one before it in one of ``cols`` (NULLs equal)."""
    if not cols:
        return pl.lit(False)
    return pl.any_horizontal([pl.col(c).ne_missing(pl.col(c).shift(1)) for c in cols])


def _call(call: OverCall, rows: pl.DataFrame) -> pl.Series:
    i = rows[_I]
    if call.func == "row_number":
        return i - rows[_LO_P] + 1
    if call.func == "rank":
        return rows[_LO_PEER] - rows[_LO_P] + 1
    if call.func == "dense_rank":
        return rows.select(pl.col(_PG) - pl.col(_PG).min().over(_G) + 1).to_series()
    if call.func in ("lag", "lead"):
        j = i - call.offset if call.func == "lag" else i + call.offset
        inside = (j >= rows[_LO_P]) & (j <= rows[_HI_P])
        value = rows[call.arg].gather(j.clip(0, rows.height - 1))
        default = rows[call.default].cast(value.dtype) if call.default else pl.Series([None], dtype=value.dtype)
        return pl.select(pl.when(inside).then(value).otherwise(default)).to_series()
    lo, hi = _frame(call, rows)
    length = (hi - lo + 1).clip(0)
    if call.func == "count_star":
        return length
    arg = rows[call.arg]
    count = _fold(arg.is_not_null().cast(pl.Int64), lo, length, _add, 0)
    if call.func == "count":
        return count
    if call.func == "sum":
        total = _fold(arg.cast(output_type(call, arg.dtype)).fill_null(0), lo, length, _add, 0)
        return pl.select(pl.when(count > 0).then(total)).to_series()
    pick = pl.min_horizontal if call.func == "min" else pl.max_horizontal
    return _fold(arg, lo, length, lambda a, b: pl.select(pick(a, b)).to_series(), None)


def _frame(call: OverCall, rows: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """The first and last batch index of each row's frame (``lo > hi``: an empty frame)."""
    f, i = call.frame, rows[_I]
    assert f is not None
    if f.kind == "range":
        lo = rows[_LO_P] if f.start is None else rows[_LO_PEER]
        hi = rows[_HI_P] if f.end is None else rows[_HI_PEER]
        return lo, hi
    lo = rows[_LO_P] if f.start is None else pl.select(pl.max_horizontal(rows[_LO_P], i + f.start)).to_series()
    hi = rows[_HI_P] if f.end is None else pl.select(pl.min_horizontal(rows[_HI_P], i + f.end)).to_series()
    return lo, hi


def _add(a: pl.Series, b: pl.Series) -> pl.Series:
    return a + b


def _fold(values: pl.Series, lo: pl.Series, length: pl.Series, op: Callable[[pl.Series, pl.Series], pl.Series],
          empty: object) -> pl.Series:
    """``op`` folded over ``values[lo : lo + length]`` for each row: the frame is cut into the blocks
    of its length's binary digits (smallest first), each read from the block table of its size."""
    n = values.len()
    acc = pl.Series([empty] * n, dtype=values.dtype)
    top = int(length.max() or 0).bit_length()
    block, start = values, lo
    for k in range(top):
        if k:  # blocks of 2^k rows: two blocks of 2^(k-1)
            half = 1 << (k - 1)
            block = op(block, block.shift(-half))
        take = (length // (1 << k)) % 2 == 1
        # low digits first: the blocks of one frame are disjoint, and cover it
        part = block.gather(start.clip(0, n - 1))
        acc = pl.select(pl.when(take).then(op(acc, part)).otherwise(acc)).to_series()
        start = pl.select(pl.when(take).then(start + (1 << k)).otherwise(start)).to_series()
    return acc
