"""Writes into a SQL table's channel, by every path (the Python log API, ``millpond log append``,
the Spark batch and streaming writers): conformed to the table (``_w``/``_row_id`` filled in as
millpond's own insert does) or refused before anything is acknowledged; and, while a Database is
open on the root, forwarded to it (log/forward.py), from this process or another, exactly once."""

import io
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import millpond
from millpond.cli import main
from millpond.errors import CatalogError, MillpondError, SchemaError, StorageError
from millpond.log import Log
from millpond.log import forward as fwd
from millpond.store.objects import ObjectStore
from tests.conftest import rows
from tests.log import inbox_empty


def _cli_append(monkeypatch, capsys, root, channel, lines):
    monkeypatch.setattr(sys, "stdin", type("S", (), {"buffer": io.BytesIO(lines.encode())})())
    code = main(["log", "append", root, channel])
    out = capsys.readouterr()
    return code, out.out, out.err


def _records(db, table):
    return db.runtime.log.channel(table).read().to_pydict()


def test_cli_append_into_a_table_is_inserted_with_the_database_open_or_not(open_db, root, monkeypatch, capsys):
    db = open_db()
    db.sql("CREATE TABLE visit (product VARCHAR, n INT); CREATE TABLE kv (k VARCHAR PRIMARY KEY, v INT)")
    db.sql("CREATE MATERIALIZED VIEW total AS SELECT COUNT(*) AS c, SUM(n) AS s FROM visit")
    db.insert("visit", pa.table({"product": ["x"], "n": [1]}))
    code, out, err = _cli_append(monkeypatch, capsys, root, "visit", '{"product": "a", "n": 2}\n{"product": "b", "n": 3}\n')
    assert code == 0, err
    assert (json.loads(out)["first"], json.loads(out)["end"]) == (1, 3)  # forwarded to the open Database
    assert _cli_append(monkeypatch, capsys, root, "kv", '{"k": "a", "v": 1}\n{"k": "b", "v": 2}\n')[0] == 0
    assert _cli_append(monkeypatch, capsys, root, "kv", '{"k": "a", "v": 10}\n')[0] == 0  # an upsert
    code, _, err = _cli_append(monkeypatch, capsys, root, "visit", '{"product": "c", "n": 4, "_w": -1}\n')
    assert code == 1 and "unknown field '_w'" in err  # millpond's own columns are not input
    db.flush()
    assert rows(db.sql("SELECT * FROM visit")) == [("a", 2), ("b", 3), ("x", 1)]
    assert rows(db.read("total")) == [(3, 6)]
    assert rows(db.sql("SELECT * FROM kv")) == [("a", 10), ("b", 2)]
    assert _records(db, "visit")["_row_id"] == [0, 1, 2] and _records(db, "visit")["_w"] == [1, 1, 1]
    db.close()

    # No Database open: a key-less table's rows are appended (ids are sequence numbers) ...
    assert _cli_append(monkeypatch, capsys, root, "visit", '{"product": "d", "n": 5}\n')[0] == 0
    # ... an upsert needs the Database, and says so; nothing is appended
    code, _, err = _cli_append(monkeypatch, capsys, root, "kv", '{"k": "c", "v": 3}\n')
    assert code == 1 and "table 'kv' has a primary key (k)" in err and "Database" in err
    db = open_db()
    db.flush()
    assert rows(db.sql("SELECT * FROM visit")) == [("a", 2), ("b", 3), ("d", 5), ("x", 1)]
    assert rows(db.read("total")) == [(4, 11)] and rows(db.sql("SELECT * FROM kv")) == [("a", 10), ("b", 2)]
    assert _records(db, "visit")["_row_id"] == [0, 1, 2, 3]


def test_python_log_api_writes_rows_of_a_table_and_never_its_hidden_columns(open_db, root):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR); CREATE TABLE u (x BIGINT)")
    other = Log(ObjectStore(root))  # another handle, as a loader would open it
    other.channel("t").append({"k": [1, 2], "v": ["a", "b"]}, producer=("loader", 1))
    again = other.channel("t").append({"k": [1, 2], "v": ["a", "b"]}, producer=("loader", 1))
    assert again.duplicate  # a retried append is applied once, through the Database too
    other.channel("t").append({"k": [2], "v": ["B"]})
    with pytest.raises(SchemaError, match=r"table 'u': columns \['_row_id', '_w'\] are millpond's own"):
        other.channel("u").append({"x": [1], "_row_id": [5], "_w": [-1]})
    with pytest.raises(SchemaError, match=r"table 't': primary key column 'k' is NULL in row 0"):
        other.channel("t").append({"k": [None], "v": ["z"]})
    with pytest.raises(SchemaError, match=r"table 'u': column 'x' expects int64, got string"):
        other.channel("u").append({"x": ["nope"]})
    with pytest.raises(SchemaError, match="cannot upsert|not in a transaction"), other.transaction() as tx:
        tx.append("t", {"k": [3], "v": ["c"]})
    with other.transaction() as tx:  # a key-less table's rows are inserts: fine in a transaction
        tx.append("u", {"x": [7, 8]})
    db.flush()
    assert rows(db.sql("SELECT * FROM t")) == [(1, "a"), (2, "B")]
    assert rows(db.sql("SELECT * FROM u")) == [(7,), (8,)]
    assert inbox_empty(root)
    other.close()


def test_table_names_the_log_cannot_store_are_refused_at_create(open_db, root):
    db = open_db()
    for name, rule in [("a/b", "no '/'"), ("x" * 201, "1 to 200 bytes"), ("ä" * 101, "1 to 200 bytes"),
                       (".hidden", "no leading '.'"), ("tab\there", "no control characters")]:
        with pytest.raises(CatalogError, match=rule):
            db.sql(f'CREATE TABLE "{name}" (x INT)')
    db.sql(f'CREATE TABLE "{"y" * 200}" (x INT)')  # the longest name that fits
    Log(ObjectStore(root)).create_channel("events", pa.schema([("x", pa.int64())]))  # a plain channel ...
    with pytest.raises(CatalogError, match="a plain log channel named 'events' exists"):
        db.sql("CREATE TABLE events (x INT)")  # ... is never silently replaced by a table's
    assert sorted(db.catalog.tables) == ["y" * 200]
    db.flush()


def test_a_key_less_tables_row_ids_are_the_sequence_numbers_the_writer_gives(tmp_path):
    """No Database open: concurrent appends of rows share group commits, and every row's id is its
    sequence number, filled in while the writer numbers the records; the channel records its key."""
    log = Log(ObjectStore(str(tmp_path)))
    schema = pa.schema([("x", pa.int64()), ("_row_id", pa.int64()), ("_w", pa.int64())])
    ch = log.create_channel("t", schema, id="t1", table_key=())
    assert ch.row_schema.names == ["x"]

    def produce(k):
        for i in range(20):
            ch.append({"x": [k * 1000 + i] * (1 + i % 3)})

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = ch.read(hidden=True)
    assert got.column("_row_id").to_pylist() == got.column("_seq").to_pylist() == list(range(got.num_rows))
    assert set(got.column("_w").to_pylist()) == {1}
    log.close()
    again = Log(ObjectStore(str(tmp_path))).channel("t")
    assert again.info.table_key == () and again.read().num_rows == got.num_rows
    with pytest.raises(SchemaError, match="only the Database writes them"):
        again.append({"x": [1], "_row_id": [None], "_w": [1]})


def test_a_forwarded_append_is_applied_once_when_its_writer_dies_before_answering(tmp_path, monkeypatch):
    schema = pa.schema([("x", pa.int64())])
    holder = Log(ObjectStore(str(tmp_path)))
    holder.create_channel("c", schema).append({"x": [0]})  # holds the physical channel
    real_put = ObjectStore.put

    def crash_on_answer(self, key, data):
        if key.endswith(".done"):
            raise StorageError("the writer died before answering")
        return real_put(self, key, data)

    monkeypatch.setattr(ObjectStore, "put", crash_on_answer)
    producer = Log(ObjectStore(str(tmp_path)))
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", producer.channel("c").append({"x": [1, 2]})))
    t.start()
    deadline = time.monotonic() + 30
    while holder.channel("c").end != 3 and time.monotonic() < deadline:  # applied, but the answer never comes
        time.sleep(0.01)
    holder._inbox.stop()
    monkeypatch.setattr(ObjectStore, "put", real_put)
    holder.close()  # the writer goes away: the waiting producer takes over and serves its own request
    t.join(30)
    r = result["r"]
    assert (r.first, r.end, r.duplicate) == (1, 3, False)  # the original append, acknowledged once
    producer.refresh()
    assert producer.channel("c").read().column("x").to_pylist() == [0, 1, 2]
    assert inbox_empty(tmp_path)
    producer.close()


def test_a_forwarded_append_that_gets_no_answer_is_not_acknowledged(tmp_path):
    holder = Log(ObjectStore(str(tmp_path)))
    holder.create_channel("c", pa.schema([("x", pa.int64())])).append({"x": [0]})
    holder._inbox.stop()  # alive, holding the lock, but not serving
    producer = Log(ObjectStore(str(tmp_path)), forward_timeout=0.5)
    with pytest.raises(StorageError, match=r"did not answer within 0.5 s; the append was not acknowledged"):
        producer.channel("c").append({"x": [1]})
    assert not list(Path(tmp_path, "log").glob("p*/inbox/*"))  # withdrawn
    assert holder.channel("c").end == 1
    holder.close()
    producer.close()


def test_an_error_is_answered_and_raised_by_the_forwarder(tmp_path):
    answer = {"error": "SchemaError", "message": "table 't': no"}
    with pytest.raises(SchemaError, match="table 't': no"):
        fwd.decode_answer(answer, own=True)
    with pytest.raises(MillpondError, match="x"):
        fwd.decode_answer({"error": "KeyError", "message": "x"}, own=True)


def test_spark_batch_writer_into_a_keyed_table_upserts_once(open_db, spark, root):
    db = open_db()
    db.sql("CREATE TABLE kv (k BIGINT PRIMARY KEY, v VARCHAR)")
    df = spark.createDataFrame([(1, "a"), (2, "b")], "k long, v string")

    def save(frame, **options):
        w = frame.write.format("millpond").option("root", root).option("channel", "kv")
        for k, v in options.items():
            w = w.option(k, v)
        w.mode("append").save()

    save(df, producer="load-1", seq=1)
    save(df.selectExpr("k", "upper(v) AS v"), producer="load-1", seq=1)  # a retried save: applied once
    save(spark.createDataFrame([(2, "B")], "k long, v string"))
    with pytest.raises(Exception, match="only appends to a channel: use mode"):
        df.write.format("millpond").option("root", root).option("channel", "kv").mode("overwrite").save()
    with pytest.raises(Exception, match=r"columns \['_w'\] are millpond's own"):
        save(df.selectExpr("k", "v", "1L AS _w"))
    db.flush()
    assert rows(db.sql("SELECT * FROM kv")) == [(1, "a"), (2, "B")]


def test_spark_stream_feeds_a_table_with_a_view_in_the_databases_process(open_db, spark, root, tmp_path):
    """The README's sink into a table while the Database is open: 20,000 rows through several
    micro-batches, then FLUSH; a replayed batch (Spark lost its commit record) and a restarted
    query add nothing twice."""
    raw, ck = str(tmp_path / "raw"), str(tmp_path / "ck")
    src = Log(ObjectStore(raw)).create_channel("raw", pa.schema([("x", pa.int64())]))
    src.append({"x": np.arange(20_000)})
    db = open_db()
    db.sql("CREATE TABLE t (x BIGINT, s VARCHAR); "
           "CREATE MATERIALIZED VIEW agg AS SELECT COUNT(*) AS n, COUNT(DISTINCT x) AS d, SUM(x) AS s FROM t")

    def run():
        (spark.readStream.format("millpond").option("root", raw).option("channel", "raw")
         .option("maxRecordsPerTrigger", 10_000).load().selectExpr("x", "CAST(x % 7 AS STRING) AS s")
         .writeStream.format("millpond").option("root", root).option("channel", "t")
         .option("checkpointLocation", ck).trigger(availableNow=True).start().awaitTermination(120))

    run()
    db.flush()
    assert rows(db.read("agg")) == [(20_000, 20_000, sum(range(20_000)))]
    commits = sorted((p for p in Path(ck, "commits").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert len(commits) == 2
    commits[-1].unlink()  # a crash after the sink's commit, before Spark recorded it
    Path(commits[-1].parent, f".{commits[-1].name}.crc").unlink(missing_ok=True)
    src.append({"x": np.arange(20_000, 21_000)})
    run()  # the same checkpoint: the last batch is replayed (applied once), then only what is new
    db.flush()
    assert rows(db.read("agg")) == [(21_000, 21_000, sum(range(21_000)))]
    ids = db.runtime.log.channel("t").read().column("_row_id").to_numpy()
    assert len(ids) == 21_000 and len(np.unique(ids)) == 21_000
    assert inbox_empty(root) and not list(Path(root, "log", "staging").rglob("*.arrow"))
    src.log.close()


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from millpond.log import Log
    from millpond.store.objects import ObjectStore
    root, first, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    log = Log(ObjectStore(root))
    ch = log.channel("t")
    for b in range(batches):
        xs = np.arange(first + b * 100, first + b * 100 + 100)
        r = ch.append({"x": xs}, producer=(f"w{first}", b))
        if b % 5 == 0:  # a retry of an acknowledged append: applied once
            assert ch.append({"x": xs}, producer=(f"w{first}", b)).duplicate
        print(r.first, r.end, flush=True)
    log.close()
""")


def test_other_processes_write_a_table_while_the_database_is_open(spark, root):
    """Two loader processes (the Python log API), ``millpond log append`` and this process's
    inserts, into one key-less table, while the Database runs epochs in the background: nothing
    lost, nothing doubled, no row id handed out twice."""
    db = millpond.connect(root, spark=spark, interval=0.2)
    try:
        db.sql("CREATE TABLE t (x BIGINT); CREATE MATERIALIZED VIEW agg AS SELECT COUNT(*) AS n, SUM(x) AS s FROM t")
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, root, str(first), "15"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for first in (0, 1_000_000)]
        mine = np.arange(2_000_000, 2_000_000 + 1_500)
        for part in np.array_split(mine, 15):
            db.insert("t", pa.table({"x": part}))
        cli = subprocess.run([sys.executable, "-m", "millpond.cli", "log", "append", root, "t"], input='{"x": -1}\n',
                             capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        mine = np.append(mine, -1)
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            assert len(out.splitlines()) == 15
        db.flush()
        want = np.concatenate([np.arange(0, 1_500), np.arange(1_000_000, 1_001_500), mine])
        assert rows(db.read("agg")) == [(4_501, int(want.sum()))]
        got = db.runtime.log.channel("t").read()
        assert sorted(got.column("x").to_pylist()) == sorted(want.tolist())
        assert len(set(got.column("_row_id").to_pylist())) == 4_501
    finally:
        db.close()


HOLDER = textwrap.dedent("""
    import sys, threading
    from millpond.log import Log
    from millpond.store.objects import ObjectStore
    log = Log(ObjectStore(sys.argv[1]))
    log.writer(log.channel("c").info.pchannel)  # holds the physical channel and serves forwarded appends
    print("HOLDING", flush=True)
    threading.Event().wait()
""")


def test_sigkill_of_the_writer_serving_forwarded_appends_loses_and_doubles_nothing(tmp_path):
    """A process holds the channel and serves this process's forwarded appends (4 threads, half with
    their own producers); it is SIGKILLed at random moments, the waiting appends take the lock
    over and finish, the next holder starts. Every acknowledged append is there exactly once."""
    import random
    import signal

    root = str(tmp_path)
    Log(ObjectStore(root)).create_channel("c", pa.schema([("x", pa.int64())]))
    rng = random.Random(5)
    acked: dict[int, tuple[int, int]] = {}
    lock = threading.Lock()
    next_x = iter(range(1, 10**9))
    for cycle in range(5):
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, root], stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "HOLDING"
        log = Log(ObjectStore(root))
        stop = threading.Event()

        def produce(k, log=log, stop=stop):
            ch = log.channel("c")
            while not stop.is_set():
                with lock:
                    x = next(next_x)
                r = ch.append({"x": [x, -x]}, producer=(f"p{k}", x) if k % 2 else None)
                with lock:
                    acked[x] = (r.first, r.end)

        threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.2, 0.8))
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        time.sleep(rng.uniform(0.3, 0.6))  # the waiting appends take over; new ones are this process's own
        stop.set()
        for t in threads:
            t.join(60)
        log.close()
    log = Log(ObjectStore(root))
    xs = log.channel("c").read().column("x").to_numpy()
    assert len(acked) > 20
    assert len(np.unique(xs)) == len(xs)  # nothing doubled (unacknowledged appends may be there once)
    where = {int(x): i for i, x in enumerate(xs)}
    for x, (first, end) in acked.items():
        assert x in where and -x in where, f"acknowledged append {x} is lost"
        if first >= 0:  # a range is known for every append but a crash-answered retry of a producer's
            assert (where[x], where[-x]) == (first, first + 1)
    log.close()
