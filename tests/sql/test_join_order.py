"""The order of inner joins (millpond.sql.planner.order): the FROM items of the leading run of inner
joins in the order of least estimated intermediate rows, by the tables' sizes at CREATE stored with
the plan; FROM order for a plan derived without sizes (views created before), and ties."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import sqlglot

from millpond.catalog import Catalog, Column
from millpond.engine import plan as P
from millpond.sql import ddl
from millpond.sql.planner import plan_view
from millpond.sql.planner.order import selectivity
from millpond.sql.statements import parse
from tests.conftest import rows
from tests.sql.test_stored_plans import _catalog_file

SIZES = {"sale": 1_000_000, "shop": 1_000, "region": 10, "item": 50_000}


def _catalog() -> Catalog:
    c = Catalog()
    c = c.with_table("sale", (Column("id", "BIGINT"), Column("shop", "BIGINT"), Column("item", "BIGINT"),
                              Column("amount", "BIGINT")), ("id",))
    c = c.with_table("shop", (Column("shop_id", "BIGINT"), Column("region", "BIGINT"), Column("city", "VARCHAR")),
                     ("shop_id",))
    c = c.with_table("region", (Column("region_id", "BIGINT"), Column("name", "VARCHAR")), ("region_id",))
    return c.with_table("item", (Column("item_id", "BIGINT"), Column("region", "BIGINT"), Column("kind", "VARCHAR")),
                        ("item_id",))


def _order(sql: str, sizes: dict | None = SIZES, **sampled) -> list[str]:  # noqa: ANN003
    """The tables of the plan's joins, in the order they are joined (left-deep: the first's left)."""
    plan, _ = plan_view(parse(sql)[0], _catalog(), sizes=sizes, **sampled)
    found = []

    def walk(node: P.Node) -> None:
        if isinstance(node, P.Join):
            walk(node.left)
            walk(node.right)
        elif isinstance(node, P.Source):
            found.append(node.table)
        else:
            for i in P.inputs(node):
                walk(i)
    walk(plan)
    return found


STAR = """SELECT r.name, SUM(amount) AS total FROM sale, shop, region r
          WHERE sale.shop = shop.shop_id AND shop.region = r.region_id AND r.name = 'north' GROUP BY r.name"""


def test_a_selective_dimension_is_joined_before_the_facts():
    # FROM order keeps every sale in sale ⋈ shop; from the region (one of ten), a tenth of the shops
    assert _order(STAR) == ["shop", "region", "sale"]
    assert _order(STAR, sizes=None) == ["sale", "shop", "region"]  # a plan derived without sizes


def test_without_sizes_filters_and_keys_still_order_the_joins():
    # every table the same size (empty at CREATE): the filtered region's shops first still
    assert _order(STAR, sizes={}) == ["shop", "region", "sale"]


def test_inner_joins_written_with_on_are_ordered_too():
    sql = """SELECT r.name, SUM(amount) AS total FROM sale JOIN shop ON sale.shop = shop.shop_id
             JOIN region r ON shop.region = r.region_id WHERE r.name = 'north' GROUP BY r.name"""
    assert _order(sql) == ["shop", "region", "sale"]
    # a RIGHT JOIN after them may pad them: their ON conditions stay where they were written
    padded = """SELECT sale.id, r.name FROM sale JOIN shop ON sale.shop = shop.shop_id
                RIGHT JOIN region r ON shop.region = r.region_id"""
    assert _order(padded) == ["sale", "shop", "region"]


def test_a_join_on_a_key_is_preferred_to_one_pairing_many_with_many():
    # item and shop share only a region (many to many); each joins a sale on its key
    sql = """SELECT shop.city, SUM(amount) AS total FROM item, shop, sale
             WHERE item.region = shop.region AND sale.item = item.item_id AND sale.shop = shop.shop_id
               AND item.kind = 'tool' GROUP BY shop.city"""
    order = _order(sql)
    assert order.index("sale") == 1, order  # item ⋈ sale ⋈ shop, never item × shop by region


def test_the_shape_of_a_condition_gives_its_selectivity():
    def sel(sql: str) -> float:
        return selectivity(sqlglot.parse_one(sql, read="postgres"))
    assert sel("a = 1") < sel("a IN (1, 2, 3)") < sel("a BETWEEN 1 AND 2") < sel("a > 1") < sel("a <> 1")
    assert sel("a = 1 AND b > 2") == pytest.approx(sel("a = 1") * sel("b > 2"))
    assert sel("a = 1 OR b = 2") == pytest.approx(2 * sel("a = 1"))
    assert sel("NOT a = 1") == pytest.approx(1 - sel("a = 1"))


FLAGGED = """SELECT r.name, SUM(amount) AS total FROM sale, shop, region r
             WHERE sale.shop = shop.shop_id AND shop.region = r.region_id AND sale.amount = 5 AND r.name = 'north'
             GROUP BY r.name"""


def test_a_sampled_share_of_rows_overrides_the_guess_by_shape():
    # by shape, both equalities keep 5%: from the shops of the north; sampled, the amount keeps 10 sales
    # in a million and the name every region: from those sales
    assert _order(FLAGGED) == ["shop", "region", "sale"]
    shares: dict = {}
    sampled = _order(FLAGGED, shares=shares, sample=lambda table, columns, condition: {"sale": 1e-5, "region": 1.0}.get(table))
    assert sampled == ["sale", "shop", "region"]
    assert sorted(k.split(" WHERE ")[0] for k in shares) == ["region", "sale"]
    assert _order(FLAGGED, shares=dict(shares)) == sampled  # derived again from the stored shares alone


def test_a_view_read_as_a_source_is_ordered_by_its_size():
    # a view of a million rows and a table of ten joined to a filtered table: the small one first
    c = _catalog()
    inner, depends = plan_view(parse("CREATE MATERIALIZED VIEW big AS SELECT id, shop FROM sale")[0].expression, c)
    c = c.with_view("big", "CREATE MATERIALIZED VIEW big AS SELECT id, shop FROM sale",
                    pa.schema([("id", pa.int64()), ("shop", pa.int64())]), depends, P.encode(inner))
    sql = """SELECT big.id, r.name FROM big, shop, region r
             WHERE big.shop = shop.shop_id AND shop.region = r.region_id AND r.name = 'north'"""

    def order(sizes: dict) -> list[str]:
        plan, _ = plan_view(parse(sql)[0], c, views=True, sizes=sizes)
        return [s.table for s in P.sources(plan)]
    assert order({**SIZES, "big": 1_000_000}) == ["shop", "region", "big"]
    assert order({**SIZES, "big": 1}) == ["big", "shop", "region"]


SCHEMA = """CREATE TABLE sale (id BIGINT PRIMARY KEY, shop BIGINT, item BIGINT, amount BIGINT);
CREATE TABLE shop (shop_id BIGINT PRIMARY KEY, region BIGINT, city VARCHAR);
CREATE TABLE region (region_id BIGINT PRIMARY KEY, name VARCHAR)"""
VIEW = f"CREATE MATERIALIZED VIEW north AS {STAR}"


def _load(db, n: int = 2_000) -> None:  # noqa: ANN001
    db.sql(SCHEMA)
    db.insert("region", pa.table({"region_id": list(range(10)), "name": ["north"] + [f"r{i}" for i in range(1, 10)]}))
    db.insert("shop", pa.table({"shop_id": list(range(100)), "region": [i % 10 for i in range(100)],
                                "city": [f"c{i}" for i in range(100)]}))
    db.insert("sale", pa.table({"id": list(range(n)), "shop": [i % 100 for i in range(n)], "item": [0] * n,
                                "amount": list(range(n))}))
    db.flush()


def _joined(db, view: str) -> list[str]:  # noqa: ANN001
    """The tables of a view's stored plan, in join order."""
    return [s.table for s in P.sources(P.decode(db.catalog.views[view].plan))]


def test_a_view_keeps_the_order_chosen_at_create_as_its_tables_grow(open_db):
    db = open_db()
    _load(db)
    db.sql(VIEW)
    db.flush()
    want = [("north", sum(i for i in range(2_000) if i % 100 % 10 == 0))]
    assert rows(db.sql("SELECT * FROM north")) == want
    assert db.catalog.views["north"].plan["sizes"] == {"region": 10, "sale": 2_000, "shop": 100}
    assert list(db.catalog.views["north"].plan["shares"].values()) == [0.1]  # sampled: 1 of the 10 regions
    assert _joined(db, "north") == ["shop", "region", "sale"]
    db.insert("region", pa.table({"region_id": list(range(10, 5_000)), "name": ["x"] * 4_990}))
    db.sql("DELETE FROM sale WHERE id < 100")
    db.flush()
    db.close()
    again = open_db()  # derived again with the stored sizes, not today's: the same plan, its state read
    assert _joined(again, "north") == ["shop", "region", "sale"]
    assert rows(again.sql("SELECT * FROM north")) == [("north", want[0][1] - sum(i for i in range(100) if i % 10 == 0))]


def test_a_view_created_before_joins_were_ordered_runs_in_from_order(open_db, root, monkeypatch):
    db = open_db()
    _load(db)
    plan_view = ddl.plan_view  # as a millpond of then planned it: FROM order, no sizes stored
    monkeypatch.setattr(ddl, "plan_view", lambda *a, **k: plan_view(*a, **{**k, "sizes": None}))
    db.sql(VIEW)
    db.flush()
    monkeypatch.undo()
    before = rows(db.sql("SELECT * FROM north"))
    db.close()
    path = _catalog_file(root)
    body = json.loads(path.read_text())
    del body["views"][0]["plan"]["sizes"]
    path.write_text(json.dumps(body))
    again = open_db()  # derived in FROM order, as it was made: its state is read
    assert _joined(again, "north") == ["sale", "shop", "region"]
    again.sql("DELETE FROM sale WHERE id < 100")
    again.flush()
    assert rows(again.sql("SELECT * FROM north")) == [("north", before[0][1] - sum(i for i in range(100)
                                                                                  if i % 10 == 0))]
    again.sql(VIEW.replace("VIEW north", "VIEW north2"))  # created now: ordered by its tables' sizes
    again.flush()
    assert _joined(again, "north2") == ["shop", "region", "sale"]
    assert rows(again.sql("SELECT * FROM north2")) == rows(again.sql("SELECT * FROM north"))
