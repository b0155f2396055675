"""The interface every stateful operator implements, and the keyed state lookup they share.

An operator is a frozen, picklable description (it travels to the executor's tasks). Per epoch and
partition (step 3c of the epoch protocol, :mod:`millpond.engine.coordinator`) a task

1. opens each of the operator's state :class:`Part` s at the last committed epoch,
2. calls :meth:`Operator.apply` with the partition's delta (a Z-set: rows plus ``_w``),
3. writes the returned state rows of each part as SSTs of this epoch, and emits the output
   changelog.

Operators never do I/O of their own beyond reading the state tables they are handed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol

import polars as pl

from millpond.columns import KH
from millpond.store.state_table import StateTable

__all__ = ["Part", "Operator", "lookup"]


@dataclass(frozen=True)
class Part:
    """One state table of an operator: rows identified by ``_kh`` plus ``keys``.

    ``additive`` tables hold count changes in ``_count`` that a read sums (multisets: an insert
    never reads); the others are newest-wins rows with tombstones."""

    keys: tuple[str, ...]
    additive: bool = False


class Operator(Protocol):
    name: str  # for error messages: "<view>#<node id>"

    def parts(self) -> dict[str, Part]:
        """The operator's state tables by part name (``groups``, ``left``, ``rows``...)."""

    def apply(self, delta: pl.DataFrame, states: Mapping[str, StateTable]
              ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
        """The output changelog and, per part, the state rows this epoch writes (puts and
        tombstones, or count changes for additive parts)."""


def lookup(table: StateTable | None, probe: pl.DataFrame, on: list[str], schema: Mapping[str, pl.DataType]
           ) -> pl.DataFrame:
    """The live rows of ``table`` whose ``on`` columns (``_kh`` first) match a row of ``probe``,
    as ``schema``: one batched multi-get by hash, then an exact match that drops hash collisions.
    Empty (typed) when nothing matches or the table has no state yet."""
    found = table.lookup(probe[KH].unique().to_numpy()) if table is not None and probe.height else None
    if found is None:
        return pl.DataFrame(schema=dict(schema))
    found = found.select(list(schema)).cast(dict(schema))
    return found.join(probe.select(on).unique(), on=on, how="semi", nulls_equal=True)
