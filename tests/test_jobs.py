"""A view's backfill is a job (``SHOW JOBS`` / ``millpond_jobs``): seen while it runs from the writer
(without waiting for the epoch: a SHOW JOBS takes no lock) and from a second, read-only Database on
the root (which reads what the writer publishes), with the records it reads and the epoch's Spark
tasks moving; gone from both once the epoch commits."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

import millpond


def _slow(v: int) -> int:
    import time

    time.sleep(0.01)
    return v * 2


def test_a_backfill_is_a_job_seen_from_a_second_process(open_db, root):
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v BIGINT)")
    db.insert("t", pa.table({"k": pa.array(range(600), pa.int32()), "v": pa.array(range(600), pa.int64())}))
    db.flush()
    db.create_function(_slow, params=["BIGINT"], returns="BIGINT", name="slow")
    reader = millpond.connect(root, read_only=True)
    assert reader.sql("SHOW JOBS").num_rows == 0
    failure: list[BaseException] = []

    def backfill() -> None:
        try:
            db.sql("CREATE MATERIALIZED VIEW doubled AS SELECT k, slow(v) AS w FROM t")
            db.flush()
        except BaseException as exc:  # noqa: BLE001 - said below
            failure.append(exc)

    worker = threading.Thread(target=backfill)
    worker.start()
    seen, here_seen, moving = [], [], False
    try:
        deadline = time.monotonic() + 300
        while worker.is_alive() and time.monotonic() < deadline:
            jobs = reader.sql("SHOW JOBS").to_pylist()
            here = db.sql("SHOW JOBS").to_pylist()  # what the writer's connections see, while the epoch runs
            here_seen.extend(j["relation"] for j in here)
            if jobs:
                seen.append(jobs[0])
                moving = moving or (jobs[0]["tasks_total"] or 0) > 0
            time.sleep(0.1)
        worker.join(300)
        assert not failure, failure
        assert seen, "the backfill was never seen in SHOW JOBS from the read-only Database"
        # the writer's own SHOW JOBS saw it too (sampled beside the reader's: the two may straddle its end)
        assert set(here_seen) == {"doubled"}, here_seen
        job = seen[-1]
        assert (job["kind"], job["relation"], job["records"]) == ("backfill", "doubled", 600)
        assert job["job"] == db.epoch  # the epoch that filled it
        assert moving, "the epoch's Spark tasks never showed"
        assert all(0 <= (j["progress"] or 0) <= 1 for j in seen)
        assert db.sql("SHOW JOBS").num_rows == 0 and db.sql("SELECT * FROM millpond_jobs").num_rows == 0
        deadline = time.monotonic() + 30
        while reader.sql("SHOW JOBS").num_rows and time.monotonic() < deadline:
            time.sleep(0.2)
        assert reader.sql("SHOW JOBS").num_rows == 0, "the job stayed after its epoch committed"
        assert db.sql("SELECT count(*) AS n, sum(w) AS s FROM doubled").to_pylist() == [
            {"n": 600, "s": 2 * sum(range(600))}]
    finally:
        reader.close()


def _wait_for_job(db, relation: str, deadline: float = 300) -> dict:  # noqa: ANN001
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        jobs = [j for j in db.sql("SHOW JOBS").to_pylist() if j["relation"] == relation]
        if jobs:
            return jobs[0]
        time.sleep(0.05)
    raise AssertionError(f"no job for {relation} in SHOW JOBS")


def test_cancel_job_drops_a_new_view_or_an_altered_views_new_definition(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v BIGINT)")
    db.insert("t", pa.table({"k": pa.array(range(600), pa.int32()), "v": pa.array(range(600), pa.int64())}))
    db.sql("CREATE MATERIALIZED VIEW total AS SELECT sum(v) AS s FROM t")
    db.flush()
    db.create_function(_slow, params=["BIGINT"], returns="BIGINT", name="slow")
    for statement, relation in (("CREATE MATERIALIZED VIEW doubled AS SELECT k, slow(v) AS w FROM t", "doubled"),
                                ("ALTER MATERIALIZED VIEW total AS SELECT sum(slow(v)) AS s FROM t", "total")):
        failure: list[BaseException] = []

        def backfill() -> None:
            try:
                db.sql(statement)
                db.flush()
            except BaseException as exc:  # noqa: BLE001 - said below
                failure.append(exc)

        worker = threading.Thread(target=backfill)
        started = time.monotonic()
        worker.start()
        job = _wait_for_job(db, relation)
        assert job["kind"] == ("backfill" if relation == "doubled" else "alter")
        cancelled = db.sql(f"CANCEL JOB {job['job']}").to_pylist()
        assert cancelled == [{"job": job["job"], "kind": job["kind"], "relation": relation}]
        worker.join(300)
        assert not failure, failure
        assert time.monotonic() - started < 300
        assert "doubled" not in db.catalog.views and not db.catalog.replacing
        assert db.sql("SELECT * FROM total").to_pylist() == [{"s": sum(range(600))}]  # the old definition
        assert db.sql("SHOW JOBS").num_rows == 0
    with pytest.raises(millpond.MillpondError, match="job 12345 is not running"):
        db.sql("CANCEL JOB 12345")
    with pytest.raises(millpond.MillpondError, match=r"expected CANCEL JOB <n>"):
        db.sql("CANCEL JOB everything")
    db.insert("t", pa.table({"k": pa.array([1000], pa.int32()), "v": pa.array([5], pa.int64())}))
    db.flush()  # epochs go on
    assert db.sql("SELECT * FROM total").to_pylist() == [{"s": sum(range(600)) + 5}]


def test_a_sources_read_and_a_sinks_first_write_are_jobs_while_they_run(open_db, tmp_path, monkeypatch):
    """Work outside an epoch's job — a source table's read before the epoch, a sink's first write of
    its view's rows — shows in SHOW JOBS while it runs (here made slow, to be seen)."""
    import pyarrow.parquet as pq

    from millpond.connectors.files import Files
    from millpond.engine.sinks import Sinks

    folder = tmp_path / "landing"
    folder.mkdir()
    pq.write_table(pa.table({"k": pa.array([1, 2, 3], pa.int32())}), folder / "a.parquet")
    db = open_db()
    db.sql(f"CREATE TABLE landing (k INT) WITH (connector = 'files', path = '{folder}', format = 'parquet')")
    db.sql("CREATE MATERIALIZED VIEW n AS SELECT k % 2 AS odd, count(*) AS c FROM landing GROUP BY k % 2")
    seen: list[dict] = []
    for cls, name in ((Files, "ingest"), (Sinks, "_put")):
        original = getattr(cls, name)

        def slowly(*args, _original=original, **kwargs):  # noqa: ANN002, ANN003, ANN202
            time.sleep(1.5)
            seen.extend(db.sql("SHOW JOBS").to_pylist())  # from inside the work: the job is there
            out = _original(*args, **kwargs)
            seen.extend(db.sql("SHOW JOBS").to_pylist())  # and its rows taken in so far
            return out
        monkeypatch.setattr(cls, name, slowly)
    db.flush()
    db.sql(f"CREATE SINK out FROM n WITH (connector = 'deltalake', location = '{tmp_path / 'out'}', type = 'upsert')")
    kinds = {(j["kind"], j["relation"]) for j in seen}
    assert ("source", "landing") in kinds and ("sink", "out") in kinds
    source = [j for j in seen if j["kind"] == "source"]
    assert source[0]["records"] is None  # nothing taken in yet; then the file's rows, and their rate
    assert any(j["records"] == 3 and j["records_per_second"] > 0 for j in source), source
    assert [j["progress"] for j in source if j["records"] == 3] == [1.0]  # the new files' bytes, all read
    sink = next(j for j in seen if j["kind"] == "sink")
    assert sink["seconds"] >= 1.0
    assert db.sql("SHOW JOBS").num_rows == 0
    assert sorted(db.sql("SELECT c FROM n").column(0).to_pylist()) == [1, 2]


def test_flush_progress_names_the_jobs_as_show_jobs_does():
    from millpond.progress import describe_jobs

    rows = [{"job": 4, "kind": "backfill", "relation": "doubled", "records": 600, "progress": 0.4},
            {"job": 4, "kind": "source", "relation": "landing", "records": None, "progress": None},
            {"job": 4, "kind": "compaction", "relation": "t", "records": None, "progress": 0.25}]
    assert describe_jobs(rows) == "; backfill doubled (600 records, 40%); source landing; compaction t (25%)"
    assert describe_jobs([]) == ""


def test_a_compaction_round_is_a_job_while_it_runs(open_db):
    """A round of state compaction shows in SHOW JOBS while it merges (its runner made slow, to be
    seen): kind compaction, the relation whose state it merges, the rows it reads."""
    from millpond.store.compaction import Policy

    db = open_db()
    state = db.runtime.coordinator.state
    state.policy = Policy(l0_trigger=2, l0_stall=50)
    real, seen = state.runner, []

    def slowly(store, tasks):  # noqa: ANN001, ANN202
        time.sleep(1.0)
        seen.extend(db.sql("SHOW JOBS").to_pylist())
        return real(store, tasks)
    state.runner = slowly
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v BIGINT)")
    for i in range(3):
        db.insert("t", pa.table({"k": pa.array(range(i * 100, i * 100 + 100), pa.int32()),
                                 "v": pa.array([1] * 100, pa.int64())}))
        db.flush()
    state.compact()
    jobs = [j for j in seen if j["kind"] == "compaction"]
    assert jobs and jobs[0]["relation"] == "t" and jobs[0]["records"] >= 200 and jobs[0]["seconds"] >= 1.0
    assert db.sql("SHOW JOBS").num_rows == 0
    assert db.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 300}]


def test_a_backfill_in_bounded_epochs_is_one_job_across_them(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v BIGINT)")
    db.insert("t", pa.table({"k": pa.array(range(600), pa.int32()), "v": pa.array(range(600), pa.int64())}))
    db.flush()
    db.create_function(_slow, params=["BIGINT"], returns="BIGINT", name="slow")
    db.sql("SET backfill_rows = 200")  # three parts of the table's rows, an epoch each
    db.sql("CREATE TABLE clicks (n INT)")
    failure: list[BaseException] = []

    def backfill() -> None:
        try:
            db.sql("CREATE MATERIALIZED VIEW doubled AS SELECT k, slow(v) AS w FROM t")
            while True:  # a click before every epoch: other work waits, the backfill's epochs are bounded
                db.sql("INSERT INTO clicks VALUES (1)")
                db.runtime.run_epoch()
                if db.runtime.populated("doubled"):
                    break
        except BaseException as exc:  # noqa: BLE001 - said below
            failure.append(exc)

    worker = threading.Thread(target=backfill)
    worker.start()
    seen = []
    deadline = time.monotonic() + 300
    while worker.is_alive() and time.monotonic() < deadline:
        seen += [j for j in db.sql("SHOW JOBS").to_pylist() if j["relation"] == "doubled"]
        time.sleep(0.05)
    worker.join(300)
    assert not failure, failure
    epochs = sorted({j["job"] for j in seen})
    assert len(epochs) >= 2, f"the backfill was seen in {epochs} only"  # one job row across its epochs
    assert {j["records"] for j in seen} == {600} and {j["kind"] for j in seen} == {"backfill"}
    assert len({j["started"] for j in seen}) == 1  # since its first epoch
    by_epoch = {e: [j["progress"] or 0 for j in seen if j["job"] == e] for e in epochs}
    assert all(0 <= p <= 1 for ps in by_epoch.values() for p in ps)
    assert min(by_epoch[epochs[-1]]) >= 1 / 3 - 1e-9, by_epoch  # the parts read before it count
    assert db.sql("SELECT count(*) AS n, sum(w) AS s FROM doubled").to_pylist() == [
        {"n": 600, "s": 2 * sum(range(600))}]
    assert db.sql("SHOW JOBS").num_rows == 0


def test_a_delta_tables_snapshot_shows_its_progress_by_its_files(open_db, tmp_path, monkeypatch):
    """A source's read that knows what it has to do says so: a Delta table's snapshot, read a group
    of files an append, shows the share of its files read (a folder's new files: their bytes)."""
    from deltalake import write_deltalake

    from millpond.connectors import versioned

    location = str(tmp_path / "events")
    for i in range(6):  # six versions, a file each: the snapshot's six files
        write_deltalake(location, pa.table({"g": [f"g{i}"], "v": pa.array([i], pa.int32())}), mode="append")
    monkeypatch.setattr(versioned, "SNAPSHOT_FILES", 2)  # three appends of two files
    db = open_db()
    seen: list[float | None] = []
    original = versioned.Versioned._append

    def append(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.extend(j["progress"] for j in db.sql("SHOW JOBS").to_pylist() if j["kind"] == "source")
        return original(*args, **kwargs)
    monkeypatch.setattr(versioned.Versioned, "_append", append)
    db.sql(f"CREATE TABLE ev WITH (connector = 'deltalake', location = '{location}')")
    db.sql("CREATE MATERIALIZED VIEW s AS SELECT count(*) AS n, sum(v) AS total FROM ev")
    db.flush()
    assert seen == pytest.approx([0.0, 1 / 3, 2 / 3]), seen  # before each append: the files read so far
    assert db.sql("SELECT * FROM s").to_pylist() == [{"n": 6, "total": 15}]
