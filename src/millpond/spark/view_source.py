"""A view's (or table's, or flow's) changes through the ``millpond`` Spark data source, option
``view``::

    spark.readStream.format("millpond").option("root", ROOT).option("view", "v").load()
        # one row per change: the view's columns, _w (+1/-1) and _epoch; offsets are epochs
    spark.read.format("millpond").option("root", ROOT).option("view", "v")[.option("epoch", e)].load()
        # the committed rows (as of epoch e), as inserts: _w = 1, _epoch = the epoch read

Both shapes carry ``_w`` and ``_epoch`` (a data source has one schema for batch and stream reads);
``.drop("_w", "_epoch")`` leaves the rows. The stream starts at ``startingEpoch``: ``earliest``
(the default: every change since the view's first epoch, if retention still keeps them),
``latest`` (the changes after the epoch committed when the query starts), or an epoch number; a
micro-batch reads the epochs ``(start, end]`` of its offsets, each kept as an immutable file by
its commit (:mod:`millpond.engine.changefeed`), so a replayed batch reads the same rows: with an
idempotent sink (``foreachBatch`` keyed by batch id, the millpond sink) a restarted query takes
each change exactly once. ``maxEpochsPerTrigger`` caps a micro-batch.

Workers open the root read-only (:meth:`millpond.engine.readonly.ReadOnlyRuntime.open`): they
run the plans stored with the views, start no Spark and write nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from millpond.engine.readonly import ReadOnlyRuntime
from millpond.errors import MillpondError
from millpond.store.objects import open_store

__all__ = ["view_schema", "ViewBatchReader", "ViewStreamReader"]


@dataclass
class _Epochs(InputPartition):
    start: int  # a stream: the changes of epochs (start, stop]; a batch read: the rows as of stop
    stop: int


def _open(options: dict[str, str]) -> tuple[ReadOnlyRuntime, str]:
    if "root" not in options:
        raise MillpondError("the millpond data source needs the option 'root'")
    rt = ReadOnlyRuntime.open(open_store(options["root"], json.loads(options.get("storage", "{}"))))
    return rt, options["view"]


def view_schema(options: dict[str, str]) -> str:
    """The Spark schema of a view's changes (DDL)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    rt, name = _open(options)
    try:
        return from_arrow_schema(rt.changelog_schema(name)).simpleString()
    finally:
        rt.close()


def _opt(options: dict[str, str], name: str) -> str | None:
    return {k.lower(): v for k, v in options.items()}.get(name.lower())  # Spark may lower-case option names


class ViewBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]):
        self.options = options
        rt, self.name = _open(options)
        try:
            epoch = _opt(options, "epoch")
            self.epoch = rt.epoch if epoch is None else int(epoch)
            rt.rows_at(self.name, self.epoch).schema  # noqa: B018  fails here, on the driver, if it cannot be read
        finally:
            rt.close()

    def partitions(self) -> list[InputPartition]:
        return [_Epochs(self.epoch, self.epoch)]

    def read(self, partition: _Epochs) -> Iterator[pa.RecordBatch]:
        rt, name = _open(self.options)
        try:
            _, rows = rt.subscription(name, partition.stop, True)
            yield from rows.to_batches()
        finally:
            rt.close()


class ViewStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"epoch": e}``: a batch holds the changes committed after its start epoch up
    to its end epoch."""

    def __init__(self, options: dict[str, str]):
        self.options = options
        self.name = options["view"]
        most = _opt(options, "maxEpochsPerTrigger")
        self.most = int(most) if most is not None else None
        if self.most is not None and self.most <= 0:
            raise MillpondError(f"maxEpochsPerTrigger={self.most}: use a positive number of epochs")
        self.target: int | None = None  # Trigger.AvailableNow: the epoch committed when the query starts
        self._last()  # a missing view fails here

    def _last(self) -> int:
        rt, name = _open(self.options)
        try:
            rt.changelog_schema(name)  # the name is a table, view or flow, and it has not failed
            return rt.epoch
        finally:
            rt.close()

    def initialOffset(self) -> dict:
        start = _opt(self.options, "startingEpoch") or "earliest"
        if start == "earliest":
            return {"epoch": 0}
        if start == "latest":
            return {"epoch": self._last()}
        if not start.isdigit():
            raise MillpondError(f"startingEpoch={start!r}: use earliest, latest or an epoch number")
        return {"epoch": int(start)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.most) if self.most else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._last()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self._last() if self.target is None else self.target
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["epoch"] + limit.max_rows)
        return {"epoch": max(end, start["epoch"])}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [_Epochs(start["epoch"], end["epoch"])] if end["epoch"] > start["epoch"] else []

    def read(self, partition: _Epochs) -> Iterator[pa.RecordBatch]:
        rt, name = _open(self.options)
        try:
            for change in rt.changes(name, partition.start, partition.stop):
                yield from change.to_batches()
        finally:
            rt.close()

    def commit(self, end: dict) -> None:
        pass  # positions live in Spark's checkpoint; retention keeps the changes for a while
