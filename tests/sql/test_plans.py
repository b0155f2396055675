"""Golden plans: every ``plans/<case>.sql`` (one construct of the README's view table) plans to
exactly the plan printed in ``plans/<case>.plan``, and that plan survives the catalog's
encoding unchanged.

A planner change that changes a plan fails here, on purpose: look at the diff, and if the new plan
is right, regenerate the files with ``MILLPOND_UPDATE_GOLDEN=1 make test`` (stored plans of
existing views keep running as they were created; see ``sql/plans.py``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from millpond.catalog import Catalog, Column
from millpond.engine import plan as P
from millpond.sql.planner import plan_view
from millpond.sql.statements import parse

CASES = sorted(Path(__file__).parent.glob("plans/*.sql"))
PER_PRODUCT = "CREATE MATERIALIZED VIEW per_product AS SELECT product, COUNT(*) AS n FROM visit GROUP BY product"


def _catalog() -> Catalog:
    c = Catalog()
    c = c.with_table("info", (Column("product", "VARCHAR"), Column("category", "VARCHAR")), ("product",))
    c = c.with_table("visit", (Column("product", "VARCHAR"), Column("user", "VARCHAR"), Column("length", "INT")), ())
    c = c.with_table("clicks", (Column("ts", "TIMESTAMP"), Column("product", "VARCHAR"), Column("n", "INT")), ())
    inner, depends = plan_view(parse(PER_PRODUCT)[0].expression, c)
    schema = pa.schema([("product", pa.string()), ("n", pa.int64())])
    return c.with_view("per_product", PER_PRODUCT, schema, depends, P.encode(inner))


def test_every_construct_of_the_view_table_has_a_case():
    assert len(CASES) >= 25


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_plan_matches_its_golden_file(case: Path):
    plan, _ = plan_view(parse(case.read_text())[0], _catalog(), eager=case.stem.startswith("eager"), sizes={})  # as CREATE over empty tables
    got = P.explain(plan) + "\n"
    golden = case.with_suffix(".plan")
    if os.environ.get("MILLPOND_UPDATE_GOLDEN"):
        golden.write_text(got)
    assert golden.exists(), f"no golden plan for {case.name}: run with MILLPOND_UPDATE_GOLDEN=1"
    assert got == golden.read_text(), f"{case.name}: the plan changed"
    again = P.decode(json.loads(json.dumps(P.encode(plan))))
    assert again == plan and P.first_difference(again, plan) is None


def test_canonical_form_ignores_numbering_only():
    plan, _ = plan_view(parse((CASES[0].parent / "join_three_way.sql").read_text())[0], _catalog())
    shifted = P.decode(json.loads(json.dumps(P.encode(plan)).replace('"node_id": ', '"node_id": 10')))
    assert shifted != plan
    assert P.first_difference(P.canonical(shifted), P.canonical(plan)) is None
    other, _ = plan_view(parse("SELECT a.product FROM visit a JOIN visit b ON a.product = b.product")[0], _catalog())
    assert P.first_difference(P.canonical(other), P.canonical(plan)) is not None


@pytest.mark.parametrize("sql, expected", [
    ("SELECT product, count(*) AS n FROM visit GROUP BY product", {"visit": ("product",)}),
    ("SELECT product, sum(length) AS s FROM visit WHERE user <> 'bot' GROUP BY product",
     {"visit": ("product", "user", "length")}),
    ("SELECT user FROM visit WHERE length > 3", {"visit": ("user", "length")}),
    ("SELECT v.user, i.category FROM visit v JOIN info i ON v.product = i.product",  # a join side: its keys, and
     {"visit": ("product", "user"), "info": ("product", "category")}),  # the columns used above it
    ("SELECT x.user FROM (SELECT * FROM visit ORDER BY length LIMIT 2) x",  # top-N breaks ties by every column
     {"visit": ("product", "user", "length")}),
    ("SELECT product, n FROM (SELECT product, count(*) AS n FROM visit GROUP BY product) s WHERE n > 1",
     {"visit": ("product",)}),
])
def test_a_scan_reads_only_the_columns_its_plan_uses(sql: str, expected: dict):
    plan, _ = plan_view(parse(f"CREATE MATERIALIZED VIEW v AS {sql}")[0].expression, _catalog())
    from millpond.spark.inputs import read_columns

    used = read_columns(plan)
    assert {s.table: used[id(s)] for s in P.sources(plan)} == expected
