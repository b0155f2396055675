"""Log channels: sequence numbers, durable whole-batch appends, range reads, fencing."""

import pyarrow as pa
import pytest

from millpond.errors import FencedError, SchemaError
from millpond.log import Log
from millpond.store.objects import ObjectStore

SCHEMA = pa.schema([("x", pa.int64()), ("_w", pa.int64())])


def _batch(xs):
    return pa.table({"x": xs, "_w": [1] * len(xs)}, schema=SCHEMA)


def test_append_returns_sequences_and_reads_ranges(tmp_path):
    ch = Log(ObjectStore(str(tmp_path))).channel("t@1", SCHEMA)
    assert ch.append(_batch([1, 2, 3])) == (0, 3)
    assert ch.append(_batch([4, 5])) == (3, 5)
    assert ch.read(2, 4).column("x").to_pylist() == [3, 4]
    assert ch.read(0, 5).num_rows == 5
    # reopening (a new process) finds the same end and data
    again = Log(ObjectStore(str(tmp_path))).channel("t@1", SCHEMA)
    assert again.end == 5
    assert again.read(4, 5).column("x").to_pylist() == [5]


def test_second_writer_is_fenced(tmp_path):
    a = Log(ObjectStore(str(tmp_path))).channel("t@1", SCHEMA)
    b = Log(ObjectStore(str(tmp_path))).channel("t@1", SCHEMA)
    a.append(_batch([1]))
    with pytest.raises(FencedError, match="sequence 0"):
        b.append(_batch([2]))
    assert a.read(0, 1).column("x").to_pylist() == [1]


def test_wrong_schema_appends_nothing(tmp_path):
    ch = Log(ObjectStore(str(tmp_path))).channel("t@1", SCHEMA)
    with pytest.raises(SchemaError, match="t@1"):
        ch.append(pa.table({"y": [1]}))
    assert ch.end == 0
