"""A flow's state in window order (:mod:`millpond.engine.flows`, catalog format 9): its keys start
with the window's minute, and a flow created before keeps hash keys; both equal DuckDB through a
restart (the oracle and the flows are :mod:`tests.test_flows`')."""

from __future__ import annotations

import dataclasses
import json

import polars as pl

from millpond import paths
from millpond.columns import KH
from millpond.store.state_table import StateTable
from tests import workload
from tests.test_flows import FLOWS, SOURCE, Source, _mismatches


def test_a_flows_state_is_in_window_order_and_a_flow_from_before_keeps_its_hash(open_db, tmp_path):
    """A new flow's state keys start with their window's minute (catalog format 9), so a trigger's
    new windows go to new files and compaction leaves older windows' files alone; a flow created by
    the previous millpond (no ``cluster`` in the catalog) keeps hash keys — both equal DuckDB."""
    path = str(tmp_path / "ordered")
    db = open_db(path=path)
    db.sql(SOURCE)
    db.sql(FLOWS["per_min"][0])
    db.sql(FLOWS["tumbling"][0])
    rt = db.runtime
    assert {f.name: f.cluster for f in rt.catalog.flows.values()} == {"per_min": "minute", "tumbling": "window_start"}
    old = dataclasses.replace(rt.catalog.flows["tumbling"], cluster=None)  # as the previous millpond wrote it
    rt.commit_catalog(dataclasses.replace(rt.catalog, flows={**rt.catalog.flows, "tumbling": old}))
    source = Source(seed=5)
    for i in range(8):
        if i == 4:
            db.close()
            db = open_db(path=path)
            rt = db.runtime
        for _ in range(3):
            source.step(db)
        db.flush()
        assert not _mismatches(db, source, ["per_min", "tumbling"]), i
    store = rt.coordinator.store
    body = json.loads(store.get(store.list(paths.CATALOG_PREFIX)[-1]))
    assert body["format"] >= 9 and [f.get("cluster") for f in body["flows"]] == ["minute", None]

    def keys(name: str) -> pl.DataFrame:
        f = rt._by_name[name]
        sid = f"o{f.object_id}.n{f.merge.aggregate.node_id}.groups"
        table = StateTable(store, rt.coordinator.manifest.state(sid), f.merge.aggregate.group)
        return table.scan()

    def minutes(rows: pl.DataFrame) -> pl.Series:  # of its one window column
        window = next(c for c, t in rows.schema.items() if t == pl.Datetime("us"))
        return rows[window].dt.epoch("us") // 60_000_000

    ordered = keys("per_min")
    assert ordered.height > 10 and (ordered[KH].to_numpy() >> 32).tolist() == minutes(ordered).to_list()
    hashed = keys("tumbling")
    assert hashed.height > 3 and ((hashed[KH].to_numpy() >> 32) != minutes(hashed).to_numpy()).all()


def test_date_and_timestamptz_windows_order_state_too(open_db):
    """The window's minute read from a DATE and from a TIMESTAMPTZ (the other two key types)."""
    db = open_db()
    db.sql(SOURCE)
    flows = {"daily": ("per_day", """SELECT host, CAST(ts AS DATE) AS day, count(*) AS n, max(cpu) AS hi
                                      FROM metrics GROUP BY host, day"""),
             "hourly": ("per_hour", """SELECT date_bin(INTERVAL '1 hour', CAST(ts AS TIMESTAMPTZ)) AS hour,
                                         count(*) AS n FROM metrics GROUP BY hour""")}
    for name, (sink, sql) in flows.items():
        db.sql(f"CREATE FLOW {name} SINK TO {sink} AS {sql}")
    source = Source(seed=9)
    source.now = 60 * 24 * 3 - 90  # near midnight, days apart: late rows reach the day before
    for i in range(4):
        for _ in range(3):
            source.step(db)
            source.now += 400
        db.flush()
        for name, (sink, sql) in flows.items():
            assert workload.norm(db.sql(f"SELECT * FROM {sink}")) == source.oracle(sql), (name, i)
    rt = db.runtime
    for name in flows:
        f = rt._by_name[name]
        sid = f"o{f.object_id}.n{f.merge.aggregate.node_id}.groups"
        rows = StateTable(rt.coordinator.store, rt.coordinator.manifest.state(sid), f.merge.aggregate.group).scan()
        window = rows[f.merge.cluster_group]
        micros = (window.cast(pl.Datetime("us")) if window.dtype == pl.Date else window).dt.epoch("us")
        assert rows.height >= 3 and (rows[KH].to_numpy() >> 32).tolist() == (micros // 60_000_000).to_list(), name
