"""A seeded random workload on the shopping tables, shared by the oracle and crash tests.

The same statements run on millpond and on a DuckDB database that keeps its own copy of the
base tables; DuckDB then recomputes every view's SQL as the oracle.
"""

from __future__ import annotations

import os
import random
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Iterator

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from millpond.engine.expressions import to_duckdb
from millpond.engine.numerics import is_quotient
from millpond.serve.display import quotient_texts, texts
from millpond.sql.query import bind_select, tables_read
from millpond.sql.semantics import from_arrow
from millpond.sql.statements import parse
from tests import pg_numeric
# tables read from PostgreSQL and Kafka, and sinks into them, where the chain has a server and a broker
from tests.workload_upstream import (ARRIVALS_VIEW_SQL, KAFKA_SINKS, PG_SINKS, SHIPPED, SHIPPED_VIEW, STREAMED,
                                     STREAMED_VIEW, _kafka_produce, _kafka_rows, _pg_connect, _pg_name, _pg_where,
                                     kafka_server, pg_server)

TABLES = """
CREATE TABLE info  (product VARCHAR PRIMARY KEY, category VARCHAR);
CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT);
"""

# indexes on the join keys: max_by_category and stats read both join sides from them (sql/indexes.py)
INDEXES = {
    "info_product": "CREATE INDEX info_product ON info (product)",
    "visit_product": "CREATE INDEX visit_product ON visit (product)",
}

VIEWS = {
    "max_by_category": """SELECT category, MAX(length) AS max_length
        FROM info JOIN visit ON info.product = visit.product GROUP BY category""",
    # a view over a view: it reads max_by_category's changes (a second job in each epoch)
    "category_levels": """SELECT max_length, COUNT(*) AS categories FROM max_by_category GROUP BY max_length""",
    "stats": """SELECT i.category, COUNT(*) AS n, SUM(v.length) AS total, MIN(v.length) AS lo,
               COUNT(v."user") AS users, AVG(v.length) AS avg_len
        FROM info i JOIN visit v ON i.product = v.product
        WHERE v.length IS NULL OR v.length > 5
        GROUP BY i.category HAVING COUNT(*) > 1""",
    "thirds": """SELECT product, length * 2 AS doubled FROM visit WHERE length % 3 = 0""",
    "per_user": """SELECT "user", COUNT(*) AS n, MAX(length) AS longest, SUM(length) AS total
        FROM visit GROUP BY "user" """,
    "self_join": """SELECT a.product, b."user" AS other, COUNT(*) AS pairs
        FROM visit a JOIN visit b ON a.product = b.product AND a."user" <> b."user"
        GROUP BY a.product, b."user" """,
    # exact percentiles over each group's kept values: a delete or update moves them exactly
    "quantiles": """SELECT "user", percentile_cont(0.5) WITHIN GROUP (ORDER BY length) AS median,
               percentile_disc(0.25) WITHIN GROUP (ORDER BY length DESC) AS upper_quartile, COUNT(*) AS n
        FROM visit GROUP BY "user" """,
}

READ_BY_VIEWS = ["max_by_category"]

# partial view -> (its SELECT, its key, its max_keys): read by key (engine/partial.py); fewer keys
# than the categories, so reads fill and evict
PARTIAL = {
    "partial_by_category": ("""SELECT i.category, COUNT(*) AS n, MAX(v.length) AS longest
        FROM info i JOIN visit v ON i.product = v.product GROUP BY i.category""", "category", 2),
}
PARTIAL_READS = ["category = 'c0'", "category IN ('c1', 'c2')", "category = 'c2'", "category IN ('c0', 'c1', 'c2')"]

# flow -> (its sink, its SELECT): the sink is checked against the SELECT over the oracle's tables;
# its window (a visit's length as minutes after a start, 10-minute slots; NULL for a NULL length)
# keeps its state in window order
FLOWS = {
    "visits_per_product": ("product_visits", """SELECT product,
        date_bin(INTERVAL '10 minutes', TIMESTAMP '2026-01-01 00:00:00' + length * INTERVAL '1 minute') AS slot,
        COUNT(*) AS n, SUM(length) AS total, MAX(length) AS longest FROM visit GROUP BY product, slot"""),
}

# sink -> (its source, its type): Delta Lake tables beside the root (``<root>.sinks/<name>``), checked
# against the source's query over the oracle's tables (an append-only sink replayed) after a FLUSH
SINKS = {
    "per_user_out": ("per_user", "upsert"),
    "thirds_log": ("thirds", "append-only"),
}

# a table read from a folder of parquet files beside the root (``<root>.files``, connectors/files.py):
# the crash chains' "file" steps drop files into it (written aside, then renamed in: a producer's
# atomic write); it and a view over it are checked against the oracle's copy of every file's rows
ARRIVALS = "CREATE TABLE arrivals (product VARCHAR, n INT)"
ARRIVALS_VIEW = ("arrived", ARRIVALS_VIEW_SQL)


def files_statement(root: str) -> str:
    return f"{ARRIVALS} WITH (connector = 'files', path = '{files_folder(root)}', format = 'parquet')"


def files_folder(root: str) -> str:
    return f"{root.rstrip('/')}.files"


# a table read from a Delta Lake table beside the root (``<root>.delta``, connectors/delta.py): the
# crash chains' "file" steps append the same rows to it as a new version (written whole before the
# worker's next millpond call: a kill never lands between the file and the version)
DELIVERED_VIEW = ("delivered_per_product", ARRIVALS_VIEW[1].replace("arrivals", "delivered"))


def delta_statement(root: str) -> str:
    return f"CREATE TABLE delivered WITH (connector = 'deltalake', location = '{delta_location(root)}')"


def delta_location(root: str) -> str:
    return f"{root.rstrip('/')}.delta"


def ensure_delta(root: str) -> None:
    """The Delta table the ``delivered`` table reads, empty, unless it is there already."""
    from deltalake import write_deltalake

    if not os.path.exists(f"{delta_location(root)}/_delta_log"):
        write_deltalake(delta_location(root), pa.table({"product": pa.array([], pa.string()),
                                                        "n": pa.array([], pa.int32())}))


PRODUCTS = [f"p{i}" for i in range(8)]
USERS = [f"u{i}" for i in range(5)] + [None]
CATEGORIES = ["c0", "c1", "c2", None]
VISIT_SCHEMA = pa.schema([("product", pa.string()), ("user", pa.string()), ("length", pa.int32())])


@dataclass(frozen=True)
class Step:
    kind: str  # "insert" (bulk visits), "upsert" (INSERT on info), "sql" (UPDATE/DELETE) or "file" (arrivals)
    payload: object


# ALTER TABLE ... ADD COLUMN steps at fixed places of a plan (``steps(..., alter=True)``): the key-less
# table's column, then the keyed one's, each followed by a statement that writes it
ALTERS = {
    4: [Step("sql", "ALTER TABLE visit ADD COLUMN IF NOT EXISTS note VARCHAR DEFAULT 'n'"),
        Step("sql", "UPDATE visit SET note = 'long' WHERE length > 80")],
    9: [Step("sql", "ALTER TABLE info ADD COLUMN IF NOT EXISTS tier INT DEFAULT 1"),
        Step("sql", "UPDATE info SET tier = 2 WHERE category = 'c1'")],
}


def steps(seed: int, count: int, *, files: bool = False, alter: bool = False) -> list[Step]:
    """``count`` steps drawn from ``seed``; with ``files``, about one in six drops a parquet file into
    the arrivals folder instead (drawn apart: the other steps are the same with or without); with
    ``alter``, the :data:`ALTERS` steps at their places (a plan's prefix is a shorter plan)."""
    rng, frng = random.Random(seed), random.Random(seed * 7919 + 1)
    out: list[Step] = []
    while len(out) < count:
        if alter and len(out) in ALTERS:
            out += ALTERS[len(out)][:count - len(out)]
            continue
        if files and frng.random() < 1 / 6:
            n = frng.randrange(1, 6)
            out.append(Step("file", (frng.getrandbits(64), pa.table({
                "product": [frng.choice(PRODUCTS) for _ in range(n)],
                "n": pa.array([frng.randrange(100) for _ in range(n)], pa.int32())}))))
        else:
            out.append(_step(rng))
    return out


def _step(rng: random.Random) -> Step:
    kind = rng.choice(["visits", "visits", "info", "del_visit", "upd_visit", "upd_info", "del_info"])
    p, u, c = rng.choice(PRODUCTS), rng.choice(USERS[:-1]), rng.choice(CATEGORIES)
    if kind == "visits":
        n = rng.randrange(1, 25)
        return Step("insert", pa.table({
            "product": [rng.choice(PRODUCTS) for _ in range(n)],
            "user": [rng.choice(USERS) for _ in range(n)],
            "length": [None if rng.random() < 0.08 else rng.randrange(100) for _ in range(n)],
        }, schema=VISIT_SCHEMA))
    if kind == "info":
        pairs = {rng.choice(PRODUCTS): rng.choice(CATEGORIES) for _ in range(3)}
        values = ", ".join(f"('{q}', {'NULL' if cat is None else repr(cat)})" for q, cat in pairs.items())
        return Step("upsert", f"INSERT INTO info (product, category) VALUES {values}")
    if kind == "del_visit":
        return Step("sql", f"""DELETE FROM visit WHERE "user" = '{u}' AND length < {rng.randrange(100)}""")
    if kind == "upd_visit":
        return Step("sql", f"UPDATE visit SET length = length + {rng.randrange(1, 9)} WHERE product = '{p}'")
    if kind == "upd_info":
        return Step("sql", f"UPDATE info SET category = {'NULL' if c is None else repr(c)} WHERE product = '{p}'")
    return Step("sql", f"DELETE FROM info WHERE product = '{p}'")


def setup(db) -> None:  # noqa: ANN001
    db.sql(TABLES)
    for sql in INDEXES.values():
        db.sql(sql)
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    for name, sql in partial_views().items():
        db.sql(sql)
    for name, (sink, sql) in FLOWS.items():
        db.sql(f"CREATE FLOW {name} SINK TO {sink} AS {sql}")
    for sql in sink_statements(db.root).values():
        db.sql(sql)


def sink_statements(root: str) -> dict[str, str]:
    """The CREATE statement of each sink, its Delta table under ``<root>.sinks/`` (and, with a
    PostgreSQL server, the PostgreSQL sinks)."""
    out = {name: f"CREATE SINK {name} FROM {src} WITH (connector = 'deltalake', "
                 f"location = '{root.rstrip('/')}.sinks/{name}', type = '{kind}')" for name, (src, kind) in SINKS.items()}
    if pg_server():
        out.update({name: f"CREATE SINK {name} FROM {src} WITH (connector = 'postgres', {_pg_where(root, name)}, "
                          f"type = '{kind}')" for name, (src, kind) in PG_SINKS.items()})
    if kafka_server():
        out.update({name: f"CREATE SINK {name} FROM {src} WITH (connector = 'kafka', topic = '{_pg_name(root, name)}', "
                          f"properties.bootstrap.server = '{kafka_server()}', type = '{kind}') FORMAT UPSERT ENCODE JSON"
                    for name, (src, kind) in KAFKA_SINKS.items()})
    return out


def sink_rows(db, name: str) -> list[tuple]:  # noqa: ANN001
    """A sink's table as its source's rows (an append-only sink's changes replayed)."""
    sink = db.catalog.sinks[name]
    if sink.connector == "kafka":
        return norm(_kafka_rows(sink.option("properties.bootstrap.server"), sink.option("topic")))
    if sink.connector == "postgres":
        options = dict(sink.options)
        with _pg_connect(options) as c:
            cur = c.execute(f"SELECT * FROM {options['table.name']}")
            names = [d.name for d in cur.description]
            return norm(pa.Table.from_pylist([dict(zip(names, r)) for r in cur.fetchall()]) if cur.rowcount else
                        pa.table({n: pa.array([], pa.string()) for n in names}))
    from deltalake import DeltaTable

    table = DeltaTable(sink.option("location")).to_pyarrow_table()
    if SINKS[name][1] == "upsert":
        return norm(table)
    cols = [c for c in table.column_names if c not in ("_op", "_epoch")]
    con = duckdb.connect()
    con.register("c", table)
    sel = ", ".join(f'"{c}"' for c in cols)
    return norm(con.sql(f"SELECT {sel} FROM (SELECT {sel}, sum(CASE WHEN _op = 'insert' THEN 1 ELSE -1 END) AS w "
                        f"FROM c GROUP BY ALL), range(w::BIGINT)").to_arrow_table())


def partial_views() -> dict[str, str]:
    """The CREATE statement of each partial view."""
    return {name: f"CREATE MATERIALIZED VIEW {name} WITH (partial = true, partial_key = '{key}', max_keys = {n}) "
                  f"AS {sql}" for name, (sql, key, n) in PARTIAL.items()}


def read_partial(db, i: int) -> None:  # noqa: ANN001
    """Read the partial views by some of their keys (the ``i``-th read of a cycle): a cold key is
    filled by an epoch, and keys not read for longest are evicted by it."""
    for name in PARTIAL:
        db.sql(f"SELECT * FROM {name} WHERE {PARTIAL_READS[i % len(PARTIAL_READS)]}")


def apply(db, step: Step) -> None:  # noqa: ANN001
    if step.kind == "insert":
        db.insert("visit", step.payload)
    elif step.kind == "file":
        tables = dict(db.catalog.tables)  # read first: an epoch held at a crash point (below) may hold its lock
        with _upstream_step():
            _write_file_step(db.root, step.payload, tables)
    else:
        db.sql(step.payload)


@contextmanager
def _upstream_step():
    """A file step's writes to its upstream systems as one: a crash point reached meanwhile (a
    background epoch, the compaction process) kills after them (``faults``: MILLPOND_CRASH_HOLD)."""
    hold = os.environ.get("MILLPOND_CRASH_HOLD")
    if hold:
        open(hold, "w").close()
    try:
        yield
    finally:
        if hold:
            os.remove(hold)


def _write_file_step(root: str, payload: tuple, tables: dict) -> None:  # noqa: ANN001
    """A file's rows written where the step's tables read them: written aside and renamed into the
    folder (which never holds half a file), and a Delta version, PostgreSQL rows and Kafka messages
    of the same rows where the catalog has those tables."""
    token, rows = payload
    folder, aside = files_folder(root), f"{files_folder(root)}.tmp"
    os.makedirs(folder, exist_ok=True)
    os.makedirs(aside, exist_ok=True)
    pq.write_table(rows, f"{aside}/{token:016x}.parquet")
    os.replace(f"{aside}/{token:016x}.parquet", f"{folder}/{token:016x}.parquet")
    if "delivered" in tables:  # the same rows as a new version of the Delta table
        from deltalake import write_deltalake

        write_deltalake(delta_location(root), rows, mode="append")
    if SHIPPED in tables:  # and upstream in PostgreSQL, once (keyed by token and row)
        options = dict(tables[SHIPPED].source)
        with _pg_connect(options) as c, c.cursor() as cur:
            cur.executemany(f"INSERT INTO {options['table.name']} VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                            [((token % 2**40) * 100_000 + i, r["product"], r["n"])
                             for i, r in enumerate(rows.to_pylist())])
    if STREAMED in tables:  # and to Kafka, keyed likewise (produced again: the same rows)
        options = dict(tables[STREAMED].source)
        _kafka_produce(options["properties.bootstrap.server"], options["topic"],
                       [((token % 2**40) * 100_000 + i, r) for i, r in enumerate(rows.to_pylist())])


class Reference:
    """DuckDB's own copy of the base tables, changed by the same steps."""

    def __init__(self) -> None:
        self.con = duckdb.connect()
        pg_numeric.register(self.con)
        self.con.execute(TABLES)
        self.con.execute(ARRIVALS)
        for name in READ_BY_VIEWS:  # the oracle's view, for the views that read it
            self.con.execute(f"CREATE VIEW {name} AS {self.bound(VIEWS[name])}")

    def apply(self, step: Step) -> None:
        if step.kind in ("insert", "file"):
            rows = step.payload if step.kind == "insert" else step.payload[1]
            self.con.register("incoming", rows)
            self.con.execute(f"INSERT INTO {'visit' if step.kind == 'insert' else 'arrivals'} BY NAME "
                             "SELECT * FROM incoming")  # a column added since takes its default
            self.con.unregister("incoming")
        elif step.kind == "upsert":  # a key's row replaced whole: the columns left out take their DEFAULT
            head, values = step.payload.split(" VALUES ", 1)  # (DuckDB's INSERT OR REPLACE keeps the old ones)
            rows = self.con.sql(f"SELECT * FROM (VALUES {values})").to_arrow_table()
            columns = [c.strip() for c in head[head.index("(") + 1:head.rindex(")")].split(",")] if "(" in head else [
                r[0] for r in self.con.execute("SELECT column_name FROM information_schema.columns WHERE "
                                               "table_name = 'info' ORDER BY ordinal_position").fetchall()]
            self.con.register("upserted", rows.rename_columns(columns[:rows.num_columns]))
            self.con.execute("DELETE FROM info WHERE product IN (SELECT product FROM upserted)")
            self.con.execute(f"INSERT INTO info ({', '.join(columns[:rows.num_columns])}) SELECT * FROM upserted")
            self.con.unregister("upserted")
        else:
            self.con.execute(step.payload)

    def query(self, sql: str, *, postgres: bool = True) -> list[tuple]:
        """The rows of ``sql`` over DuckDB's copy; ``postgres`` (a view's SQL) gives it PostgreSQL's
        meaning as millpond does (integer division, numeric AVG...), else it runs as DuckDB SQL."""
        return norm(self.con.sql(self.bound(sql) if postgres else sql).to_arrow_table())

    def bound(self, sql: str) -> str:
        """``sql`` with PostgreSQL's meaning, as DuckDB SQL."""
        types = {t: {f.name: from_arrow(f.type) for f in self.con.sql(f"SELECT * FROM {t} LIMIT 0").arrow().schema}
                 for t in tables_read(parse(sql)[0])}
        return to_duckdb(bind_select(parse(sql)[0], types))


def epochs(db, ref: Reference, plan: list[Step], start: int, rng: random.Random, *, most: int = 4  # noqa: ANN001
           ) -> Iterator[int]:
    """Apply ``plan[start:]`` to millpond and the oracle, 1..``most`` steps per epoch, flushing after
    each batch; yields the number of steps applied after each epoch (to check the views there)."""
    i = start
    while i < len(plan):
        for step in plan[i:i + rng.randrange(1, most + 1)]:
            apply(db, step)
            ref.apply(step)
            i += 1
        db.flush()
        yield i


class PgNumeric(Decimal):
    """A numeric as PostgreSQL prints it: equal to another only with the same text (digits after the
    point included: ``1.5000000000000000`` is not ``1.50000000000000000000``), to an integer by value
    (DuckDB's own SUM of integers is a decimal)."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PgNumeric):
            return format(self, "f") == format(other, "f")
        return Decimal.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = Decimal.__hash__

    def __repr__(self) -> str:
        return format(self, "f")


def norm(table: pa.Table) -> list[tuple]:
    """Rows as a sorted multiset, floats rounded (AVG of doubles may differ in the last bits),
    numerics as PostgreSQL prints them (:class:`PgNumeric`; a quotient to its own display scale:
    ``AVG`` of integers)."""
    columns = []
    for f, c in zip(table.schema, table.columns):
        if pa.types.is_decimal(f.type):
            columns.append([None if t is None else PgNumeric(t) for t in texts(f, c)])
        elif is_quotient(f.type):
            columns.append([None if t is None else PgNumeric(t) for t in quotient_texts(c).to_pylist()])
        else:
            columns.append([round(v, 6) if isinstance(v, float) else v for v in c.to_pylist()])
    return sorted(zip(*columns), key=lambda r: tuple((v is not None, v) for v in r)) if columns else []


def folded(db, name: str) -> pa.Table:  # noqa: ANN001
    """The rows that every change of ``name`` kept since epoch 0 add up to (a subscriber's view of
    it); no row was deleted more often than inserted."""
    added, removed = changes_since(db, name, 0)
    assert removed.num_rows == 0, f"{name}: rows deleted more often than inserted"
    return added


def changes_since(db, name: str, after: int) -> tuple[pa.Table, pa.Table]:  # noqa: ANN001
    """The rows that every change of ``name`` kept after epoch ``after`` add and remove, netted (a
    subscriber's view of it), after checking each epoch came once, in order."""
    parts = list(db.subscribe(name, after, timeout=0))
    epochs = [p["_epoch"][0].as_py() for p in parts]
    assert epochs == sorted(set(epochs)), f"{name}: epochs out of order or repeated: {epochs}"
    assert all(len(set(p["_epoch"].to_pylist())) == 1 for p in parts), f"{name}: a changelog spans epochs"
    if not parts:
        empty = db.read(name).slice(0, 0)
        return empty, empty
    df = pl.from_arrow(pa.concat_tables(parts).drop_columns(["_epoch"]))
    net = df.group_by([c for c in df.columns if c != "_w"]).agg(pl.col("_w").sum()).filter(pl.col("_w") != 0)

    def copies(rows: pl.DataFrame, w: np.ndarray) -> pa.Table:
        return rows.drop("_w").to_arrow().take(pa.array(np.repeat(np.arange(rows.height), w)))
    added, removed = net.filter(pl.col("_w") > 0), net.filter(pl.col("_w") < 0)
    return copies(added, added["_w"].to_numpy()), copies(removed, -removed["_w"].to_numpy())


def _changes_agree(db, name: str, sql: str, ref: Reference, base: tuple[int, Reference]) -> bool:  # noqa: ANN001
    """The view's rows at the base epoch (the oracle's after the steps done then), plus the rows
    its kept changes since add, equal the oracle's rows now plus the rows they remove."""
    after, then = base
    added, removed = changes_since(db, name, after)
    if after == 0:
        assert removed.num_rows == 0, f"{name}: rows deleted more often than inserted"
    key = lambda r: tuple((v is not None, v) for v in r)  # noqa: E731
    return sorted(then.query(sql) + norm(added), key=key) == sorted(ref.query(sql) + norm(removed), key=key)


def _seen(db, text: str) -> list[tuple]:  # noqa: ANN001
    """``text``'s rows as :func:`norm` gives them; a view the root has not populated yet (killed before
    its first epoch committed: PostgreSQL's 55000) has none."""
    from millpond.errors import MillpondError

    try:
        return norm(db.sql(text))
    except MillpondError as exc:
        if exc.sqlstate != "55000":
            raise
        return []


def mismatches(db, ref: Reference, *, sinks: bool = True,  # noqa: ANN001
               base: tuple[int, Reference] | None = (0, None)) -> list[str]:
    """Names of base tables, views and flows' sinks where millpond and the oracle disagree (a sink
    takes its flow's changes an epoch later: ``sinks=False`` skips them where no FLUSH ran, and the
    partial views too: reading one runs an epoch when a key is cold). The views' kept changes are
    checked from ``base``: an epoch and the oracle then (default: epoch 0, nothing; None: not checked,
    no epoch whose steps are known is kept)."""
    bad = [t for t in ("info", "visit") if _seen(db, (f"SELECT * FROM {t}")) != ref.query(f"SELECT * FROM {t}")]
    if "arrivals" in db.catalog.tables:  # the crash chains' files table
        bad += [t for t, sql in (("arrivals", "SELECT * FROM arrivals"), ARRIVALS_VIEW)
                if _seen(db, (f"SELECT * FROM {t}")) != ref.query(sql)]
    if "delivered" in db.catalog.tables:  # the crash chains' Delta table: the same rows as arrivals
        bad += [t for t, sql in (("delivered", "SELECT * FROM arrivals"), (DELIVERED_VIEW[0], ARRIVALS_VIEW[1]))
                if _seen(db, (f"SELECT * FROM {t}")) != ref.query(sql)]
    for table, view in ((SHIPPED, SHIPPED_VIEW), (STREAMED, STREAMED_VIEW)):  # PostgreSQL's, Kafka's: as arrivals
        if table in db.catalog.tables:
            bad += [t for t, mine, sql in ((table, f"SELECT product, n FROM {table}", "SELECT * FROM arrivals"),
                                          (view[0], f"SELECT * FROM {view[0]}", ARRIVALS_VIEW[1]))
                    if _seen(db, (mine)) != ref.query(sql)]
    bad += [v for v, sql in VIEWS.items() if _seen(db, (f"SELECT * FROM {v}")) != ref.query(sql)]
    if base is not None:
        base = (0, Reference()) if base[0] == 0 else base
        bad += [f"changes of {v}" for v, sql in VIEWS.items() if not _changes_agree(db, v, sql, ref, base)]
    where = PARTIAL_READS[-1]  # every key but NULL (a key read fills it first, by an epoch)
    bad += [v for v, (sql, _, _) in PARTIAL.items() if sinks and _seen(db, (f"SELECT * FROM {v} WHERE {where}")) != ref.query(f"SELECT * FROM ({sql}) q WHERE {where}")]
    if sinks:
        bad += [s for s, sql in FLOWS.values() if _seen(db, (f"SELECT * FROM {s}")) != ref.query(sql)]
        bad += [f"sink {k}" for k, (src, _) in {**SINKS, **PG_SINKS, **KAFKA_SINKS}.items() if k in db.catalog.sinks and
                sink_rows(db, k) != ref.query(VIEWS[src])]
    return bad
