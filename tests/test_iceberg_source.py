"""An Iceberg table is a source (``WITH (connector = 'iceberg', <the sinks' catalog options>)``), as
pyiceberg writes it: its snapshot, then each snapshot's added and deleted data files (appends,
copy-on-write deletes and overwrites), with every view equal to DuckDB over the Iceberg table itself
after every epoch."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo, LessThan

from millpond import SqlError
from tests.conftest import rows
from tests.iceberg_deletes import data_files, delete_positions


def _sorted(table_rows: list[tuple]) -> list[tuple]:
    return sorted(table_rows, key=lambda r: tuple((v is not None, v) for v in r))


def _batch(rng: random.Random, keys: range) -> pa.Table:
    return pa.table({"id": pa.array(list(keys), pa.int64()),
                     "region": [rng.choice(["eu", "us", "ap"]) for _ in keys],
                     "amount": pa.array([rng.randrange(1000) for _ in keys], pa.int64())})


def _lake(tmp_path):  # noqa: ANN001, ANN202
    """A SQL catalog under ``tmp_path`` with a ``shop`` namespace, and the options of a table of it (up
    to the quoted table name)."""
    warehouse, uri = tmp_path / "warehouse", f"sqlite:///{tmp_path / 'catalog.db'}"
    warehouse.mkdir()
    catalog = SqlCatalog("millpond", uri=uri, warehouse=warehouse.as_uri())
    catalog.create_namespace("shop")
    return catalog, (f"catalog.type = 'sql', catalog.uri = '{uri}', warehouse.path = '{warehouse}', "
                     "database.name = 'shop', table.name = ")


def _check(db, catalog) -> None:  # noqa: ANN001
    """``orders`` and ``per_region`` equal to DuckDB over pyiceberg's own scan of the table."""
    con = duckdb.connect()
    con.register("d", catalog.load_table(("shop", "orders")).scan().to_arrow())
    assert rows(db.sql("SELECT * FROM orders")) == _sorted([tuple(r) for r in con.execute("SELECT * FROM d").fetchall()])
    assert rows(db.sql("SELECT * FROM per_region")) == _sorted(
        [tuple(r) for r in con.execute("SELECT region, count(*), sum(amount) FROM d GROUP BY region").fetchall()])


def test_an_iceberg_tables_snapshots_are_followed(open_db, tmp_path):
    catalog, where = _lake(tmp_path)
    rng = random.Random(4)
    first = _batch(rng, range(100))
    ice = catalog.create_table(("shop", "orders"), schema=first.schema)
    ice.append(first)
    options = f"{where}'orders'"
    db = open_db()
    db.sql(f"CREATE TABLE orders (PRIMARY KEY (id)) WITH (connector = 'iceberg', {options})")
    db.sql("CREATE MATERIALIZED VIEW per_region AS SELECT region, count(*) AS n, sum(amount) AS total "
           "FROM orders GROUP BY region")
    with pytest.raises(SqlError, match="column 'nope' is not in the Iceberg table shop.orders"):
        db.sql(f"CREATE TABLE x (nope INT) WITH (connector = 'iceberg', {options})")
    next_id = 100
    for step in range(4):
        db.flush()
        _check(db, catalog)
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


@pytest.mark.parametrize("in_tasks", [False, True], ids=["driver", "spark_tasks"])
def test_position_deletes_are_followed(open_db, tmp_path, monkeypatch, in_tasks):
    """Merge-on-read deletes (position delete files, as Spark writes them): rows they mark leave
    the table, a data file with deletes rewritten later (a copy-on-write delete) gives only the rows
    it still had, and the snapshot at CREATE already applies them; every epoch equal to DuckDB over
    pyiceberg's own scan. ``in_tasks``: Spark tasks read the files (the cluster's path)."""
    if in_tasks:
        from millpond.spark import executor

        monkeypatch.setitem(executor.DRIVER_RECORDS, "local", 0)
    catalog, where = _lake(tmp_path)
    rng = random.Random(6)
    ice = catalog.create_table(("shop", "orders"), schema=_batch(rng, range(1)).schema,
                               properties={"format-version": "2"})
    for start in (0, 100, 200):
        ice.append(_batch(rng, range(start, start + 100)))
    deleted: dict[str, set[int]] = {}

    def delete_some() -> None:
        """Rows of a file marked deleted, half of them written again (an update: Spark's merge-on-read
        writes the new row to a new file) with amounts a later copy-on-write delete keeps."""
        table = catalog.load_table(("shop", "orders"))
        files = data_files(table)
        path = rng.choice(sorted(f for f in files if files[f] >= 10))
        fresh = set(rng.sample(range(files[path]), 6)) - deleted.setdefault(path, set())
        deleted[path] |= fresh
        delete_positions(table, {path: sorted(fresh)})
        ids = pq.read_table(path.removeprefix("file://")).column("id").take(pa.array(sorted(fresh))[:3])
        catalog.load_table(("shop", "orders")).append(pa.table({
            "id": ids, "region": ["eu"] * len(ids), "amount": pa.array([rng.randrange(500, 900) for _ in ids], pa.int64())}))

    delete_some()  # before the table is read: its snapshot applies them
    options = f"{where}'orders'"
    db = open_db()
    db.sql(f"CREATE TABLE orders (PRIMARY KEY (id)) WITH (connector = 'iceberg', {options})")
    db.sql("CREATE MATERIALIZED VIEW per_region AS SELECT region, count(*) AS n, sum(amount) AS total "
           "FROM orders GROUP BY region")
    next_id = 300
    for step in range(6):
        db.flush()
        _check(db, catalog)
        if step == 3:  # files with position deletes rewritten copy-on-write (their rows still there: kept)
            catalog.load_table(("shop", "orders")).delete(LessThan("amount", 100))
            deleted.clear()
        else:
            delete_some()
        if step % 2:
            catalog.load_table(("shop", "orders")).append(_batch(rng, range(next_id, next_id + 20)))
            next_id += 20
    db.flush()
    _check(db, catalog)
    assert catalog.load_table(("shop", "orders")).scan().to_arrow().num_rows < 300 + 60


def test_a_keyless_tables_position_delete_stops_it(open_db, tmp_path):
    catalog, where = _lake(tmp_path)
    ice = catalog.create_table(("shop", "ev"), schema=pa.schema([("g", pa.string())]), properties={"format-version": "2"})
    ice.append(pa.table({"g": ["a", "b", "c"]}))
    options = f"{where}'ev'"
    db = open_db()
    db.sql(f"CREATE TABLE ev WITH (connector = 'iceberg', {options})")
    db.flush()
    table = catalog.load_table(("shop", "ev"))
    delete_positions(table, {next(iter(data_files(table))): [1]})
    with pytest.warns(Warning, match="deletes or updates 1 rows"):
        db.flush()
    assert rows(db.sql("SELECT * FROM ev")) == [("a",), ("b",), ("c",)]  # stopped before the delete
