"""The ``millpond`` Spark data source: batch ranges, a streaming reader with admission control
and availableNow, and an exactly-once streaming sink."""

from pathlib import Path

import pyarrow as pa
import pytest

import millpond
from millpond.log import Log
from millpond.store.objects import ObjectStore

SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])


@pytest.fixture(autouse=True)
def _registered(spark):
    millpond.register(spark)


def _channel(root, name="visit"):
    return Log(ObjectStore(root)).create_channel(name, SCHEMA)


def _append(ch, xs):
    ch.append({"x": xs, "s": [f"v{x}" for x in xs]})


def test_batch_read_of_a_sequence_range(spark, tmp_path):
    root = str(tmp_path)
    ch = _channel(root)
    _append(ch, [0, 1, 2])
    _append(ch, [3, 4])
    ch.log.close()
    df = spark.read.format("millpond").option("root", root).option("channel", "visit").option("from", 2) \
        .option("to", 4).load()
    assert df.columns == ["x", "s", "_seq", "_tick"]  # the schema comes from the channel
    assert sorted((r.x, r._seq) for r in df.collect()) == [(2, 2), (3, 3)]
    assert spark.read.format("millpond").option("root", root).option("channel", "visit").load().count() == 5
    with pytest.raises(Exception, match="log channel 'nope' does not exist"):
        spark.read.format("millpond").option("root", root).option("channel", "nope").load()


def test_a_tables_channel_has_the_tables_name(open_db, spark, root):
    db = open_db()
    db.sql("CREATE TABLE visit (product VARCHAR, n INT)")
    db.insert("visit", pa.table({"product": ["a", "b"], "n": [1, 2]}))
    db.sql("DELETE FROM visit WHERE product = 'a'")
    df = spark.read.format("millpond").option("root", root).option("channel", "visit").load()
    changes = sorted((r.product, r.n, r._w) for r in df.collect())
    assert changes == [("a", 1, -1), ("a", 1, 1), ("b", 2, 1)]  # the table's changelog


def test_stream_read_with_max_records_and_available_now(spark, tmp_path):
    root, ck = str(tmp_path / "root"), str(tmp_path / "ck")
    ch = _channel(root)
    for i in range(10):
        _append(ch, list(range(i * 10, i * 10 + 10)))
    sizes, seen = [], []

    def collect(df, batch_id):
        rows = df.collect()
        sizes.append(len(rows))
        seen.extend(r.x for r in rows)

    def run():
        (spark.readStream.format("millpond").option("root", root).option("channel", "visit")
         .option("maxRecordsPerTrigger", 30).load()
         .writeStream.foreachBatch(collect).option("checkpointLocation", ck).trigger(availableNow=True)
         .start().awaitTermination(120))

    run()
    assert sizes == [30, 30, 30, 10]
    assert sorted(seen) == list(range(100))
    _append(ch, [100, 101])
    sizes.clear()
    run()  # restarted from the checkpoint: only what is new
    assert sizes == [2] and sorted(seen) == list(range(102))


def test_stream_sink_is_exactly_once_per_batch(spark, tmp_path):
    root, ck = str(tmp_path / "root"), str(tmp_path / "ck")
    src = _channel(root, "raw")
    for i in range(4):
        _append(src, [i * 2, i * 2 + 1])
    src.log.close()

    def run():
        (spark.readStream.format("millpond").option("root", root).option("channel", "raw")
         .option("maxRecordsPerTrigger", 4).load().selectExpr("x * 10 AS x", "s")
         .writeStream.format("millpond").option("root", root).option("channel", "tens")
         .option("checkpointLocation", ck).trigger(availableNow=True).start().awaitTermination(120))

    run()
    out = Log(ObjectStore(root)).channel("tens")
    assert sorted(out.read().column("x").to_pylist()) == [x * 10 for x in range(8)]
    # Spark lost its commit record of the last batch (a crash after the sink's commit): it
    # replays that batch id over the same offsets, and the sink must not append it again.
    commits = sorted(Path(ck, "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    Path(last.parent, f".{last.name}.crc").unlink(missing_ok=True)
    run()
    assert last.exists()  # the batch was replayed ...
    again = Log(ObjectStore(root)).channel("tens")
    assert again.end == 8  # ... and applied once
    assert sorted(again.read().column("x").to_pylist()) == [x * 10 for x in range(8)]
    assert not list(Path(root, "log", "staging").rglob("*.arrow"))  # staged files are cleaned up


def test_a_range_is_cut_into_partitions_that_read_each_record_once(spark, tmp_path, monkeypatch):
    from millpond.spark import log_source

    root = str(tmp_path)
    ch = _channel(root)
    for first in range(0, 1200, 300):  # four pieces of 300 records
        _append(ch, list(range(first, first + 300)))
    pieces = ch.pieces(0, 1200)
    monkeypatch.setattr(log_source, "_MIN_PARTITION_ROWS", 100)
    monkeypatch.setattr(log_source, "MAX_PARTITION_ROWS", 500)
    cut = log_source._partitions(ch.info.id, ch.schema, pieces, 50, 1150, parallelism=2)
    assert [(p.start, p.stop, len(p.pieces)) for p in cut] == [(50, 416, 2), (416, 783, 2), (783, 1150, 2)]
    cut = log_source._partitions(ch.info.id, ch.schema, pieces, 0, 150, parallelism=8)  # >= 100 records each
    assert [(p.start, p.stop) for p in cut] == [(0, 150)]
    _append(ch, list(range(1200, 121200)))  # Spark plans in a worker, with the real bounds (>= 50,000 each)
    ch.log.close()
    df = spark.read.format("millpond").option("root", root).option("channel", "visit").option("from", 50) \
        .option("to", 121150).option("parallelism", 4).load()
    assert df.rdd.getNumPartitions() == 2
    xs = df.select("x").toArrow().column("x").to_numpy()
    assert len(xs) == 121100 and (sorted(xs) == list(range(50, 121150)))
