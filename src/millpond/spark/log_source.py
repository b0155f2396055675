"""The ``millpond`` Spark data source: a batch read of a log channel's sequence range.

    spark.read.format("millpond").option("root", ROOT).option("channel", "visit@1")
         .option("from", 0).option("to", 1000).load()

Planning (on the driver) lists the channel's segments; each segment is one input partition
read by a worker straight from object storage. The coordinator passes the segment list and
schema it already knows (options ``segments`` and ``schema``) so an epoch lists nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from millpond.log.channel import Segment, list_segments, read_segment
from millpond.store.objects import open_store

__all__ = ["LogDataSource", "register"]


@dataclass
class _SegmentPartition(InputPartition):
    segments: list[tuple[str, int, int]]
    start: int
    stop: int


class LogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "millpond"

    def schema(self) -> str:
        if "schema" in self.options:
            return self.options["schema"]
        raise ValueError("the millpond source needs the option 'schema' (a Spark DDL string)")

    def reader(self, schema) -> DataSourceReader:  # noqa: ANN001
        return _LogReader(dict(self.options))


class _LogReader(DataSourceReader):
    def __init__(self, options: dict[str, str]):
        for required in ("root", "channel"):
            if required not in options:
                raise ValueError(f"the millpond source needs the option {required!r}")
        self.root = options["root"]
        self.storage = json.loads(options.get("storage", "{}"))
        self.start = int(options.get("from", 0))
        self.stop = int(options.get("to", 2**62))
        if "segments" in options:
            self.segments = [tuple(s) for s in json.loads(options["segments"])]
        else:
            store = open_store(self.root, self.storage)
            self.segments = [(s.key, s.first, s.count) for s in list_segments(store, options["channel"])]
        self.segments = [s for s in self.segments if s[1] < self.stop and s[1] + s[2] > self.start]

    def partitions(self) -> list[InputPartition]:
        # Group segments so that one epoch is a handful of tasks, not one per append.
        groups = max(1, min(len(self.segments), 8))
        per = -(-len(self.segments) // groups) if self.segments else 1
        parts = [self.segments[i:i + per] for i in range(0, len(self.segments), per)] or [[]]
        return [_SegmentPartition(p, self.start, self.stop) for p in parts]

    def read(self, partition: _SegmentPartition) -> Iterator[pa.RecordBatch]:
        store = open_store(self.root, self.storage)
        for key, first, count in partition.segments:
            table = read_segment(store, Segment(key, first, count), partition.start, partition.stop)
            yield from table.to_batches()


def register(spark) -> None:  # noqa: ANN001
    """Register the ``millpond`` data source on ``spark`` (idempotent)."""
    spark.dataSource.register(LogDataSource)
