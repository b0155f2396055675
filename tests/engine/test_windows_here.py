"""Time windows (``TUMBLE``/``HOP``) made in Python tasks: by DuckDB in a task that reads the log
itself (:mod:`millpond.spark.fused`) or in a small epoch's one task (:mod:`millpond.spark.local`),
as Spark's ``window()`` makes them on Catalyst's path. The windows of the same times in both
engines, and views over windows equal to DuckDB recomputing them (windows spelled out here, in
Python) after every epoch while epochs alternate at random between the paths."""

from __future__ import annotations

import datetime as dt
import random
import re

import pyarrow as pa
import pytest

from millpond import duck
from millpond.engine import plan as P
from millpond.spark import local_plan
from millpond.spark.fusing import _chain_sql
from millpond.tpch import oracle

EPOCH = dt.datetime(1970, 1, 1)
SPANS = [(7_000_000, 7_000_000), (10_000_000, 3_000_000), (10_000_000, 2_000_000), (1_500_000, 1_000_000)]


def _times(rng: random.Random, n: int) -> list[dt.datetime | None]:
    """Times around 1970 (before it too: a remainder floored) and today, on and off window bounds."""
    out = []
    for _ in range(n):
        base = rng.choice([-30_000_000, 0, 1_700_000_000_000_000])
        us = base + rng.choice([rng.randrange(-20_000_000, 20_000_000), rng.randrange(-6, 7) * 1_000_000])
        out.append(None if rng.random() < 0.05 else EPOCH + dt.timedelta(microseconds=us))
    return out


@pytest.mark.parametrize("zone", [None, "UTC"], ids=["timestamp", "timestamptz"])
def test_a_window_s_rows_are_those_of_spark_s_window_function(spark, zone):
    """Spark's ``window()`` of a TIMESTAMP (its ``TIMESTAMP_NTZ``) or a TIMESTAMPTZ (its
    ``TIMESTAMP``, in UTC microseconds) against DuckDB's windows in millpond's DuckDB."""
    rng = random.Random(11)
    times = _times(rng, 400)
    kind = pa.timestamp("us", tz=zone)
    table = pa.table({"id": list(range(len(times))), "ts": pa.array(times, pa.timestamp("us")).cast(kind),
                      "_w": [1] * len(times)})
    df = spark.createDataFrame(table.select(["id", "ts"]).to_pandas(),
                               f"id long, ts {'timestamp' if zone else 'timestamp_ntz'}")
    for size, slide in SPANS:
        durations = f"'{size} microseconds'" + (f", '{slide} microseconds'" if size != slide else "")
        want = df.filter("ts IS NOT NULL").selectExpr("id", f"window(ts, {durations}) AS w").selectExpr(
            "id", "unix_micros(CAST(w.start AS TIMESTAMP)) AS s", "unix_micros(CAST(w.end AS TIMESTAMP)) AS e")
        node = P.Window(P.Source("t", ()), "ts", size, slide, "s", "e")
        sql = _chain_sql([node], "SELECT * FROM records", {"id": pa.int64(), "ts": kind})
        con = duck.cursor()
        try:
            con.register("records", table)
            got = con.sql(f"SELECT id, s, e FROM ({sql})").to_arrow_table()
        finally:
            con.close()
        assert got.schema.field("s").type == kind
        micros = [(i, s, e) for i, s, e in zip(*(got.column(c).cast(pa.int64()).to_pylist() for c in ("id", "s", "e")))]
        assert sorted(micros) == sorted(tuple(r) for r in want.collect()), (size, slide)
        assert len(micros) > len(times) * (size // slide) * 0.8


VIEWS = {  # every window kind: a tumbling one, hops (four per row), a MAX
    # over deletes, a window's rows as a view's, the window's rows joined back with an interval's bounds (Nexmark's q7)
    "tum": """SELECT g, window_start, window_end, count(*) AS n, sum(v) AS s
              FROM TUMBLE(ev, ts, INTERVAL '7' SECOND) GROUP BY g, window_start, window_end""",
    "hop": """SELECT window_start, max(v) AS m, count(*) AS n
              FROM HOP(ev, ts, INTERVAL '3' SECOND, INTERVAL '12' SECOND) GROUP BY window_start""",
    "rows": """SELECT k, v, window_start FROM HOP(ev, ts, INTERVAL '2' SECOND, INTERVAL '4' SECOND) WHERE g < 2""",
    "near": """SELECT e.k, e.v, w.window_end FROM ev e
               JOIN (SELECT max(v) AS m, window_end FROM TUMBLE(ev, ts, INTERVAL '5' SECOND) GROUP BY window_end) w
                 ON e.v = w.m
               WHERE e.ts BETWEEN w.window_end - INTERVAL '5' SECOND AND w.window_end""",
    # a TIMESTAMPTZ's windows: UTC instants
    "zone": """SELECT g, window_end, count(*) AS n, max(tz) AS last
               FROM HOP(ev, tz, INTERVAL '3' SECOND, INTERVAL '6' SECOND) GROUP BY g, window_end""",
}
SPANS_OF = {"tum": (7, 7), "hop": (12, 3), "rows": (4, 2), "near": (5, 5), "zone": (6, 3)}
EV = pa.schema([("k", pa.int64()), ("g", pa.int32()), ("v", pa.int64()), ("ts", pa.timestamp("us")),
                ("tz", pa.timestamp("us", tz="UTC"))])


def _windowed(name: str, rows: list[dict]) -> pa.Table:
    """``rows`` with a row per window of view ``name`` holding each one's time, spelled out here."""
    (size, slide), time = (s * 1_000_000 for s in SPANS_OF[name]), "tz" if name == "zone" else "ts"
    epoch = EPOCH.replace(tzinfo=dt.timezone.utc) if time == "tz" else EPOCH
    out = []
    for r in rows:
        if r[time] is None:
            continue
        us = (r[time] - epoch) // dt.timedelta(microseconds=1)
        start = us // slide * slide  # Python floors
        while start + size > us:
            out.append({**r, "window_start": epoch + dt.timedelta(microseconds=start),
                        "window_end": epoch + dt.timedelta(microseconds=start + size)})
            start -= slide
    kind = EV.field(time).type
    return pa.Table.from_pylist(out, pa.schema([*EV, ("window_start", kind), ("window_end", kind)]))


def _oracle(name: str, rows: list[dict]) -> list[tuple]:
    sql = re.sub(r"(TUMBLE|HOP)\(ev, [^)]*\)", f"{name}_windows", VIEWS[name])
    return oracle.answer({"ev": pa.Table.from_pylist(rows, EV), f"{name}_windows": _windowed(name, rows)}, sql)


def test_views_over_windows_match_duckdb_with_epochs_on_every_path(open_db, monkeypatch):
    """Backfilled by Spark's stages, then epochs at random in one task or in tasks reading the log
    themselves, and a twin of ``hop`` that Catalyst evaluates throughout (``on_error = 'null'``):
    rows one path inserted are retracted by another (a window computed differently would leave a
    stale group)."""
    rng = random.Random(4)
    db = open_db()
    db.sql("CREATE TABLE ev (k BIGINT PRIMARY KEY, g INT, v BIGINT, ts TIMESTAMP, tz TIMESTAMPTZ)")
    live: dict[int, dict] = {}

    def write(keys: list[int]) -> None:
        for k, ts, tz in zip(keys, _times(rng, len(keys)), _times(rng, len(keys))):
            live[k] = {"k": k, "g": rng.randrange(3), "v": rng.randrange(20), "ts": ts,
                       "tz": tz and tz.replace(tzinfo=dt.timezone.utc)}
        db.insert("ev", pa.Table.from_pylist([live[k] for k in keys], EV))
    write(list(range(60)))
    db.flush()
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    db.sql(f"CREATE MATERIALIZED VIEW hop_spark WITH (on_error = 'null') AS {VIEWS['hop']}")
    db.flush()
    executor, paths = db.runtime.coordinator.executor, []
    for epoch in range(8):
        here = epoch % 2 == 0 if epoch < 2 else rng.random() < 0.5
        monkeypatch.setattr(local_plan, "LOCAL_RECORDS", 10**9 if here else 0)
        pool = sorted(live)
        write([*range(100 + epoch * 30, 130 + epoch * 30), *rng.sample(pool, 10)])
        gone = rng.sample(sorted(set(pool) & set(live)), 6)
        db.sql(f"DELETE FROM ev WHERE k IN ({', '.join(map(str, gone))})")
        for k in gone:
            del live[k]
        before = executor.stats["local"]
        db.flush()
        paths.append((here, executor.stats["local"] - before))
        for name in [*VIEWS, "hop_spark"]:
            got = oracle.rows(db.sql(f"SELECT * FROM {name}"))
            want = _oracle(name.removesuffix("_spark"), list(live.values()))
            assert oracle.same(got, want), (name, epoch, "one task" if here else "tasks")
    # the join over a window ran as one task whenever allowed, never otherwise; the windows'
    # aggregates read the log themselves (their whole epoch one stage of Python tasks)
    assert all((n > 0) == here for here, n in paths), paths
    assert {c.name for c, _ in executor._fused_only} >= {"tum", "hop", "rows", "zone"}
