"""Window functions as ordinary output columns (``f(...) OVER (...)``): the operator fed scripted
epochs, its frames against DuckDB, the planner's refusals, and views under random inserts, updates
and deletes equal to DuckDB recomputing the same SQL after every epoch."""

from __future__ import annotations

import decimal
import random

import duckdb
import polars as pl
import pytest

from millpond import SqlError
from millpond.catalog import Catalog, Column
from millpond.columns import KH, W
from millpond.engine.operators import Over
from millpond.engine.plan import Frame, OverCall
from millpond.errors import InvariantError
from millpond.sql.planner import plan_view
from millpond.sql.statements import parse
from tests import workload
from tests.conftest import rows
from tests.engine.harness import Harness, as_rows, changelog


# -- the operator ---------------------------------------------------------------------------------
def _epochs(tmp_path, spec: Over, columns: list[str]):
    h = Harness(str(tmp_path), spec.parts())
    reads: list[int] = []

    class Counted:  # the real state table, with the partition hashes of its multi-gets counted
        def __init__(self, table):
            self.table = table

        def lookup(self, kh):
            reads.append(len(kh))
            return self.table.lookup(kh)

    def epoch(text: str) -> list[tuple]:
        out, writes = spec.apply(changelog(columns, text, key=list(spec.partition)),
                                 {"rows": Counted(h.states()["rows"])})
        h.commit(writes)
        return as_rows(out)
    return epoch, reads


def test_running_sum_rank_and_lag_retract_the_rows_they_renumber(tmp_path):
    spec = Over(("p", "v"), ("p",), (("v", False, False),),
                (OverCall("sum", "v", "s", Frame("range", None, 0)), OverCall("rank", None, "r"),
                 OverCall("lag", "v", "prev")), name="t")
    epoch, reads = _epochs(tmp_path, spec, ["p", "v"])
    assert epoch("""
        + a 10
        + a 20
        + b 5""") == [("a", 10, 10, 1, None, 1), ("a", 20, 30, 2, 10, 1), ("b", 5, 5, 1, None, 1)]
    # a second 10 is a peer of the first: the running sum counts both for each, and 20 ranks third
    assert epoch("+ a 10") == [("a", 10, 10, 1, None, -1), ("a", 10, 20, 1, None, 1), ("a", 10, 20, 1, 10, 1),
                               ("a", 20, 30, 2, 10, -1), ("a", 20, 40, 3, 10, 1)]
    assert reads == [2, 1]  # one multi-get per epoch, of the partitions touched: b was not read now
    assert epoch("""
        - a 20
        + b 7""") == [("a", 20, 40, 3, 10, -1), ("b", 7, 12, 2, 5, 1)]
    assert epoch("""
        - a 10
        - a 10""") == [("a", 10, 20, 1, None, -1), ("a", 10, 20, 1, 10, -1)]
    # an insert and a delete of the same row in one epoch cancel before any state is read
    assert epoch("""
        + b 99
        - b 99""") == []
    assert reads == [2, 1, 2, 1]


def test_a_moving_frame_counts_rows_not_peers_and_an_empty_frame_sums_to_null(tmp_path):
    spec = Over(("p", "v"), ("p",), (("v", False, False),),
                (OverCall("sum", "v", "s2", Frame("rows", -1, 0)),
                 OverCall("count_star", None, "n2", Frame("rows", -1, 0)),
                 OverCall("sum", "v", "next", Frame("rows", 1, 1)), OverCall("row_number", None, "rn")), name="t")
    epoch, _ = _epochs(tmp_path, spec, ["p", "v"])
    assert epoch("""
        + a 1
        + a 1
        + a 4""") == [("a", 1, 1, 1, 1, 1, 1), ("a", 1, 2, 2, 4, 2, 1), ("a", 4, 5, 2, None, 3, 1)]
    assert epoch("- a 1") == [("a", 1, 1, 1, 1, 1, -1), ("a", 1, 1, 1, 4, 1, 1), ("a", 1, 2, 2, 4, 2, -1),
                              ("a", 4, 5, 2, None, 2, 1), ("a", 4, 5, 2, None, 3, -1)]


def test_retracting_a_row_that_is_not_there_fails_the_epoch(tmp_path):
    spec = Over(("p", "v"), ("p",), (), (OverCall("count_star", None, "n", Frame("rows", None, None)),), name="t")
    epoch, _ = _epochs(tmp_path, spec, ["p", "v"])
    assert epoch("+ a 1") == [("a", 1, 1, 1)]
    with pytest.raises(InvariantError, match=r"window t: retraction of a row that is not there: \{'p': 'a', 'v': 2"):
        epoch("- a 2")


FRAMES = {  # frame -> the same frame in SQL
    Frame("range", None, 0): "",
    Frame("rows", None, None): "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING",
    Frame("rows", -2, 0): "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW",
    Frame("rows", None, 0): "ROWS UNBOUNDED PRECEDING",
    Frame("rows", -1, 3): "ROWS BETWEEN 1 PRECEDING AND 3 FOLLOWING",
    Frame("range", 0, None): "RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
    Frame("rows", 2, 5): "ROWS BETWEEN 2 FOLLOWING AND 5 FOLLOWING",
    Frame("rows", -3, -1): "ROWS BETWEEN 3 PRECEDING AND 1 PRECEDING",
}


def test_every_frame_and_function_matches_duckdb(tmp_path):
    """One epoch of 400 rows with NULLs and peers, every call over every frame, against DuckDB."""
    rng = random.Random(7)
    n = 400
    data = pl.DataFrame({
        "p": [rng.choice(["a", "b", "c", None]) for _ in range(n)],
        "v": [None if rng.random() < .1 else rng.randrange(20) for _ in range(n)],
        "d": [None if rng.random() < .1 else decimal.Decimal(rng.randrange(1000)) / 100 for _ in range(n)],
        "s": [rng.choice(["x", "y", "z", None]) for _ in range(n)],
        "u": list(range(n)),
    }, schema_overrides={"d": pl.Decimal(10, 2)})
    calls, sql = [], []
    for k, (frame, text) in enumerate(FRAMES.items()):
        for func, arg in [("sum", "v"), ("sum", "d"), ("count", "v"), ("count_star", None), ("min", "s"), ("max", "d")]:
            name = f"{func}_{arg}_{k}"
            calls.append(OverCall(func, arg, name, frame))
            sql.append(f"{'count' if func == 'count_star' else func}({arg or '*'}) "
                       f"OVER (PARTITION BY p ORDER BY v NULLS FIRST, u {text}) AS {name}")
    for func, arg, offset, default in [("lag", "v", 2, "u"), ("lead", "s", 1, None), ("lead", "d", -3, None)]:
        calls.append(OverCall(func, arg, f"{func}_{arg}", offset=offset, default=default))
        sql.append(f"{func}({arg}, {offset}{', ' + default if default else ''}) "
                   f"OVER (PARTITION BY p ORDER BY v NULLS FIRST, u) AS {func}_{arg}")
    # ordered by v alone: rows with equal v are peers, which a RANGE frame takes together
    ranks = ["row_number", "rank", "dense_rank"]
    by_v = [OverCall(f, None, f) for f in ranks] + [
        OverCall("sum", "d", "sum_peers", Frame("range", None, 0)),
        OverCall("min", "s", "min_peers", Frame("range", 0, None))]
    spec = Over(tuple(data.columns), ("p",), (("v", False, True), ("u", False, False)), tuple(calls), name="t")
    peers = Over(tuple(data.columns), ("p",), (("v", True, False),), tuple(by_v), name="t")
    sql += [f"{f}() OVER (PARTITION BY p ORDER BY v DESC NULLS LAST) AS {f}" for f in ranks]
    sql += ["sum(d) OVER (PARTITION BY p ORDER BY v DESC NULLS LAST) AS sum_peers",
            "min(s) OVER (PARTITION BY p ORDER BY v DESC NULLS LAST RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)"
            " AS min_peers"]
    delta = data.with_columns(pl.col("p").hash(seed=1).reinterpret(signed=True).alias(KH), pl.lit(1, pl.Int64).alias(W))
    out, _ = spec.apply(delta, {"rows": Harness(str(tmp_path), spec.parts()).states()["rows"]})
    ranked, _ = peers.apply(delta, {"rows": Harness(str(tmp_path / "r"), peers.parts()).states()["rows"]})
    got = out.join(ranked.select("u", *(c.name for c in by_v)), on="u").drop(W)
    con = duckdb.connect()
    con.register("t", data.to_arrow())
    want = pl.from_arrow(con.sql(f"SELECT *, {', '.join(sql)} FROM t").arrow())
    assert got.height == n
    for c in want.columns:
        # a row_number among peers is PostgreSQL's choice: compare it where v has no peer
        mask = pl.Series([True] * n) if c != "row_number" else ~data.sort("u")["v"].is_duplicated()
        assert got.sort("u")[c].filter(mask).to_list() == want.sort("u")[c].filter(mask).to_list(), c


# -- planning -------------------------------------------------------------------------------------
def _catalog() -> Catalog:
    return Catalog().with_table(
        "visit", (Column("product", "VARCHAR"), Column("user", "VARCHAR"), Column("length", "INT")), ())


@pytest.mark.parametrize("sql,message", [
    ("SELECT SUM(length) OVER v FROM visit WINDOW w AS (ORDER BY length)", "window 'v' does not exist"),
    ("SELECT SUM(length) OVER (w ORDER BY product) FROM visit WINDOW w AS (ORDER BY length)",
     "cannot override ORDER BY clause of window 'w'"),
    ("SELECT SUM(length) OVER (w PARTITION BY product) FROM visit WINDOW w AS (ORDER BY length)",
     "cannot override PARTITION BY clause of window 'w'"),
    ("SELECT SUM(length) OVER (ORDER BY length RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) FROM visit",
     r"RANGE with an offset \(n PRECEDING or FOLLOWING\) is not supported in a materialized view: use ROWS"),
    ("SELECT SUM(length) OVER (ORDER BY length GROUPS 2 PRECEDING) FROM visit",
     r"GROUPS frames are not supported \(ROWS and RANGE are\)"),
    ("SELECT SUM(length) OVER (ORDER BY length ROWS BETWEEN 1 PRECEDING AND CURRENT ROW EXCLUDE TIES) FROM visit",
     "frame EXCLUDE is not supported"),
    ("SELECT COUNT(*) OVER (ORDER BY length ROWS BETWEEN CURRENT ROW AND 1 PRECEDING) FROM visit",
     "frame starting from current row cannot have preceding rows"),
    ("SELECT LAG(length, length) OVER (ORDER BY length) FROM visit",
     "LAG: the offset must be an integer constant in a materialized view"),
    ("SELECT SUM(DISTINCT length) OVER () FROM visit", "DISTINCT is not implemented for window functions"),
    ("SELECT product, COUNT(*), RANK() OVER (ORDER BY product) FROM visit GROUP BY product",
     "window functions together with aggregation are not supported"),
    ("SELECT SUM(SUM(length) OVER ()) OVER () FROM visit", "window function calls cannot be nested"),
])
def test_unsupported_window_sql_is_refused_by_name(sql, message):
    with pytest.raises(SqlError, match=message):
        plan_view(parse(sql)[0], _catalog())


def test_windows_share_an_operator_per_partition_and_order():
    sql = """SELECT product, RANK() OVER (PARTITION BY product ORDER BY length) AS r,
                 COUNT(*) OVER (PARTITION BY product) AS n,
                 SUM(length) OVER (PARTITION BY product ORDER BY length ROWS 1 PRECEDING) AS s,
                 ROW_NUMBER() OVER (ORDER BY length) AS g FROM visit"""
    plan, _ = plan_view(parse(sql)[0], _catalog())
    overs = []
    node = plan.input.input
    while hasattr(node, "calls"):
        overs.append(node)
        node = node.input
    # the whole-partition count reads no order: it joins the ranked window; the global order is another operator
    assert [(o.partition, [c.func for c in o.calls]) for o in overs] == [
        ((), ["row_number"]), (("visit__product",), ["rank", "sum", "count_star"])]


def test_row_number_filtered_by_rn_stays_a_top_n_and_other_ranks_are_windows():
    topn, _ = plan_view(parse("""SELECT * FROM (SELECT product, ROW_NUMBER() OVER (PARTITION BY product
        ORDER BY length) AS rn FROM visit) t WHERE rn <= 2""")[0], _catalog())
    ranked, _ = plan_view(parse("""SELECT * FROM (SELECT product, RANK() OVER (PARTITION BY product
        ORDER BY length) AS rn FROM visit) t WHERE rn <= 2""")[0], _catalog())
    assert "TopN" in _explain(topn) and "Over" not in _explain(topn)
    assert "Over" in _explain(ranked) and "TopN" not in _explain(ranked) and 'Filter "t__rn" <= 2' in _explain(ranked)


def _explain(plan) -> str:
    from millpond.engine.plan import explain

    return explain(plan)


# -- views against DuckDB -------------------------------------------------------------------------
W_MOVING = 'PARTITION BY product ORDER BY length NULLS FIRST, "user" DESC'  # ties only between identical rows
VIEWS = {
    "running": """SELECT product, "user", length,
            SUM(length) OVER (PARTITION BY product ORDER BY length) AS s,
            COUNT(*) OVER (PARTITION BY product ORDER BY length) AS n,
            AVG(length) OVER (PARTITION BY product ORDER BY length) AS a,
            MIN("user") OVER (PARTITION BY product ORDER BY length) AS first_user,
            COUNT(length) OVER (PARTITION BY product) AS nl,
            RANK() OVER (PARTITION BY product ORDER BY length) AS r,
            DENSE_RANK() OVER (PARTITION BY product ORDER BY length) AS dr FROM visit""",
    "moving": f"""SELECT product, "user", length,
            SUM(length) OVER ({W_MOVING} ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s3,
            AVG(length) OVER ({W_MOVING} ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS a3,
            MAX(length) OVER ({W_MOVING} ROWS UNBOUNDED PRECEDING) AS hi,
            MIN(length) OVER ({W_MOVING} ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS lo,
            ROW_NUMBER() OVER ({W_MOVING}) AS rn,
            length - LAG(length) OVER ({W_MOVING}) AS step,
            LEAD("user", 2, 'none') OVER ({W_MOVING}) AS ahead FROM visit""",
    "whole": """SELECT "user", length, COUNT(*) OVER () AS n,
            SUM(length) FILTER (WHERE length > 50) OVER () AS big,
            MAX(length) OVER (PARTITION BY "user") AS best FROM visit WHERE length IS NOT NULL""",
    "ranked": """SELECT * FROM (SELECT product, length, RANK() OVER (PARTITION BY product
            ORDER BY length DESC NULLS LAST) AS r FROM visit) t WHERE r <= 2""",
    "joined": """SELECT i.category, v.product, v.length,
            SUM(v.length) OVER (PARTITION BY i.category ORDER BY v.product) AS s,
            DENSE_RANK() OVER (PARTITION BY i.category ORDER BY v.product) AS dr
            FROM visit v JOIN info i ON v.product = i.product""",
}


def test_window_views_match_duckdb_after_every_epoch(open_db):
    rng = random.Random(15)
    db = open_db()
    db.sql(workload.TABLES)
    ref = workload.Reference()
    plan = workload.steps(35, 20)  # 78 visits; 5 visit updates or deletes after the views exist
    for step in plan[:5]:  # the views start over tables that already hold rows (backfill)
        workload.apply(db, step)
        ref.apply(step)
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    seen = dict.fromkeys(VIEWS, 0)
    for i in workload.epochs(db, ref, plan, 5, rng):
        for name, sql in VIEWS.items():
            got = workload.norm(db.sql(f"SELECT * FROM {name}"))
            assert got == ref.query(sql), f"{name} differs from DuckDB after step {i}, epoch {db.epoch}"
            seen[name] += len(got)
    assert all(seen.values()), f"some views stayed empty, so nothing was checked there: {seen}"


# -- ad-hoc queries and a restart -----------------------------------------------------------------
ADHOC = """SELECT product, "user", length,
    RANK() OVER (PARTITION BY product ORDER BY length) AS r,
    DENSE_RANK() OVER (PARTITION BY product ORDER BY length) AS dr,
    ROW_NUMBER() OVER (ORDER BY "user", product) AS rn,
    LAG(length) OVER (PARTITION BY product ORDER BY "user") AS prev,
    LEAD(length, 2, -1) OVER (PARTITION BY product ORDER BY "user") AS ahead,
    COUNT(*) OVER (PARTITION BY product) AS n,
    MIN(length) OVER (PARTITION BY product ORDER BY "user" ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS lo,
    COUNT(length) OVER (ORDER BY length) AS upto
  FROM visit"""
ADHOC_ROWS = [  # PostgreSQL's answer, worked by hand (NULLs sort last, and a length's peers count together)
    ("a", "u", 1, 1, 1, 1, None, 2, 4, 1, 1),
    ("a", "v", 2, 2, 2, 3, 1, 5, 4, 1, 3),
    ("a", "w", 2, 2, 2, 5, 2, -1, 4, 2, 3),
    ("a", "x", 5, 4, 3, 6, 2, -1, 4, 2, 5),
    ("b", "u", None, 2, 2, 2, None, -1, 2, None, 5),
    ("b", "v", 3, 1, 1, 4, None, -1, 2, 3, 4),
]


def test_ad_hoc_select_and_view_give_postgres_answers_and_survive_a_restart(open_db, root):
    db = open_db()
    db.sql('CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT)')
    db.sql("INSERT INTO visit VALUES ('a','u',1), ('a','v',2), ('a','w',2), ('a','x',5), ('b','u',NULL), ('b','v',3)")
    db.sql(f"CREATE MATERIALIZED VIEW w AS {ADHOC}")
    db.flush()
    assert rows(db.sql(ADHOC)) == ADHOC_ROWS
    assert rows(db.sql("SELECT * FROM w")) == ADHOC_ROWS
    db.close()
    again = open_db()  # the stored plan runs on, over the state it left
    again.sql("""DELETE FROM visit WHERE "user" = 'v' AND product = 'a'""")
    again.flush()
    assert rows(again.sql("SELECT * FROM w")) == rows(again.sql(ADHOC)) == [
        ("a", "u", 1, 1, 1, 1, None, 5, 3, 1, 1),
        ("a", "w", 2, 2, 2, 4, 1, -1, 3, 1, 2),
        ("a", "x", 5, 3, 3, 5, 2, -1, 3, 2, 4),
        ("b", "u", None, 2, 2, 2, None, -1, 2, None, 4),
        ("b", "v", 3, 1, 1, 3, None, -1, 2, 3, 3),
    ]


def test_ad_hoc_sum_and_avg_over_a_window(open_db):
    db = open_db()
    db.sql('CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT)')
    db.sql("INSERT INTO visit VALUES ('a','u',1), ('a','v',2), ('a','w',2)")
    db.flush()
    got = db.sql("""SELECT "user", SUM(length) OVER (ORDER BY length) AS s,
                    AVG(length) OVER (ORDER BY "user" ROWS 1 PRECEDING) AS a FROM visit""")
    assert rows(got) == [("u", 1, decimal.Decimal("1.000000")), ("v", 5, decimal.Decimal("1.500000")),
                         ("w", 5, decimal.Decimal("2.000000"))]


def test_named_windows_in_a_view_and_a_select(open_db):
    db = open_db()
    db.sql('CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT)')
    db.sql("INSERT INTO visit VALUES ('a','u',1), ('a','v',2), ('a','w',2), ('b','x',7)")
    named = """SELECT "user", RANK() OVER w AS r, SUM(length) OVER (p ORDER BY "user" ROWS 1 PRECEDING) AS s
               FROM visit WINDOW w AS (ORDER BY length), p AS (PARTITION BY product)"""
    db.sql(f"CREATE MATERIALIZED VIEW nw AS {named}")
    db.flush()
    want = [("u", 1, 1), ("v", 2, 3), ("w", 2, 4), ("x", 4, 7)]
    assert rows(db.sql(named)) == rows(db.sql("SELECT * FROM nw")) == want
