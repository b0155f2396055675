"""Prometheus metrics (``db.serve_metrics``, ``millpond serve --metrics-port``): the text parses with
``prometheus_client``'s own parser and its series say what happened — epochs, rows in and out per
relation, statements and their errors, each view's lag, freshness, failure and state, a source's
lag, connections — each checked against what the test did and against the system views."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of ``/metrics`` on ``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        body = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def test_the_series_say_what_happened_over_http(open_db, tmp_path):
    db = open_db()
    db.sql("CREATE TABLE t (k TEXT, v INT); "
           "CREATE MATERIALIZED VIEW s AS SELECT k, sum(v) AS total FROM t GROUP BY k; "
           "CREATE MATERIALIZED VIEW inv AS SELECT k, 10 / v AS x FROM t")
    with db.serve(port=0) as server, db.serve_metrics(port=0) as metrics:
        db.insert("t", pa.table({"k": ["a", "b", "a"], "v": pa.array([1, 2, 3], pa.int32())}))
        db.flush()
        got = _scrape(metrics.port)
        assert got[("millpond_epochs_committed_total", ())] == 1
        assert got[("millpond_epochs_failed_total", ())] == 0
        assert got[("millpond_epoch", ())] == db.epoch
        assert got[("millpond_epoch_duration_seconds_count", ())] == 1
        assert got[("millpond_epoch_duration_seconds_bucket", (("le", "+Inf"),))] == 1
        assert got[("millpond_rows_in_total", (("relation", "t"),))] == 3
        assert got[("millpond_rows_in_total", (("relation", "s"),))] == 3
        assert got[("millpond_rows_out_total", (("relation", "s"),))] == 2  # a row per key
        for view in ("s", "inv"):
            assert got[("millpond_view_lag_records", (("view", view),))] == 0
            assert got[("millpond_view_freshness_seconds", (("view", view),))] == 0
            assert got[("millpond_view_failed", (("view", view),))] == 0
        state = {r["name"]: r["state_bytes"] for r in db.sql("SELECT name, state_bytes FROM millpond_views").to_pylist()}
        assert got[("millpond_state_bytes", (("relation", "s"),))] == state["s"] > 0
        assert got[("millpond_state_files", (("relation", "s"),))] >= 1
        assert got[("millpond_connections", ())] == 0
        assert all(got[("millpond_jobs", (("kind", k),))] == 0 for k in ("backfill", "alter", "source", "sink"))
        with db.runtime.jobs.track("sink", "s_out", db.epoch, 5):  # a job under way, as a sink's first write is
            assert _scrape(metrics.port)[("millpond_jobs", (("kind", "sink"),))] == 1

        with psycopg.connect(host="127.0.0.1", port=server.port, user="u", dbname="millpond", autocommit=True) as conn:
            statements = _scrape(metrics.port)[("millpond_statement_duration_seconds_count", ())]
            assert conn.execute("SELECT total FROM s WHERE k = 'a'").fetchall() == [(4,)]
            try:
                conn.execute("SELECT nope FROM s")
            except psycopg.Error:
                pass
            got = _scrape(metrics.port)
            assert got[("millpond_connections", ())] == 1
            assert got[("millpond_statement_duration_seconds_count", ())] >= statements + 2
            assert got[("millpond_statement_errors_total", ())] >= 1

        db.insert("t", pa.table({"k": ["c"], "v": pa.array([0], pa.int32())}))  # 10 / 0: view inv fails
        got = _scrape(metrics.port)
        assert got[("millpond_view_lag_records", (("view", "s"),))] == 1  # appended, no epoch yet
        assert got[("millpond_view_freshness_seconds", (("view", "s"),))] >= 0
        db.flush()
        db.insert("t", pa.table({"k": ["a"], "v": pa.array([5], pa.int32())}))
        db.flush()
        got = _scrape(metrics.port)
        assert got[("millpond_epochs_committed_total", ())] == 3
        assert got[("millpond_view_failed", (("view", "inv"),))] == 1
        assert got[("millpond_view_failed", (("view", "s"),))] == 0
        # failed at epoch 2, its rows as of epoch 1; now 3
        assert got[("millpond_view_behind_epochs", (("view", "inv"),))] == 2
        assert got[("millpond_view_freshness_seconds", (("view", "inv"),))] > 0
        assert got[("millpond_view_behind_epochs", (("view", "s"),))] == 0
        assert got[("millpond_rows_in_total", (("relation", "t"),))] == 5
    assert db.metrics().startswith("# HELP")  # the same text without a server


def test_a_kafka_tables_lag_and_rows(open_db, kafka):
    topic = kafka.topic("metered", partitions=2)
    db = open_db()
    db.sql(f"CREATE TABLE m (k INT, v INT) WITH (connector = 'kafka', topic = '{topic}', "
           f"properties.bootstrap.server = '{kafka.bootstrap}') FORMAT PLAIN ENCODE JSON")
    kafka.produce(topic, ['{"k": 1, "v": 1}', '{"k": 2, "v": 2}', "not json"], partition=0)
    kafka.produce(topic, ['{"k": 3, "v": 3}'], partition=1)
    with pytest.warns(Warning, match="source tables have errors"):
        db.flush()
    with db.serve_metrics(port=0) as metrics:
        got = _scrape(metrics.port)
    assert got[("millpond_source_rows_total", (("split", f"{topic}/0"), ("table", "m")))] == 2
    assert got[("millpond_source_rows_total", (("split", f"{topic}/1"), ("table", "m")))] == 1
    assert got[("millpond_source_lag", (("split", f"{topic}/0"), ("table", "m")))] == 0
    assert got[("millpond_source_errors", (("table", "m"),))] == 1  # the message that is not JSON


def test_millpond_serve_metrics_port_on_a_read_only_root(open_db, root):
    db = open_db()
    db.sql("CREATE TABLE t (k INT); CREATE MATERIALIZED VIEW c AS SELECT count(*) AS n FROM t")
    db.insert("t", pa.table({"k": pa.array([1, 2], pa.int32())}))
    db.flush()
    repo = Path(__file__).resolve().parent.parent
    with socket_port() as port:
        pass
    proc = subprocess.Popen([sys.executable, "-m", "millpond.cli", "serve", root, "--read-only", "--port", "0",
                             "--metrics-port", str(port)], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(repo / "src")})
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                got = _scrape(port)
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "millpond serve --metrics-port did not answer"
                time.sleep(0.2)
        assert got[("millpond_epoch", ())] == db.epoch
        assert got[("millpond_view_failed", (("view", "c"),))] == 0
        assert got[("millpond_epochs_committed_total", ())] == 0  # a follower commits none
    finally:
        proc.terminate()
        proc.wait(30)


class socket_port:
    """A free port on loopback (closed again: the server binds it)."""

    def __enter__(self) -> int:
        import socket

        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return self.s.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        self.s.close()
