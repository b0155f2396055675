"""What a sink writes to (:mod:`millpond.engine.sinks`): a :class:`Target`, made by a connector
(:func:`millpond.connectors.target_of`, handed to the runtime by the entry points): Delta Lake and
Iceberg tables (:mod:`millpond.connectors.lake_sinks`), a PostgreSQL table
(:mod:`millpond.connectors.postgres_sink`), a Kafka topic (:mod:`millpond.connectors.kafka_sink`).

A target takes two kinds of write, each **one commit** of the target that also records the last
epoch it holds under the sink's token, and reads that epoch back (:meth:`Target.written`):

- ``append(rows)``: rows added as they are;
- ``upsert(rows, key)``: ``rows`` hold the source's columns and ``_op``: ``'u'`` rows replace the
  row of their key or are added, ``'d'`` rows delete it (key columns compared with NULLs equal).
"""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

__all__ = ["Target", "OP", "UPSERT", "DELETE", "COMPACT_EVERY"]

OP = "_op"
UPSERT, DELETE = "u", "d"
COMPACT_EVERY = 100  # a sink's writes between two compactions of its target's small files (this process)


class Target(Protocol):
    def rows(self) -> int | None: ...  # rows in the table (None: no table yet)
    def written(self, token: str) -> int | None: ...  # the last epoch held under token (None: none)
    def append(self, rows: pa.Table, token: str, epoch: int) -> None: ...
    def upsert(self, rows: pa.Table, key: tuple[str, ...], token: str, epoch: int) -> None: ...
    def compact(self) -> None: ...
    def forget(self) -> None: ...  # open the table anew next time (after a failed write)
    def files(self) -> int: ...  # data files of the current version
