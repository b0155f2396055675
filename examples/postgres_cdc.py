"""An application's PostgreSQL tables in, views kept over them: a shop's customers and orders.

The application writes ``customers`` and ``orders`` in PostgreSQL, in transactions. millpond reads
both by logical replication (``CREATE TABLE ... WITH (connector = 'postgres-cdc', ...)``): a
snapshot first, then every committed transaction, whole, in one epoch, exactly once. A view joins
them. An order that moves money between two customers is one transaction: the view never shows
half of it. ``SHOW SOURCES`` says how far each table's slot is read.

Run it against a server with ``wal_level = logical`` and a user who may replicate:
``python examples/postgres_cdc.py "host=localhost port=5432 user=postgres dbname=postgres"``
(the tables are made in the database; dropped first when there).
"""

from __future__ import annotations

import shutil
import sys
import tempfile

import psycopg
import pyarrow as pa

import millpond


def show(title: str, table: pa.Table) -> None:
    print(f"\n{title}")
    print(table.to_pandas().to_string(index=False))


def run(dsn: str, root: str, spark=None) -> dict[str, pa.Table]:
    pg = psycopg.connect(dsn, autocommit=True)
    info = pg.info
    pg.execute("DROP TABLE IF EXISTS orders, customers")
    pg.execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, tier text)")
    pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer int REFERENCES customers, "
               "amount numeric(10,2), placed timestamptz DEFAULT now())")
    pg.execute("INSERT INTO customers VALUES (1, 'ada', 'gold'), (2, 'bob', 'silver'), (3, 'cy', 'silver')")
    pg.execute("INSERT INTO orders (id, customer, amount) VALUES (1, 1, 12.50), (2, 2, 30), (3, 1, 7.25)")

    where = (f"hostname = '{info.host}', "
             f"port = '{info.port}', username = '{info.user}', password = '{info.password or ''}', "
             f"database.name = '{info.dbname}'")
    seen = {}
    db = millpond.connect(root, spark=spark, interval=None)
    try:
        db.sql(f"""
            CREATE TABLE customers (id INT, name TEXT, tier TEXT, PRIMARY KEY (id))
              WITH (connector = 'postgres-cdc', {where}, table.name = 'customers');
            CREATE TABLE orders (id BIGINT, customer INT, amount DECIMAL(10, 2), PRIMARY KEY (id))
              WITH (connector = 'postgres-cdc', {where}, table.name = 'orders');
            CREATE MATERIALIZED VIEW by_tier AS
              SELECT c.tier, count(*) AS orders, sum(o.amount) AS total
              FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.tier;
        """)
        db.flush()  # the snapshot
        seen["first"] = db.sql("SELECT * FROM by_tier ORDER BY tier")
        show("after the snapshot:", seen["first"])

        with pg.transaction():  # one transaction: a new order, bob promoted, cy's order moved to ada
            pg.execute("INSERT INTO orders (id, customer, amount) VALUES (4, 3, 5), (5, 2, 10)")
            pg.execute("UPDATE customers SET tier = 'gold' WHERE name = 'bob'")
            pg.execute("UPDATE orders SET customer = 1 WHERE customer = 3")
        pg.execute("DELETE FROM customers WHERE id = 3")
        db.flush()
        seen["after"] = db.sql("SELECT * FROM by_tier ORDER BY tier")
        show("after one transaction and a delete:", seen["after"])

        seen["sources"] = db.sql("SELECT table_name, split, rows, lag FROM millpond_sources ORDER BY table_name")
        show("SHOW SOURCES:", seen["sources"])
        db.sql("DROP MATERIALIZED VIEW by_tier; DROP TABLE orders; DROP TABLE customers")  # and their slots
    finally:
        db.close()
        pg.close()
    return seen


if __name__ == "__main__":
    root = tempfile.mkdtemp(prefix="millpond-pg-")
    try:
        run(sys.argv[1] if len(sys.argv) > 1 else "host=localhost port=5432 user=postgres dbname=postgres", root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
