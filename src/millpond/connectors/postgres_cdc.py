"""PostgreSQL tables as source tables: a snapshot, then their changes by logical replication.

``CREATE TABLE t (..., PRIMARY KEY (...)) WITH (connector = 'postgres-cdc', hostname = '...',
port = '5432', username = '...', password = '...', database.name = '...', schema.name = 'public',
table.name = '...'[, slot.name = '...', publication.name = '...', ssl.mode = '...'])``:

- **At CREATE** the upstream table is looked up: each column given must be one of its columns, of
  the same type (:func:`millpond.connectors.pgoutput.arrow_type`), and the key must be its primary
  key; the server must have ``wal_level = logical`` and the user the ``REPLICATION`` attribute. A
  publication of the table is made when none is named (``millpond_<table>_<random>``), and a slot
  name is fixed (the same).
- **The first epoch** makes the replication slot (``pgoutput``) with an exported snapshot and
  copies the table as of that snapshot (``COPY ... TO STDOUT``, parsed by Arrow's CSV reader) in
  one append: the snapshot and the slot's stream meet exactly, nothing lost or doubled. A restart
  before that append is recorded makes the slot again (the snapshot cannot be reopened).
- **Each later epoch** fixes one WAL position per server (what it had written just before, at
  most ``WAL_STEP`` past its slowest slot) and peeks at each slot's transactions that commit before
  it (``pg_logical_slot_peek_binary_changes``: whole transactions), keeps each key's last change,
  and appends them as upserts and deletes in one append per table: a PostgreSQL transaction is
  never split across epochs, nor across the tables it wrote. A table with nothing to take (and
  nothing appended that awaits a commit) moves its slot to that position at once: an idle table
  on a busy server does not keep the server's WAL.
- **Exactly once**: the table's log producer is ``pg:t<id>``; its sequence is 1 for the snapshot,
  then the end LSN of the last transaction taken (a WAL position: above 1 always). A restart
  skips the transactions at or before it. The slot's confirmed position is advanced only once
  the epoch that took them has committed (:meth:`PostgresCdc.committed`), so PostgreSQL keeps
  every change millpond has not committed, whatever stops which.
- **What stops a table** (a ``stopped`` source error; the other tables go on): an upstream
  ``ALTER TABLE`` that drops or retypes one of its columns, a ``TRUNCATE``, an update whose
  unchanged large value the stream leaves out (``REPLICA IDENTITY FULL`` sends it), a slot that is
  gone. An unreachable server is tried again before every epoch.
- ``DROP TABLE`` drops the slot (a slot keeps the server's WAL); the publication stays.

Why copied into the log (and read by the driver): a slot's changes cannot be read again once it
advances, and an update needs the key's previous row, which the table's log has.
"""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv

from millpond import faults
from millpond.catalog import Column, TableDef
from millpond.catalog.types import arrow_type as column_type
from millpond.connectors import records
from millpond.connectors.pgoutput import Relation, Unfollowable, arrow_type, decode, typed
from millpond.connectors.source_errors import SourceErrors, text
from millpond.engine.ingest import conform_rows
from millpond.errors import SqlError
from millpond.jsonb import is_jsonb
from millpond.store.objects import ObjectStore
from millpond.work import current_work

if TYPE_CHECKING:
    from millpond.log import Channel

__all__ = ["PostgresCdc", "check_source", "dropped"]

log = logging.getLogger("millpond")

KNOWN = ("connector", "hostname", "port", "username", "password", "database.name", "schema.name", "table.name",
         "slot.name", "publication.name", "ssl.mode")
WAL_STEP = 64 << 20  # the most WAL an epoch reads past a server's slowest slot (bytes)
SNAPSHOT = "pg-snapshot"  # the record of a table's snapshot
PROGRESS_BYTES = 1 << 20  # a snapshot counts its lines (its progress) a megabyte at a time


def _conninfo(options: dict[str, str], **more) -> dict:
    return {"host": options["hostname"], "port": int(options.get("port", "5432")), "user": options["username"],
            "password": options.get("password", ""), "dbname": options["database.name"],
            "sslmode": options.get("ssl.mode", "prefer"), "connect_timeout": 10, "application_name": "millpond",
            # values as pgoutput and COPY print them, the same whatever the server's defaults
            "options": "-c TimeZone=UTC -c DateStyle=ISO -c bytea_output=hex -c extra_float_digits=3", **more}


def _connect(options: dict[str, str], autocommit: bool = True, **more):
    import psycopg

    return psycopg.connect(**_conninfo(options, **more), autocommit=autocommit)


def _where(options: dict[str, str]) -> str:
    return (f"{options.get('schema.name', 'public')}.{options['table.name']} on "
            f"{options['hostname']}:{options.get('port', '5432')}/{options['database.name']}")


def _upstream(conn, options: dict[str, str]) -> tuple[list[tuple[str, int, int]], list[str]]:
    """The upstream table's columns (name, type oid, typmod) and its primary key."""
    rel = f"{_quote(options.get('schema.name', 'public'))}.{_quote(options['table.name'])}"
    found = conn.execute("SELECT to_regclass(%s)::oid", (rel,)).fetchone()[0]
    if found is None:
        raise SqlError(f"there is no table {_where(options)}")
    cols = conn.execute("SELECT attname, atttypid::int, atttypmod FROM pg_attribute WHERE attrelid = %s AND "
                        "attnum > 0 AND NOT attisdropped ORDER BY attnum", (found,)).fetchall()
    key = [r[0] for r in conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = %s AND i.indisprimary", (found,)).fetchall()]
    return [tuple(c) for c in cols], key


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _same(oid: int, typmod: int, c: Column) -> bool:
    theirs, ours = arrow_type(oid, typmod), column_type(c.type)
    return is_jsonb(ours) if theirs == "jsonb" else theirs == ours


def check_source(table: str, options: dict[str, str], columns: list[Column], key: list[str]
                 ) -> tuple[dict[str, str], list[Column]]:
    """A PostgreSQL CDC table's options checked against the server and the upstream table (a
    SqlError names what is wrong); its publication made when none is named."""
    where = f"table {table!r}"
    unknown = sorted(k for k in options if k not in KNOWN)
    if unknown:
        raise SqlError(f"{where}: unknown option {unknown[0]!r} for connector 'postgres-cdc' (known: "
                       f"{', '.join(KNOWN[1:])})")
    for need in ("hostname", "username", "database.name", "table.name"):
        if not options.get(need):
            raise SqlError(f"{where}: connector 'postgres-cdc' needs {need} = '...'")
    if not key:
        raise SqlError(f"{where}: connector 'postgres-cdc' needs a PRIMARY KEY, the upstream table's (a change "
                       "names its row by it)")
    name = re.sub(r"[^a-z0-9_]", "_", f"millpond_{table.lower()}")[:50] + "_" + secrets.token_hex(4)
    options = {"port": "5432", "schema.name": "public", "slot.name": name, **options}
    try:
        conn = _connect(options)
    except Exception as exc:  # noqa: BLE001 - the driver's error, with where
        raise SqlError(f"{where}: cannot connect to PostgreSQL at {_where(options)}: {text(exc)}") from None
    with conn:
        level = conn.execute("SHOW wal_level").fetchone()[0]
        if level != "logical":
            raise SqlError(f"{where}: the server at {options['hostname']}:{options['port']} has wal_level = {level}; "
                           "logical replication needs wal_level = logical (postgresql.conf, then a restart)")
        if not conn.execute("SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]:
            raise SqlError(f"{where}: user {options['username']!r} may not replicate: ALTER ROLE ... REPLICATION")
        upstream, upstream_key = _upstream(conn, options)
        found = {c[0]: c for c in upstream}
        for c in columns:
            if c.name not in found:
                raise SqlError(f"{where}: column {c.name!r} is not a column of {_where(options)} (its columns: "
                               f"{', '.join(found)})")
            _, oid, mod = found[c.name]
            if not _same(oid, mod, c):
                theirs = conn.execute("SELECT format_type(%s, %s)", (oid, mod)).fetchone()[0]
                raise SqlError(f"{where}: column {c.name!r} is {c.type} here but {theirs} upstream in {_where(options)}")
        if sorted(key) != sorted(upstream_key):
            raise SqlError(f"{where}: the primary key ({', '.join(key)}) must be the upstream table's "
                           f"({', '.join(upstream_key) or 'it has none'})")
        _publication(conn, where, options, name)
    return options, columns


def _publication(conn, where: str, options: dict[str, str], name: str) -> None:
    schema, table = options["schema.name"], options["table.name"]
    if "publication.name" not in options:
        options["publication.name"] = name
        conn.execute(f"CREATE PUBLICATION {_quote(name)} FOR TABLE {_quote(schema)}.{_quote(table)}")
        return
    if not conn.execute("SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND "
                        "tablename = %s", (options["publication.name"], schema, table)).fetchone():
        raise SqlError(f"{where}: publication {options['publication.name']!r} does not publish {schema}.{table}")


def dropped(t: TableDef) -> None:
    """A dropped table's slot dropped (else the server keeps its WAL for ever); a failure is said."""
    options = dict(t.source)
    try:
        with _connect(options) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                         (options["slot.name"],))
    except Exception as exc:  # noqa: BLE001 - the table is dropped whatever the server says
        log.warning("table %s is dropped, but its replication slot %r on %s could not be: drop it by hand "
                    "(SELECT pg_drop_replication_slot(%r)): %s", t.name, options["slot.name"], _where(options),
                    options["slot.name"], text(exc))


def _lines(body: io.BytesIO, start: int, stop: int) -> int:
    """The line ends in bytes ``start`` to ``stop`` of ``body``, counted in place."""
    with body.getbuffer() as view:
        return int(np.count_nonzero(np.frombuffer(view[start:stop], np.uint8) == 10))


def _estimate(conn, source: str) -> int:  # noqa: ANN001
    """The rows of table ``source`` as PostgreSQL's planner estimates them (from its statistics, or
    its pages where never analyzed): no scan."""
    plan = conn.execute(f"EXPLAIN (FORMAT JSON) SELECT * FROM {source}").fetchone()[0]
    return int((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]["Plan Rows"])


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class _Table:
    """One table's connection and where its stream is."""

    def __init__(self, conn, slot: str):
        self.conn, self.slot = conn, slot
        self.relations: dict[int, Relation] = {}
        self.applied = -1  # the log's last sequence of this table
        self.advance = 0  # where the slot may move once the epoch commits
        self.advanced = 0
        self.in_flight = False  # rows appended that no committed epoch has read yet
        self.rows, self.at = 0, time.monotonic()
        self.status: dict = {}


class PostgresCdc:
    """The PostgreSQL CDC tables of one writable runtime (step 0; ports as the other connectors')."""

    def __init__(self, store: ObjectStore, channel: Callable[[TableDef], Channel], insert: Callable, apply: Callable,
                 errors: SourceErrors):
        self.store, self.channel, self.insert, self.apply, self.errors = store, channel, insert, apply, errors
        self._tables: dict[int, _Table] = {}
        self._stopped: dict[int, str] = {}

    def ingest(self, tables: list[TableDef], epoch: int) -> None:
        """Each server's tables read to one WAL position, fixed once for them all: a transaction
        over several of its tables comes into all of them in the same epoch."""
        for gone in set(self._tables) - {t.id for t in tables}:
            self._close(gone)
        servers: dict[tuple, list[TableDef]] = {}
        for t in tables:
            if t.id not in self._stopped:
                o = dict(t.source)
                servers.setdefault((o["hostname"], o.get("port", "5432"), o["database.name"]), []).append(t)
        for group in servers.values():
            ready = [t for t in group if self._guard(t, epoch, self._open)]
            if not ready:
                continue
            at = {}
            try:  # the server's WAL position, and the step's end: at most WAL_STEP past the slowest slot
                current = int(self._tables[ready[0].id].conn.execute(
                    "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])
                floor = min(self._tables[t.id].advance for t in ready)
                at = {"current": current, "end": min(current, floor + WAL_STEP) if floor else current}
            except Exception:  # noqa: BLE001 - said by each table below
                at = {}
            for t in ready:
                self._guard(t, epoch, lambda t: self._take(t, at, epoch))

    def _guard(self, t: TableDef, epoch: int, work: Callable[[TableDef], None]) -> bool:
        """``work`` on ``t``; its failure is ``t``'s source error (stopped, or tried again before
        the next epoch), and the other tables go on. True when it worked."""
        now = datetime.now(timezone.utc)
        where = _where(dict(t.source))
        try:
            work(t)
        except Unfollowable as exc:
            self._close(t.id)
            self._stopped[t.id] = str(exc)
            self.errors.seen(t.id, "stopped", where, str(exc), epoch=epoch, now=now)
            log.warning("table %s stopped: %s", t.name, exc)
        except Exception as exc:  # noqa: BLE001 - one table's source must not stop the epoch
            self._close(t.id)  # connected anew next time
            if self.errors.seen(t.id, "upstream", where, text(exc), epoch=epoch, now=now):
                log.warning("table %s: reading %s failed (tried again before every epoch): %s", t.name, where, text(exc))
            return False
        else:
            if self.errors.clear(t.id, "upstream"):
                log.info("table %s: reading %s works again", t.name, where)
            return t.id not in self._stopped
        return False

    def _open(self, t: TableDef) -> None:
        """``t``'s connection, and its slot: made with the snapshot the first time."""
        if t.id in self._tables:
            return
        options = dict(t.source)
        slot = options["slot.name"]
        state = _Table(_connect(options), slot)
        try:
            state.applied = self.channel(t).producer_seq(f"pg:t{t.id}")
            if records.read(self.store, t.id, SNAPSHOT) is None:
                if state.applied < 1:  # no snapshot in the log: the slot (if any) is made again
                    self._snapshot(t, state)
                records.fix(self.store, t.id, SNAPSHOT, {"slot": slot})
            found = state.conn.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE "
                                       "slot_name = %s", (slot,)).fetchone()
            if not found:
                raise Unfollowable(f"replication slot {slot!r} is gone from {_where(options)}: create the table again")
            state.advance = state.advanced = int(found[0] or 0)
        except BaseException:
            state.conn.close()
            raise
        self._tables[t.id] = state

    def _take(self, t: TableDef, at: dict, epoch: int) -> None:
        """The slot's transactions that commit before ``at["end"]``, as one append."""
        if not at:
            raise RuntimeError("the server's WAL position could not be read")
        options, state = dict(t.source), self._tables[t.id]
        slot, publication, end = options["slot.name"], options["publication.name"], at["end"]
        messages = [bytes(r[0]) for r in state.conn.cursor(binary=True).execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, 'proto_version', '1', "
            "'publication_names', %s)", (slot, lsn_text(end), _quote(publication)))]
        columns, key = [c.name for c in t.columns], list(t.primary_key)
        change, last, stop = decode(messages, state.relations, columns, key, max(state.applied, 0),
                                    lambda rel: self._check(t, rel))
        rows = len(change.row_at) + len(change.delete_at)
        if rows:
            upserts, deletes = self._last_per_key(t, change)
            faults.point("pg.before_append")
            self.apply(t, upserts, deletes, (f"pg:t{t.id}", last))
            faults.point("pg.after_append")
            state.applied, state.in_flight = last, True
        state.advance = max(state.advance, last if stop is not None else max(last, end))  # (a commit record
        # straddling ``end`` comes with the peek: its transaction is taken, and passed)
        if not state.in_flight:  # nothing of this table waits for a commit (an epoch with no work has no
            self._advance(state)  # commit): the slot moves past the WAL its publication did not touch now
        seconds, state.at = time.monotonic() - state.at, time.monotonic()
        state.rows += rows
        state.status = {"split": f"{options['schema.name']}.{options['table.name']} (slot {slot})",
                        "position": state.advance, "upstream_end": at["current"],
                        "lag": max(at["current"] - state.advance, 0), "rows": state.rows,
                        "rows_per_second": rows / seconds if seconds > 0 else None, "last_epoch": epoch}
        if stop is not None:
            raise stop

    def _check(self, t: TableDef, rel: Relation) -> None:
        """An upstream relation description the table can follow: its columns all there, same types."""
        found = {c[0]: c for c in rel.columns}
        for c in t.columns:
            if c.name not in found:
                raise Unfollowable(f"column {c.name!r} is gone from {rel.name} upstream (ALTER TABLE): create the "
                                   "table again")
            if not _same(found[c.name][1], found[c.name][2], c):
                raise Unfollowable(f"column {c.name!r} of {rel.name} changed type upstream (ALTER TABLE): create the "
                                   "table again")

    def _snapshot(self, t: TableDef, state: _Table) -> None:
        """The slot made with an exported snapshot, and the table as of it, in one append."""
        options = dict(t.source)
        slot = options["slot.name"]
        state.conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,))
        with _connect(options, replication="database") as repl:
            made = repl.pgconn.exec_(f"CREATE_REPLICATION_SLOT {_quote(slot)} LOGICAL pgoutput EXPORT_SNAPSHOT".encode())
            if made.status != 2:  # TUPLES_OK
                raise RuntimeError(f"creating replication slot {slot!r}: {made.error_message.decode().strip()}")
            snapshot = made.get_value(0, 2).decode()
            columns = [c.name for c in t.columns]
            with _connect(options, autocommit=False) as conn:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                conn.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
                body = io.BytesIO()
                source = f"{_quote(options['schema.name'])}.{_quote(options['table.name'])}"
                select = f"COPY (SELECT {', '.join(map(_quote, columns))} FROM {source}) TO STDOUT WITH (FORMAT csv)"
                work = current_work()  # the snapshot's progress (SHOW JOBS): its lines of the planner's rows
                work.to_do(_estimate(conn, source))
                size = counted = 0
                with conn.cursor().copy(select) as copy:
                    for block in copy:  # (a row each: its lines are counted a megabyte at a time)
                        body.write(block)
                        size += len(block)
                        if size - counted >= PROGRESS_BYTES:
                            work.did(_lines(body, counted, size))
                            counted = size
                work.did(_lines(body, counted, size))
        body.seek(0)
        texts = pa.table({c: pa.array([], pa.string()) for c in columns}) if not body.getbuffer().nbytes else pacsv.read_csv(body, read_options=pacsv.ReadOptions(column_names=columns),
                               parse_options=pacsv.ParseOptions(newlines_in_values=True),
                               convert_options=pacsv.ConvertOptions(
                                   column_types={c: pa.string() for c in columns}, null_values=[""],
                                   strings_can_be_null=True, quoted_strings_can_be_null=False))
        rows = self._typed(t, {c: texts.column(c).combine_chunks() for c in columns})
        faults.point("pg.before_append")
        if rows.num_rows:
            self.insert(t, rows, (f"pg:t{t.id}", 1))
            state.applied, state.in_flight = 1, True
        faults.point("pg.after_append")
        state.rows += rows.num_rows

    def _typed(self, t: TableDef, texts: dict[str, pa.Array], rows: bool = True) -> pa.Table:
        """PostgreSQL's texts of some of ``t``'s columns as their types; ``rows``: whole rows,
        conformed to the table (else keys, as they are)."""
        by = {c.name: c for c in t.columns}
        arrays = {}
        for name, arr in texts.items():
            ours = column_type(by[name].type)
            arrays[name] = typed(arr, "jsonb" if is_jsonb(ours) else ours, name)
        return conform_rows(t, pa.table(arrays)) if rows else pa.table(arrays)

    def _last_per_key(self, t: TableDef, change) -> tuple[pa.Table | None, pa.Table | None]:
        """Each key's last change: its new row (an upsert) or its delete."""
        key = list(t.primary_key)
        rows = self._typed(t, {c: pa.array(v, pa.string()) for c, v in change.rows.items()})
        gone = self._typed(t, {k: pa.array(v, pa.string()) for k, v in change.deletes.items()}, rows=False)
        places = pl.concat([pl.from_arrow(rows.select(key)).with_columns(pl.Series("_at", change.row_at, pl.Int64)),
                            pl.from_arrow(gone).with_columns(pl.Series("_at", change.delete_at, pl.Int64))])
        last = places.sort("_at").unique(subset=key, keep="last")["_at"].to_numpy()
        keep_rows = np.isin(np.asarray(change.row_at, dtype=np.int64), last)
        keep_gone = np.isin(np.asarray(change.delete_at, dtype=np.int64), last)
        upserts = rows.filter(pa.array(keep_rows)) if len(change.row_at) else None
        deletes = gone.filter(pa.array(keep_gone)) if len(change.delete_at) else None
        return (upserts if upserts is not None and upserts.num_rows else None,
                deletes if deletes is not None and deletes.num_rows else None)

    def committed(self) -> None:
        """After an epoch's commit: each slot moved to what that epoch took (PostgreSQL may then
        let go of the WAL before it)."""
        for table_id, state in list(self._tables.items()):
            state.in_flight = False
            if not self._advance(state):
                self._close(table_id)

    def _advance(self, state: _Table) -> bool:
        """``state``'s slot moved to ``state.advance``; False when the server refused (moved after
        the next commit instead)."""
        if state.advance > state.advanced:
            try:
                state.conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (state.slot,
                                                                                        lsn_text(state.advance)))
                state.advanced = state.advance
            except Exception as exc:  # noqa: BLE001 - moved after the next commit instead
                log.warning("replication slot %r could not be advanced: %s", state.slot, text(exc))
                return False
        return True

    def status(self, t: TableDef) -> list[dict]:
        state = self._tables.get(t.id)
        return [state.status] if state is not None and state.status else []

    def _close(self, table_id: int) -> None:
        state = self._tables.pop(table_id, None)
        if state is not None:
            try:
                state.conn.close()
            except Exception:  # noqa: BLE001 - a broken connection is closed already
                pass

    def close(self) -> None:
        for table_id in list(self._tables):
            self._close(table_id)
