"""How an epoch reads its input: small ranges on the driver, larger ones through the ``millpond``
data source (cut into partitions), and fewer tasks for a small epoch. Both read paths must give
the same views."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from millpond.engine import coordinator
from millpond.spark import build, executor, fusing, inputs
from millpond.spark import fused as fused_tasks
from tests.conftest import rows

VIEWS = """
CREATE TABLE t (k INT, v INT);
CREATE TABLE e (k INT, v INT) APPEND ONLY;
CREATE MATERIALIZED VIEW agg AS SELECT k % 7 AS g, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS hi FROM t GROUP BY k % 7;
CREATE MATERIALIZED VIEW big AS SELECT k, v FROM t WHERE v > 50;
CREATE MATERIALIZED VIEW events AS SELECT k % 5 AS g, MIN(v) AS lo, MAX(v) AS hi, COUNT(DISTINCT v % 3) AS d,
    COUNT(*) AS n FROM e GROUP BY k % 5;
CREATE MATERIALIZED VIEW total AS SELECT MAX(v) AS hi, SUM(v) AS s FROM e;
CREATE MATERIALIZED VIEW nt AS SELECT COUNT(*) AS n FROM t;
CREATE MATERIALIZED VIEW ne AS SELECT COUNT(*) AS n FROM e
"""


@pytest.mark.parametrize("driver_read_rows,pre_aggregate_rows", [(0, 0), (10**9, 10**9)])
def test_both_read_paths_give_the_same_views(open_db, monkeypatch, driver_read_rows, pre_aggregate_rows):
    """Every range through the data source and every aggregation combined map-side first, or
    every range read by the driver and aggregated after the exchange only."""
    monkeypatch.setattr(inputs, "DRIVER_READ_ROWS", driver_read_rows)
    monkeypatch.setattr(build, "PRE_AGGREGATE_ROWS", pre_aggregate_rows)
    db = open_db()
    db.sql(VIEWS)
    everything = []
    for i in range(3):
        batch = pa.table({"k": pa.array(range(i * 500, i * 500 + 500), pa.int32()),
                          "v": pa.array([(k * 37) % 101 for k in range(i * 500, i * 500 + 500)], pa.int32())})
        db.insert("t", batch)
        db.insert("e", batch)
        everything.append(batch)
        db.flush()
    events = pa.concat_tables(everything).to_pylist()
    per: dict[int, list[int]] = {}
    for r in events:
        per.setdefault(r["k"] % 5, []).append(r["v"])
    assert rows(db.sql("SELECT * FROM events")) == sorted(
        (g, min(vs), max(vs), len({v % 3 for v in vs}), len(vs)) for g, vs in per.items())
    assert rows(db.sql("SELECT * FROM total")) == [(max(r["v"] for r in events), sum(r["v"] for r in events))]
    assert rows(db.sql("SELECT * FROM ne")) == [(1500,)]  # a scan of no column: only the weights cross
    db.sql("DELETE FROM t WHERE k < 100")
    db.flush()
    data = pa.concat_tables(everything).to_pylist()
    data = [r for r in data if r["k"] >= 100]
    groups: dict[int, list[int]] = {}
    for r in data:
        groups.setdefault(r["k"] % 7, []).append(r["v"])
    assert rows(db.sql("SELECT * FROM agg")) == sorted((g, len(vs), sum(vs), max(vs)) for g, vs in groups.items())
    assert rows(db.sql("SELECT * FROM big")) == sorted((r["k"], r["v"]) for r in data if r["v"] > 50)
    assert rows(db.sql("SELECT * FROM nt")) == [(len(data),)]


@pytest.mark.parametrize("single_task_rows", [0, 10**9])
def test_a_flows_triggers_read_through_the_data_source_in_one_task_or_two_stages(open_db, monkeypatch,
                                                                                  single_task_rows):
    """A flow's partial aggregates (:meth:`SparkExecutor.partials`) over ranges read by the data
    source, in one task (its Dataset planned once and re-run every trigger) or in two stages (a new
    Dataset each trigger): every trigger's sink is the GROUP BY of all rows, never a re-read or a
    stale range."""
    monkeypatch.setattr(inputs, "DRIVER_READ_ROWS", 0)
    monkeypatch.setattr(executor, "SINGLE_TASK_ROWS", single_task_rows)
    db = open_db(parallelism=2)
    db.sql("CREATE TABLE m (k INT, v INT) APPEND ONLY")
    db.sql("CREATE FLOW f SINK TO s AS SELECT k % 3 AS g, count(*) AS n, sum(v) AS total, max(v) AS hi FROM m "
           "GROUP BY g")
    seen: list[tuple[int, int]] = []
    for i in range(4):
        batch = [(k, (k * 31 + i) % 17) for k in range(i * 50, i * 50 + 40 + 10 * i)]
        db.insert("m", pa.table({"k": pa.array([k for k, _ in batch], pa.int32()),
                                 "v": pa.array([v for _, v in batch], pa.int32())}))
        seen += batch
        db.flush()
        want = {}
        for k, v in seen:
            n, total, hi = want.get(k % 3, (0, 0, v))
            want[k % 3] = (n + 1, total + v, max(hi, v))
        assert rows(db.sql("SELECT * FROM s")) == sorted((g, *t) for g, t in want.items()), i
    plans = list(db.runtime.coordinator.executor._partials)
    assert len(plans) == 1, plans  # built once, then reused for every trigger reading through the scan


def test_a_small_epoch_runs_fewer_tasks(open_db, monkeypatch):
    monkeypatch.setattr(coordinator, "ROWS_PER_TASK", 100)
    db = open_db(parallelism=4)
    c = db.runtime.coordinator
    consumer = db.runtime.consumers  # no tables yet: ranges are what counts
    assert consumer == []
    assert c._parallelism([], {}, []) == 1
    fake = object()
    assert c._parallelism([(fake, {"a": (0, 1)})], {}, []) == 1
    assert c._parallelism([(fake, {"a": (0, 250)}), (fake, {"a": (0, 250)})], {}, []) == 3  # a channel counts once
    assert c._parallelism([(fake, {"a": (0, 250), "b": (10, 260)})], {}, []) == 4  # ... and never past parallelism


def test_rows_kept_where_the_operator_made_them_give_a_consolidated_changelog(open_db, monkeypatch):
    """A view over an aggregate keeps its rows in the aggregate's tasks (no exchange): two groups
    that swap their counts in one epoch change the same output rows in two tasks, and the epoch's
    changelog still nets them to nothing; the view and the next changes stay exact."""
    monkeypatch.setattr(coordinator, "ROWS_PER_TASK", 1)  # two tasks however small the epoch
    db = open_db(parallelism=2)
    db.sql("CREATE TABLE t (k INT); CREATE MATERIALIZED VIEW counts AS SELECT COUNT(*) AS n FROM t GROUP BY k")
    keys = list(range(40))
    db.insert("t", pa.table({"k": pa.array(keys + keys[:20], pa.int32())}))  # k < 20 twice, k >= 20 once
    db.flush()
    assert rows(db.sql("SELECT n, COUNT(*) AS c FROM counts GROUP BY n")) == [(1, 20), (2, 20)]
    # k < 20 lose a row, k >= 20 gain one: every group changes, the multiset of counts does not
    db.sql("DELETE FROM t WHERE k < 20 AND _row_id >= 40")
    db.insert("t", pa.table({"k": pa.array(keys[20:], pa.int32())}))
    reports = db.flush()
    assert sum(r.changes["counts"].num_rows for r in reports if "counts" in r.changes) == 0
    assert rows(db.sql("SELECT n, COUNT(*) AS c FROM counts GROUP BY n")) == [(1, 20), (2, 20)]
    db.insert("t", pa.table({"k": pa.array([0], pa.int32())}))
    assert rows(db.flush()[-1].changes["counts"]) == [(1, -1), (2, 1)]


@pytest.mark.parametrize("append_only", [False, True])
def test_an_aggregate_combined_in_the_scans_tasks_matches_duckdb(open_db, monkeypatch, append_only):
    """A GROUP BY of a table's columns or of a join has its delta combined in the log scan's or the
    join's own tasks (:mod:`millpond.spark.combine`): through NULL keys and arguments, deletes,
    sums past 64 bits, MIN/MAX, an inner and a left join and a changing dimension, every epoch's
    views equal DuckDB over all rows; a grouping expression is left to Catalyst."""
    import duckdb

    from millpond.spark import combine

    monkeypatch.setattr(inputs, "DRIVER_READ_ROWS", 0)
    monkeypatch.setattr(build, "PRE_AGGREGATE_ROWS", 0)
    planned = []
    def plan(node, columns):
        planned.append(combine.plan_combine(node, columns))
        return planned[-1]
    monkeypatch.setattr(inputs, "plan_combine", plan)
    monkeypatch.setattr(build, "plan_combine", plan)  # in a join's tasks
    db = open_db(parallelism=2)
    db.sql(f"CREATE TABLE t (g INT, s VARCHAR, v BIGINT){' APPEND ONLY' if append_only else ''}; "
           "CREATE TABLE d (g INT PRIMARY KEY, name VARCHAR)")
    db.insert("d", pa.table({"g": pa.array([0, 1, 2], pa.int32()), "name": ["zero", "one", None]}))
    views = {
        "a": "SELECT g, s, COUNT(*) AS n, COUNT(v) AS c, SUM(v) AS total, MIN(v) AS lo, MAX(v) AS hi FROM t GROUP BY g, s",
        "b": "SELECT v, COUNT(*) AS n FROM t GROUP BY v",
        "c": "SELECT g % 3 AS m, SUM(v) AS total FROM t GROUP BY g % 3",  # an expression: Catalyst's
        "j": "SELECT d.name, COUNT(*) AS n, SUM(t.v) AS total, MAX(t.v) AS hi FROM t JOIN d ON t.g = d.g GROUP BY d.name",
        "l": "SELECT d.name, t.s, COUNT(*) AS n, SUM(t.v) AS total FROM t LEFT JOIN d ON t.g = d.g GROUP BY d.name, t.s",
    }
    for name, sql in views.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    con = duckdb.connect()
    everything = []
    for i in range(4):
        n = 300
        batch = pa.table({"g": pa.array([None if j % 11 == 0 else j % 4 for j in range(n)], pa.int32()),
                          "s": [None if j % 13 == 0 else f"s{(i + j) % 3}" for j in range(n)],
                          "v": pa.array([None if j % 7 == 0 else (2**62 if j % 50 == 1 else j * (i + 1) - 100)
                                         for j in range(n)], pa.int64())})
        db.insert("t", batch)
        everything.append(batch)
        if i == 2 and not append_only:
            db.sql("DELETE FROM t WHERE v < 0")
            everything = [b.filter(pa.compute.invert(pa.compute.fill_null(pa.compute.less(b["v"], 0), False)))
                          for b in everything]
        if i == 1:  # the dimension changes too: the joins retract and re-emit through their combine
            db.sql("UPDATE d SET name = 'uno' WHERE g = 1; INSERT INTO d VALUES (3, 'three')")
        db.flush()
        con.register("t", pa.concat_tables(everything))
        con.register("d", db.sql("SELECT * FROM d"))
        for name, sql in views.items():
            want = sorted(con.sql(sql).fetchall(), key=repr)
            assert sorted(rows(db.sql(f"SELECT * FROM {name}")), key=repr) == want, (name, i)
    assert sum(p is not None for p in planned) >= 4 and any(p is None for p in planned)
    assert any(p is not None and ("_g0", "d__name") in p.keys for p in planned)  # a join's tasks combined


@pytest.mark.parametrize("parallelism", [1, 3])
def test_stateful_tasks_reading_the_log_themselves_match_duckdb(open_db, monkeypatch, parallelism):
    """Aggregates of a table's columns and joins of two tables' columns read their delta from the
    log in their own tasks (:mod:`millpond.spark.fused`), hashing keys of every type it takes as
    Spark would: through NULL keys, upserts and deletes, both join sides changing in one epoch,
    inner/left/full joins and string, date, boolean and integer keys, groups and join keys that are
    expressions (evaluated by DuckDB in the task), every epoch's views equal DuckDB over all rows;
    an expression that may round (a division) is left to Spark; a view's rows made in the task of
    the aggregate or join they come from (renamed, or filtered and computed by DuckDB). Every other epoch
    goes through Spark's exchange instead: both paths meet the same state, so their key hashes
    are equal. A task takes its records 7 at a time (an epoch's 60-odd in slices)."""
    import duckdb

    monkeypatch.setattr(fused_tasks, "SLICE_RECORDS", 7)
    monkeypatch.setattr(build, "PRE_AGGREGATE_ROWS", 0)
    monkeypatch.setattr(coordinator, "ROWS_PER_TASK", 1)  # an epoch of the parallelism asked for
    monkeypatch.setattr(inputs, "FUSED_ROWS_PER_TASK", 10)  # as many fused tasks: each keeps its vnodes
    fused = []
    for method in ("fuse_aggregate", "fuse_join", "fuse_materialize"):
        def spy(self, *args, _method=getattr(fusing.Fuser, method)):
            fused.append(_method(self, *args))
            return fused[-1]
        monkeypatch.setattr(fusing.Fuser, method, spy)
    chained = []

    def chain(self, *args, _method=fusing.Fuser.fuse_partial_join):  # a partial and its join: one task
        chained.append(_method(self, *args))
        return chained[-1]
    monkeypatch.setattr(fusing.Fuser, "fuse_partial_join", chain)
    above = []

    def join_aggregate(self, *args, _method=fusing.Fuser.fuse_join_aggregate):  # an aggregate in its join's task
        above.append(_method(self, *args))
        return above[-1]
    monkeypatch.setattr(fusing.Fuser, "fuse_join_aggregate", join_aggregate)
    fed, spark_path = [], [False]

    def feed(self, *args, _method=fusing.Fuser.feed):  # a view's rows made in its operator's task
        fed.append(None if spark_path[0] else _method(self, *args))
        return fed[-1]
    monkeypatch.setattr(fusing.Fuser, "feed", feed)
    db = open_db(parallelism=parallelism)
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, g SMALLINT, s VARCHAR, d DATE, b BOOLEAN, v BIGINT, ts TIMESTAMP); "
           "CREATE TABLE u (s VARCHAR, w INT); CREATE TABLE a (s VARCHAR, w INT) APPEND ONLY")
    views = {
        "by_g": "SELECT g, COUNT(*) AS n, SUM(v) AS total, MIN(v) AS lo, MAX(v) AS hi FROM t GROUP BY g",
        "by_sdb": "SELECT s, d, b, COUNT(v) AS c, MAX(d) AS last FROM t GROUP BY s, d, b",
        "ij": "SELECT t.id, t.v, u.w FROM t JOIN u ON t.s = u.s",
        "lj": "SELECT u.s, COUNT(*) AS n, SUM(t.v) AS total FROM u LEFT JOIN t ON u.s = t.s GROUP BY u.s",
        "fj": "SELECT t.id, u.w FROM t FULL JOIN u ON t.g = u.w",
        "expr": "SELECT g % 2 AS m, COUNT(*) AS n, SUM(v) AS total FROM t GROUP BY g % 2",
        "hv": "SELECT g, COUNT(*) * 2 AS n2 FROM t GROUP BY g HAVING COUNT(*) > 6",
        "div": "SELECT v / 7 AS q, COUNT(*) AS n FROM t GROUP BY v / 7",
        "ej": "SELECT t.id, u.w FROM t JOIN u ON t.g % 3 = u.w AND t.s = u.s",
        "flt": "SELECT id, s, v FROM t WHERE v % 3 = 0 AND s IS NOT NULL",
        "prj": "SELECT id + 1 AS id1, upper(s) AS su, v - id AS diff, coalesce(s, 'none') AS sn, d, ts FROM t WHERE b",
        "aof": "SELECT s, w * 2 AS w2 FROM a WHERE w IS NOT NULL",
    }
    # t (a) pre-aggregated by the join key below the join (sql/planner/eager.py), in the join's task; with one
    # fused task (parallelism 1) the aggregate above the join runs in it too
    views["star"] = "SELECT u.w, COUNT(*) AS n, SUM(t.v) AS total, MAX(t.v) AS hi FROM t JOIN u ON t.s = u.s GROUP BY u.w"
    views["star_ao"] = "SELECT t.g, COUNT(*) AS n, MAX(a.w) AS hi FROM a JOIN t ON a.s = t.s GROUP BY t.g"
    for name, sql in views.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    con = duckdb.connect()
    for i in range(5):
        # odd epochs: Spark's path (ranges read by the driver, exchanged by Spark)
        monkeypatch.setattr(inputs, "DRIVER_READ_ROWS", 0 if i % 2 == 0 else 10**9)
        monkeypatch.setattr(inputs, "MAX_TASKS", 4 if i % 2 == 0 else 0)
        spark_path[0] = i % 2 == 1
        # small epochs run their one-stage consumers' tasks in this process, except epoch 2's: a Spark job
        monkeypatch.setattr(executor, "DRIVER_RECORDS", dict.fromkeys(("local", "cluster"), 0 if i == 2 else 10**9))
        ids = range(i * 40, i * 40 + 60)  # 20 of them upsert earlier rows
        db.insert("t", pa.table({
            "id": pa.array(ids, pa.int32()),
            "g": pa.array([None if j % 9 == 0 else j % 5 for j in ids], pa.int16()),
            "s": [None if j % 7 == 0 else f"s{j % 6}" for j in ids],
            "d": pa.array([None if j % 8 == 0 else j % 4 * 1000 for j in ids], pa.int32()).cast(pa.date32()),
            "b": [None if j % 10 == 0 else j % 3 == 0 for j in ids],
            "v": pa.array([j * (i + 1) - 50 for j in ids], pa.int64()),
            "ts": pa.array([None if j % 12 == 0 else j * 3_600_000_123 for j in ids], pa.timestamp("us"))}))
        for name in ("u", "a"):
            db.insert(name, pa.table({"s": [f"s{(i + j) % 7}" for j in range(3)] + [None],
                                      "w": pa.array([i, j := i + 1, None, 2], pa.int32())}))
        if i == 2:
            db.sql("DELETE FROM t WHERE v < 0 OR g = 3")
        db.flush()
        for name in ("t", "u", "a"):
            con.register(name, db.sql(f"SELECT * FROM {name}"))
        for name, sql in views.items():
            assert rows(db.sql(f"SELECT * FROM {name}")) == sorted(
                con.sql(sql.replace(" / ", " // ")).fetchall(), key=lambda r: tuple((v is not None, v) for v in r)), (name, i, j)
    assert sum(f is not None for f in fused) >= 8 and any(f is None for f in fused)
    assert any(f is not None and f[0].share for f in fused)  # an APPEND ONLY table's rows: no exchange
    queries = [(side.side, side.query) for f in fused if f is not None for side in f[0].sides if side.query]
    assert any(k is None and "_mp0" in q and "%" in q for k, q in queries)  # a group by an expression, in the task
    assert any(k == 0 and "_mp0" in q and "%" in q for k, q in queries)  # a join on an expression, in the task
    assert any("//" in q for _, q in queries)  # an integer over a positive literal, in the task (truncated as Spark's div)
    feeds = [f[1] for f in fed if f is not None]
    assert any(f.query is None for f in feeds) and any(f.query and "* 2" in f.query for f in feeds)
    assert max(f[0].tasks for f in fused if f is not None) == parallelism
    assert {c[1].side for c in chained if c is not None} == {0} and any(c is None for c in chained)
    if parallelism == 1:  # star, star_ao and lj: the join's one task
        assert any(a is not None and a[1].combine is not None for a in above)
    assert db.runtime.coordinator.executor.stats["here"] >= 2  # epochs 0 and 4 (and odd ones' one-stage consumers)


def test_an_overflow_in_a_task_reading_the_log_fails_its_view_alone(open_db, monkeypatch):
    """A projection evaluated by DuckDB in a task reading the log (:mod:`millpond.spark.fused`)
    that overflows fails its view as Spark's would, and the other views go on."""
    from millpond.errors import MillpondError

    monkeypatch.setattr(inputs, "DRIVER_READ_ROWS", 0)
    monkeypatch.setattr(build, "PRE_AGGREGATE_ROWS", 0)
    fused = []

    def spy(self, *args, _method=fusing.Fuser.fuse_materialize):
        fused.append(_method(self, *args))
        return fused[-1]
    monkeypatch.setattr(fusing.Fuser, "fuse_materialize", spy)
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT) APPEND ONLY; "
           "CREATE MATERIALIZED VIEW big AS SELECT k, v * 1000000 AS m FROM t; "
           "CREATE MATERIALIZED VIEW ok AS SELECT k FROM t WHERE v > 0")
    db.sql("INSERT INTO t VALUES (1, 1), (2, 2); FLUSH")
    assert rows(db.sql("SELECT * FROM big")) == [(1, 1000000), (2, 2000000)]
    db.sql("INSERT INTO t VALUES (3, 5000), (4, 4); FLUSH")
    assert rows(db.sql("SELECT * FROM ok")) == [(1,), (2,), (3,), (4,)]
    with pytest.raises(MillpondError, match="(?i)view 'big' failed.*integer out of range"):
        db.sql("SELECT * FROM big")
    assert any(f is not None for f in fused)


@pytest.mark.parametrize("append_only", [False, True])
def test_decimal_double_and_timestamp_expressions_in_tasks_reading_the_log_match_duckdb(open_db, monkeypatch,
                                                                                        append_only):
    """DECIMAL arithmetic whose every value is exact (PostgreSQL's casts widening, products of at
    most 38 digits), CASE over decimals, ``date_trunc`` and ``EXTRACT`` of a TIMESTAMP are evaluated by DuckDB in
    tasks reading the log (below an aggregate, and a view's rows themselves), and DECIMAL and DOUBLE sums and DOUBLE MIN/MAX combined there
    (:mod:`millpond.spark.combine`): through NULLs, negative amounts, -0.0, upserts and deletes,
    every epoch's views equal DuckDB over all rows, epochs alternating with Spark's path (both meet
    the same state). A cast that rounds is Spark's."""
    import duckdb

    monkeypatch.setattr(build, "PRE_AGGREGATE_ROWS", 0)
    monkeypatch.setattr(coordinator, "ROWS_PER_TASK", 1)
    monkeypatch.setattr(inputs, "FUSED_ROWS_PER_TASK", 10)
    fused = []
    for method in ("fuse_aggregate", "fuse_join", "fuse_materialize"):
        def spy(self, *args, _method=getattr(fusing.Fuser, method)):
            fused.append(_method(self, *args))
            return fused[-1]
        monkeypatch.setattr(fusing.Fuser, method, spy)
    db = open_db(parallelism=2)
    key = "" if append_only else " PRIMARY KEY"
    db.sql(f"CREATE TABLE t (id INT{key}, k SMALLINT, price NUMERIC(12,2), disc NUMERIC(4,2), ts TIMESTAMP, "
           f"x DOUBLE PRECISION)"
           f"{' APPEND ONLY' if append_only else ''}; CREATE TABLE d (k SMALLINT PRIMARY KEY, name VARCHAR)")
    db.insert("d", pa.table({"k": pa.array(range(5), pa.int16()), "name": ["a", "b", "a", None, "c"]}))
    views = {
        "rev": "SELECT k, COUNT(*) AS n, SUM(price * (1 - disc)) AS rev, SUM(price) AS p FROM t GROUP BY k",
        "hourly": "SELECT date_trunc('hour', ts) AS h, COUNT(price) AS n, SUM(price) AS total FROM t "
                  "GROUP BY date_trunc('hour', ts)",
        "cased": "SELECT k, SUM(CASE WHEN disc > 0.05 THEN price * disc ELSE 0 END) AS s FROM t GROUP BY k",
        "joined": "SELECT d.name, SUM(t.price * t.disc) AS s, COUNT(*) AS n FROM t JOIN d ON t.k = d.k GROUP BY d.name",
        "rounded": "SELECT k, SUM(price::numeric(11,1)) AS s, SUM(price::numeric(38,0)) AS w, "
                   "SUM(x::bigint) AS xi FROM t GROUP BY k",  # casts that round: Spark's
        "dbl": "SELECT k, SUM(x) AS sx, MAX(x) AS hi, MIN(x) AS lo, COUNT(x) AS n FROM t GROUP BY k",
        "rows": "SELECT id, 0.908 * price AS p, price * disc AS pd FROM t WHERE price > 10.5",  # no aggregate
        "parts": "SELECT id, CASE WHEN EXTRACT(HOUR FROM ts) BETWEEN 8 AND 18 THEN 'day' ELSE 'night' END AS part, "
                 "EXTRACT(MONTH FROM ts) AS m FROM t",
        "by_hour": "SELECT EXTRACT(HOUR FROM ts) AS h, COUNT(*) AS n FROM t GROUP BY EXTRACT(HOUR FROM ts)",
    }
    for name, sql in views.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    con = duckdb.connect()
    everything = []
    for i in range(4):
        monkeypatch.setattr(inputs, "DRIVER_READ_ROWS", 0 if i % 2 == 0 else 10**9)  # odd epochs: Spark's path
        monkeypatch.setattr(inputs, "MAX_TASKS", 4 if i % 2 == 0 else 0)
        ids = range(i * 40, i * 40 + 60)  # 20 of them upsert earlier rows (a keyed table)
        cents = [None if j % 9 == 0 else (j * 7919 % 2_000_000 - 300_000) * (i + 1) for j in ids]
        batch = pa.table({
            "id": pa.array(ids, pa.int32()), "k": pa.array([None if j % 11 == 0 else j % 5 for j in ids], pa.int16()),
            "price": pa.array([None if c is None else Decimal(c) / 100 for c in cents], pa.decimal128(12, 2)),
            "disc": pa.array([Decimal(j % 11) / 100 for j in ids], pa.decimal128(4, 2)),
            "ts": pa.array([None if j % 13 == 0 else 1_700_000_000_000_000 + j * 1_234_567_891 for j in ids],
                           pa.timestamp("us")),
            # quarters: sums exact in any order; -0.0 and 0.0 one group of values
            "x": [None if j % 10 == 0 else -0.0 if j % 17 == 8 and j % 2 else (j % 17 - 8) * 0.25 for j in ids]})
        db.insert("t", batch)
        everything.append(batch)
        if i == 2 and not append_only:
            db.sql("DELETE FROM t WHERE price < 0")
        db.flush()
        con.register("t", db.sql("SELECT * FROM t") if not append_only else pa.concat_tables(everything))
        con.register("d", db.sql("SELECT * FROM d"))
        for name, sql in views.items():
            assert rows(db.sql(f"SELECT * FROM {name}")) == rows(con.sql(sql).to_arrow_table()), (name, i)
    queries = [side.query for f in fused if f is not None for side in f[0].sides if side.query]
    assert any("DATE_TRUNC" in q for q in queries) and any("CASE" in q for q in queries)
    assert any("DECIMAL(13, 2)" in q for q in queries)  # 1 - disc, exact, in the task
    assert any("0.908" in q for q in queries)  # a view's NUMERIC rows made in the task reading the log
    assert any("HOUR(" in q and "CASE" in q for q in queries) and any("MONTH(" in q for q in queries)  # EXTRACT
    assert not any("DECIMAL(11, 1)" in q or "DECIMAL(38, 0)" in q for q in queries)  # casts that round
    combined = [f[0].combine for f in fused if f is not None and f[0].combine is not None]
    assert not any(c.keys == (("_g0", "k"),) and len(c.sums) == 3 for c in combined)  # 'rounded' is Spark's
    assert sum(f is not None for f in fused) >= 4


def test_a_combine_sums_a_cast_column_only_where_the_cast_is_exact():
    """A sum's argument cast to ``DECIMAL(38,0)`` or ``BIGINT`` is summed as its column only when
    the column is an integer (the cast changes no value): a DECIMAL(12,2) or a DOUBLE cast so is
    rounded first, which only Catalyst does."""
    from sqlglot import exp, parse_one

    from millpond.engine import plan as P
    from millpond.spark.combine import plan_combine

    columns = {"i": ("i", "INT"), "p": ("p", "DECIMAL(12,2)"), "x": ("x", "DOUBLE"), "g": ("g", "INT")}

    def combine(arg: str):  # noqa: ANN202
        project = P.Project(P.Source("t", ()), ((exp.column("g"), "_g0"), (parse_one(arg, read="postgres"), "_a0")))
        return plan_combine(P.Aggregate(project, ("_g0",), (P.AggCall("sum", "_a0", "_c0"),), 1), columns)

    assert combine("CAST(i AS DECIMAL(38,0))") is not None and combine("CAST(i AS BIGINT)") is not None
    assert combine("p") is not None and combine("x") is not None  # exact DECIMAL sums, DOUBLE sums
    for rounds in ("CAST(p AS DECIMAL(38,0))", "CAST(x AS BIGINT)", "CAST(p AS BIGINT)"):
        assert combine(rounds) is None, rounds


def test_a_combine_orders_floats_as_postgresql():
    """Partials of DOUBLE columns: NaN is the greatest value (a MAX is NaN if any is, a MIN only if
    all are), -0.0 and 0.0 are one value of a retractable MIN/MAX's multiset, sums weighted."""
    import math

    from millpond.spark.combine import Combine

    nan = float("nan")
    records = pa.table({"g": [1, 1, 1, 2, 2, 3], "x": [1.0, nan, -2.0, nan, nan, -0.0],
                        "_w": pa.array([1, 1, 1, 1, 1, -1], pa.int8())})
    out = Combine((("g", "g"),), (("s", "x"),), (), (("hi", "x", "max"), ("lo", "x", "min")))(
        records, pa.schema([("g", pa.int64()), ("_w", pa.int64()), ("s", pa.float64()), ("hi", pa.float64()),
                            ("lo", pa.float64())])).sort_by("g").to_pylist()
    assert [(r["g"], r["_w"]) for r in out] == [(1, 3), (2, 2), (3, -1)]
    assert math.isnan(out[0]["hi"]) and out[0]["lo"] == -2.0 and math.isnan(out[1]["hi"]) and math.isnan(out[1]["lo"])
    assert math.isnan(out[0]["s"]) and out[2]["s"] == 0.0
    values = Combine((("g", "g"), ("v", "x")), (), (), ())(
        pa.table({"g": [1, 1, 1], "x": [-0.0, 0.0, nan], "_w": pa.array([1, 1, 1], pa.int8())}),
        pa.schema([("g", pa.int64()), ("v", pa.float64()), ("_w", pa.int64())]))
    assert sorted(values.column("_w").to_pylist()) == [1, 2]  # -0.0 and 0.0: one key
    assert not any(math.copysign(1, v) < 0 for v in values.column("v").to_pylist() if not math.isnan(v))


def test_an_epoch_decodes_only_the_log_columns_used_and_a_table_looks_up_none_of_its_rows(open_db, monkeypatch):
    """A column no view uses is never decoded from the log's Parquet files (each read asks for the
    columns its consumer takes), and a table's ``DELETE`` is looked up once — by the statement,
    which found the rows it retracts — not a second time by the table's own part of the epoch."""
    from millpond.log import state as log_state
    from millpond.store import state_table

    reads, lookups = [], []
    read_parquet, lookup = log_state._read_parquet, state_table.StateTable.lookup
    monkeypatch.setattr(log_state, "_read_parquet",
                        lambda store, key, schema, lo, hi: (reads.append(set(schema.names)),
                                                            read_parquet(store, key, schema, lo, hi))[1])
    monkeypatch.setattr(state_table.StateTable, "lookup",
                        lambda self, kh: (lookups.append(self.name), lookup(self, kh))[1])
    db = open_db()
    db.sql("CREATE TABLE w (k BIGINT PRIMARY KEY, v BIGINT, pad VARCHAR); "
           "CREATE MATERIALIZED VIEW s AS SELECT k % 3 AS g, SUM(v) AS total FROM w GROUP BY k % 3")
    table = f"o{db.runtime.catalog.tables['w'].id}."
    want = {}
    for i in range(3):
        keys = range(i * 100, i * 100 + 100)
        db.insert("w", pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([k * 7 % 11 for k in keys], pa.int64()),
                                 "pad": pa.array(["x" * 500] * 100)}))
        want.update({k: k * 7 % 11 for k in keys})
        if i:
            db.sql(f"DELETE FROM w WHERE k < {i * 40}")
            want = {k: v for k, v in want.items() if k >= i * 40}
        db.runtime.log.flush()  # the records in Parquet files, as an epoch after a while reads them
        reads.clear()
        lookups.clear()
        db.flush()
        assert {"k", "v", "_w"} in reads, reads  # the view's read: its columns and the weights only
        assert not [n for n in lookups if n.startswith(table)], lookups
        totals = {}
        for k, v in want.items():
            totals[k % 3] = totals.get(k % 3, 0) + v
        assert rows(db.sql("SELECT * FROM s")) == sorted(totals.items())
