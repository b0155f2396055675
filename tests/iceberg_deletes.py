"""Position delete files committed to an Iceberg table, as Spark writes a ``DELETE`` with
``write.delete.mode = 'merge-on-read'``: pyiceberg reads them but writes row-level deletes
copy-on-write only. A test-only writer of the spec's position delete file (``file_path``, ``pos``,
with their reserved field ids), appended as a snapshot of its own (pyiceberg's producer puts it in a
data manifest; readers — pyiceberg's and millpond's — tell a delete file by its entry's content)."""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["delete_positions", "data_files"]

_SCHEMA = pa.schema([pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": b"2147483546"}),
                     pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"2147483545"})])


def data_files(table) -> dict[str, int]:  # noqa: ANN001
    """The table's current data files and their row counts (before deletes)."""
    return {task.file.file_path: task.file.record_count for task in table.scan().plan_files()}


def delete_positions(table, deletes: dict[str, list[int]]) -> None:  # noqa: ANN001
    """One snapshot of a position delete file marking rows (``deletes``: data file path -> positions)."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    first = next(iter(deletes))
    local = os.path.join(os.path.dirname(first.removeprefix("file://")), f"deletes-{uuid.uuid4()}.parquet")
    rows = [(f, p) for f in sorted(deletes) for p in sorted(deletes[f])]
    pq.write_table(pa.table({"file_path": [f for f, _ in rows], "pos": pa.array([p for _, p in rows], pa.int64())},
                            schema=_SCHEMA), local)
    path = f"file://{local}" if first.startswith("file://") else local
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PARQUET, partition=Record(),
        record_count=len(rows), file_size_in_bytes=os.path.getsize(local), column_sizes={}, value_counts={},
        null_value_counts={}, nan_value_counts={}, lower_bounds={}, upper_bounds={}, split_offsets=None,
        equality_ids=None, sort_order_id=None, spec_id=0)
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        append.append_data_file(delete_file)
