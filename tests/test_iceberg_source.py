"""An Iceberg table is a source (``WITH (connector = 'iceberg', <the sinks' catalog options>)``), as
pyiceberg writes it: its snapshot, then each snapshot's added and deleted data files (appends,
copy-on-write deletes and overwrites), with every view equal to DuckDB over the Iceberg table itself
after every epoch."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo, LessThan

from millpond import SqlError
from tests.conftest import rows


def _sorted(table_rows: list[tuple]) -> list[tuple]:
    return sorted(table_rows, key=lambda r: tuple((v is not None, v) for v in r))


def _batch(rng: random.Random, keys: range) -> pa.Table:
    return pa.table({"id": pa.array(list(keys), pa.int64()),
                     "region": [rng.choice(["eu", "us", "ap"]) for _ in keys],
                     "amount": pa.array([rng.randrange(1000) for _ in keys], pa.int64())})


def test_an_iceberg_tables_snapshots_are_followed(open_db, tmp_path):
    warehouse, uri = tmp_path / "warehouse", f"sqlite:///{tmp_path / 'catalog.db'}"
    warehouse.mkdir()
    catalog = SqlCatalog("millpond", uri=uri, warehouse=warehouse.as_uri())
    catalog.create_namespace("shop")
    rng = random.Random(4)
    first = _batch(rng, range(100))
    ice = catalog.create_table(("shop", "orders"), schema=first.schema)
    ice.append(first)
    options = (f"catalog.type = 'sql', catalog.uri = '{uri}', warehouse.path = '{warehouse}', "
               "database.name = 'shop', table.name = 'orders'")
    db = open_db()
    db.sql(f"CREATE TABLE orders (PRIMARY KEY (id)) WITH (connector = 'iceberg', {options})")
    db.sql("CREATE MATERIALIZED VIEW per_region AS SELECT region, count(*) AS n, sum(amount) AS total "
           "FROM orders GROUP BY region")
    with pytest.raises(SqlError, match="column 'nope' is not in the Iceberg table shop.orders"):
        db.sql(f"CREATE TABLE x (nope INT) WITH (connector = 'iceberg', {options})")
    next_id = 100
    for step in range(4):
        db.flush()
        con = duckdb.connect()
        con.register("d", catalog.load_table(("shop", "orders")).scan().to_arrow())
        assert rows(db.sql("SELECT * FROM orders")) == _sorted([tuple(r) for r in con.execute("SELECT * FROM d").fetchall()])
        assert rows(db.sql("SELECT * FROM per_region")) == _sorted(
            [tuple(r) for r in con.execute("SELECT region, count(*), sum(amount) FROM d GROUP BY region").fetchall()])
        ice = catalog.load_table(("shop", "orders"))
        if step % 3 == 0:
            ice.append(_batch(rng, range(next_id, next_id + 20)))
            next_id += 20
        elif step % 3 == 1:
            ice.delete(LessThan("id", rng.randrange(10, 60)))  # copy-on-write: files rewritten
        else:
            ice.overwrite(_batch(rng, range(next_id, next_id + 10)), overwrite_filter=EqualTo("region", "eu"))
            next_id += 10
    status = db.sql("SELECT split, lag FROM millpond_sources").to_pylist()
    assert status == [{"split": "shop.orders", "lag": 0}]
