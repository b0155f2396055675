"""A PostgreSQL table a sink keeps (``CREATE SINK s FROM v WITH (connector = 'postgres',
type = 'upsert' | 'append-only', hostname = '...', port = '5432', username = '...', password = '...',
database.name = '...', schema.name = 'public', table.name = '...')``), a
:class:`millpond.engine.sink_targets.Target`.

- The table is made by the first write (``CREATE TABLE``: the view's columns in PostgreSQL's
  types; an upsert sink's key unique, NULLs equal, from PostgreSQL 15 on) unless it is there, empty.
- **Each write is one PostgreSQL transaction**: the rows copied in (``COPY ... FROM STDIN``, CSV
  written by Arrow) — an upsert's into a temporary table, then the changed keys deleted from the
  table and the new rows inserted — and the sink's epoch recorded in ``millpond_sinks`` (token,
  epoch) of the same schema. Exactly once: the epoch commits with the rows, and a restart reads it
  back (:meth:`PostgresTarget.written`) and writes only the epochs after it.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from millpond import jsonb
from millpond.connectors.postgres_cdc import _connect, _quote, _where
from millpond.engine.sink_targets import OP, UPSERT
from millpond.errors import SqlError
from millpond.work import current_work

__all__ = ["OPTIONS", "PostgresTarget", "check_options"]

OPTIONS = ("hostname", "port", "username", "password", "database.name", "schema.name", "table.name", "ssl.mode")
EPOCHS = "millpond_sinks"  # (token, epoch): the last epoch each sink's rows hold
COPY_ROWS = 100_000  # rows of a write per piece of its COPY


def check_options(name: str, options: dict[str, str], sql: str) -> str:
    """A PostgreSQL sink's options checked (defaults filled in); where its table is."""
    unknown = sorted(k for k in options if k not in OPTIONS)
    if unknown:
        raise SqlError(f"CREATE SINK {name}: unknown option {unknown[0]!r} for connector 'postgres' (known: "
                       f"connector, type, {', '.join(OPTIONS)})", sql=sql)
    for need in ("hostname", "username", "database.name", "table.name"):
        if not options.get(need):
            raise SqlError(f"CREATE SINK {name}: connector 'postgres' needs {need} = '...'", sql=sql)
    options.setdefault("port", "5432")
    options.setdefault("schema.name", "public")
    return f"PostgreSQL table {_where(options)}"


def _pg_type(t: pa.DataType) -> str:
    if jsonb.is_jsonb(t):
        return "jsonb"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    found = {pa.bool_(): "boolean", pa.int8(): "smallint", pa.int16(): "smallint", pa.int32(): "integer",
             pa.int64(): "bigint", pa.float32(): "real", pa.float64(): "double precision", pa.string(): "text",
             pa.large_string(): "text", pa.date32(): "date", pa.time64("us"): "time"}.get(t)
    if found is None:
        raise SqlError(f"a column of type {t} cannot be written to PostgreSQL by a sink yet")
    return found


def _csv(rows: pa.Table) -> bytes:
    """``rows`` as CSV that ``COPY ... (FORMAT csv)`` reads back (no header): NULL unquoted and empty,
    an empty string quoted (Arrow quotes every string), JSONB as its text."""
    cols = []
    for name in rows.column_names:
        col = rows.column(name)
        if jsonb.is_jsonb(col.type):
            col = pc.struct_field(col.combine_chunks(), [0])
        cols.append(col)
    out = io.BytesIO()
    pacsv.write_csv(pa.table(cols, names=rows.column_names), out,
                    write_options=pacsv.WriteOptions(quoting_style="needed", include_header=False))
    return out.getvalue()


class PostgresTarget:
    """One PostgreSQL table, written one transaction per write."""

    def __init__(self, options: dict[str, str]):
        self.options = {"port": "5432", "schema.name": "public", **options}
        self.table = f"{_quote(self.options['schema.name'])}.{_quote(self.options['table.name'])}"
        self.epochs = f"{_quote(self.options['schema.name'])}.{EPOCHS}"
        self._conn = None

    def _db(self):  # noqa: ANN202
        if self._conn is None or self._conn.closed:
            self._conn = _connect(self.options)
        return self._conn

    def forget(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _exists(self, conn, table: str) -> bool:  # noqa: ANN001
        return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]

    def rows(self) -> int | None:
        conn = self._db()
        if not self._exists(conn, self.table):
            return None
        held = conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0]
        return held or None  # an empty table is taken as the sink's own

    def written(self, token: str) -> int | None:
        conn = self._db()
        if not self._exists(conn, self.epochs):
            return None
        found = conn.execute(f"SELECT epoch FROM {self.epochs} WHERE token = %s", (token,)).fetchone()
        return None if found is None else found[0]

    def _prepare(self, conn, schema: pa.Schema, key: tuple[str, ...]) -> None:  # noqa: ANN001
        """The table (an upsert's: without ``_op``, keyed) and the epochs' table, made when missing."""
        columns = ", ".join(f"{_quote(f.name)} {_pg_type(f.type)}" for f in schema if not (key and f.name == OP))
        # a view's key may be NULL (a group of NULLs): unique with NULLs equal (PostgreSQL 15 on), not a primary key
        unique = key and conn.info.server_version >= 150000
        primary = f", UNIQUE NULLS NOT DISTINCT ({', '.join(map(_quote, key))})" if unique else ""
        conn.execute(f"CREATE TABLE IF NOT EXISTS {self.table} ({columns}{primary})")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {self.epochs} (token text PRIMARY KEY, epoch bigint NOT NULL)")

    def _copy(self, conn, table: str, rows: pa.Table) -> None:  # noqa: ANN001
        """``rows`` into ``table``, :data:`COPY_ROWS` at a time into one ``COPY`` (the write's progress)."""
        names = ", ".join(map(_quote, rows.column_names))
        work = current_work()
        with conn.cursor().copy(f"COPY {table} ({names}) FROM STDIN WITH (FORMAT csv)") as copy:
            for start in range(0, rows.num_rows, COPY_ROWS):
                part = rows.slice(start, COPY_ROWS)
                copy.write(_csv(part))
                work.did(part.num_rows)

    def _record(self, conn, token: str, epoch: int) -> None:  # noqa: ANN001
        conn.execute(f"INSERT INTO {self.epochs} VALUES (%s, %s) ON CONFLICT (token) DO UPDATE SET epoch = "
                     "EXCLUDED.epoch", (token, epoch))

    def append(self, rows: pa.Table, token: str, epoch: int) -> None:
        conn = self._db()
        with conn.transaction():
            self._prepare(conn, rows.schema, ())
            if rows.num_rows:
                self._copy(conn, self.table, rows)
            self._record(conn, token, epoch)

    def upsert(self, rows: pa.Table, key: tuple[str, ...], token: str, epoch: int) -> None:
        conn = self._db()
        with conn.transaction():
            self._prepare(conn, rows.schema, key)
            if rows.num_rows:
                conn.execute(f"CREATE TEMP TABLE millpond_stage ON COMMIT DROP AS SELECT * FROM {self.table} "
                             "WITH NO DATA")
                conn.execute(f"ALTER TABLE millpond_stage ADD COLUMN {OP} text")
                self._copy(conn, "millpond_stage", rows)
                match = " AND ".join(f"t.{_quote(k)} IS NOT DISTINCT FROM s.{_quote(k)}" for k in key)
                conn.execute(f"DELETE FROM {self.table} t USING millpond_stage s WHERE {match}")
                cols = ", ".join(_quote(c) for c in rows.column_names if c != OP)
                conn.execute(f"INSERT INTO {self.table} ({cols}) SELECT {cols} FROM millpond_stage WHERE {OP} = %s",
                             (UPSERT,))
            self._record(conn, token, epoch)

    def compact(self) -> None:
        pass  # PostgreSQL's autovacuum keeps the table

    def files(self) -> int:
        return 0
