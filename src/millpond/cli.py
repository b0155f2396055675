"""The ``millpond`` command line: a SQL shell, and the log for scripting and debugging.

    millpond sql ROOT [-c SQL] [--read-only] [--format table|csv|json] [--interval 1s] [--log-level L]
    millpond log info ROOT [CHANNEL]
    millpond log append ROOT CHANNEL [FILE] [--schema "x:int64,s:string"] [--producer ID:SEQ]
    millpond log tail ROOT CHANNEL [--from N] [--follow] [--timeout SECONDS]

``sql`` is :mod:`millpond.shell`: interactive with history and multi-line statements, or one-shot
with ``-c`` (or a script on standard input). Every error is printed as one line, ``millpond: ...``
on stderr, with a non-zero exit code (1; 130 when interrupted); never a traceback.

``append`` reads JSON lines (one record per line) from FILE or stdin, or a ``.parquet`` file,
and appends them as one batch: a malformed line or a record that does not fit the channel's
schema is an error naming the line (or row) and field, and nothing is appended. ``tail``
prints records as JSON lines with their ``_seq`` and ``_tick``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import threading
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from millpond.errors import MillpondError, SchemaError
from millpond.log import Log
from millpond.store.objects import ObjectStore

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="millpond", description="millpond command line")
    groups = parser.add_subparsers(dest="group", required=True)
    sql = groups.add_parser("sql", help="a SQL shell (interactive, or -c SQL)")
    sql.add_argument("root")
    sql.add_argument("-c", "--command", help="run these statements and exit (default: interactive, or a script on stdin)")
    sql.add_argument("--read-only", action="store_true", help="follow the root without writing (another process writes)")
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table", help="how results are printed")
    sql.add_argument("--interval", default=None,
                     help="background epochs this often, e.g. 1s (default: 1s interactive, none with -c; 'none': off)")
    sql.add_argument("--log-level", default=None, help="OFF, ERROR (default), WARN, INFO, DEBUG: Spark's and millpond's logs")

    srv = groups.add_parser("serve", help="serve the database over the PostgreSQL wire protocol (psql, BI tools)")
    srv.add_argument("root")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on (default: localhost only)")
    srv.add_argument("--port", type=int, default=5433, help="port (default 5433)")
    srv.add_argument("--password", default=os.environ.get("MILLPOND_PASSWORD"),
                     help="clients must give it (default: $MILLPOND_PASSWORD; none: localhost only)")
    srv.add_argument("--password-file", help="users who may connect: one user:password (or user:password:read-only) "
                                             "per line, # comments")
    srv.add_argument("--auth", choices=("scram-sha-256", "cleartext"), default="scram-sha-256",
                     help="how clients prove their password (default scram-sha-256: it never crosses the wire)")
    srv.add_argument("--tls-cert", help="TLS certificate (PEM); with --tls-key, every connection must use TLS")
    srv.add_argument("--tls-key", help="the TLS certificate's private key (PEM)")
    srv.add_argument("--max-connections", type=int, default=100, help="more connections are refused (default 100)")
    srv.add_argument("--idle-timeout", type=float, default=None,
                     help="seconds a connection may wait between statements (default: no limit)")
    srv.add_argument("--read-only", action="store_true", help="follow the root without writing (another process writes)")
    srv.add_argument("--python-functions", action="store_true",
                     help="let clients CREATE FUNCTION ... LANGUAGE python (their code runs in this process)")
    srv.add_argument("--interval", default="1s", help="background epochs this often (default 1s; 'none': off)")
    srv.add_argument("--metrics-port", type=int, default=None,
                     help="also serve Prometheus metrics at http://HOST:PORT/metrics (docs/operations.md)")
    srv.add_argument("--http", type=int, default=None, metavar="PORT",
                     help="also serve the dashboard at http://HOST:PORT/ (docs/operations.md)")
    srv.add_argument("--readers", type=int, default=min(4, os.cpu_count() or 1),
                     help="processes that answer queries in parallel with the writer's (default: the CPUs, at "
                          "most 4; 0: every statement in one process)")
    srv.add_argument("--log-level", default=None, help="OFF, ERROR (default), WARN, INFO, DEBUG")

    ui = groups.add_parser("ui", help="the dashboard of a root, opened read-only (another process may write it)")
    ui.add_argument("root")
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (default: localhost only)")
    ui.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    ui.add_argument("--password", default=os.environ.get("MILLPOND_PASSWORD"),
                    help="HTTP Basic authentication with this password (default: $MILLPOND_PASSWORD)")
    ui.add_argument("--password-file", default=None, help="users, as for serve --password-file")
    ui.add_argument("--log-level", default=None, help="OFF, ERROR (default), WARN, INFO, DEBUG")

    pipe = groups.add_parser("pipeline", help="run a Spark Declarative Pipelines project incrementally") \
        .add_subparsers(dest="cmd", required=True)
    for cmd, text in (("run", "create or update the project's datasets as views, then commit what is new"),
                      ("dry-run", "check the project's graph without creating or running anything")):
        p = pipe.add_parser(cmd, help=text)
        p.add_argument("--spec", default=None, help="the project's spec (default: spark-pipeline.yaml or .yml here or "
                                                    "in the nearest folder above)")
        p.add_argument("--root", default=None, help="the database (default: the spec's storage, else ./millpond-data)")
        p.add_argument("--log-level", default=None, help="OFF, ERROR (default), WARN, INFO, DEBUG")
        if cmd == "run":
            p.add_argument("--full-refresh", default="", help="datasets to reset and recompute (comma-separated)")
            p.add_argument("--full-refresh-all", action="store_true", help="reset and recompute every dataset")
    p = pipe.add_parser("init", help="create a new project's files")
    p.add_argument("--name", required=True, help="the project's name (and folder)")

    log_cmd = groups.add_parser("log", help="the write-ahead log").add_subparsers(dest="cmd", required=True)

    info = log_cmd.add_parser("info", help="channels, ranges and schemas")
    info.add_argument("root")
    info.add_argument("channel", nargs="?")

    append = log_cmd.add_parser("append", help="append JSON lines (or a Parquet file) as one batch")
    append.add_argument("root")
    append.add_argument("channel")
    append.add_argument("file", nargs="?", help="JSON lines or .parquet (default: JSON lines on stdin)")
    append.add_argument("--schema", help="create the channel if missing, e.g. 'user:string,ms:int64'")
    append.add_argument("--producer", help="ID:SEQ: an idempotent append (a retry is applied once)")

    tail = log_cmd.add_parser("tail", help="print records as JSON lines")
    tail.add_argument("root")
    tail.add_argument("channel")
    tail.add_argument("--from", dest="start", type=int, default=None, help="first sequence number (default: start)")
    tail.add_argument("--follow", action="store_true", help="keep waiting for new records")
    tail.add_argument("--timeout", type=float, default=None, help="with --follow: stop after this many idle seconds")

    args = parser.parse_args(argv)
    try:
        if args.group == "sql":
            return _sql(args)
        if args.group == "serve":
            return _serve(args)
        if args.group == "pipeline":
            return _pipeline(args)
        if args.group == "ui":
            return _ui(args)
        log = Log(ObjectStore(_root(args.root)))
        try:
            return {"info": _info, "append": _append, "tail": _tail}[args.cmd](log, args)
        finally:
            log.close()
    except KeyboardInterrupt:
        print("millpond: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. piped into head: the reader is gone
        return 1
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        from millpond.errors import unexpected
        from millpond.shell import one_line

        print(f"millpond: {one_line(unexpected(exc))}", file=sys.stderr)
        return 1


def _root(root: str) -> str:
    if not root.strip():
        raise MillpondError("ROOT is empty: name the database's folder, file://... or s3://bucket/prefix")
    return root


def _serve(args: argparse.Namespace) -> int:
    import millpond

    interval = None if args.interval == "none" else args.interval
    with millpond.connect(_root(args.root), read_only=args.read_only, interval=interval,
                          log_level=args.log_level) as db:
        with db.serve(host=args.host, port=args.port, password=None if args.password_file else args.password,
                      password_file=args.password_file, auth=args.auth, tls_cert=args.tls_cert, tls_key=args.tls_key,
                      max_connections=args.max_connections, idle_timeout=args.idle_timeout, readers=args.readers,
                      python_functions=args.python_functions) as server:
            print(f"millpond: serving {args.root} on {args.host}:{server.port} (psql -h {args.host} -p {server.port})",
                  file=sys.stderr, flush=True)
            metrics = None if args.metrics_port is None else db.serve_metrics(host=args.host, port=args.metrics_port)
            if metrics is not None:
                print(f"millpond: metrics at http://{args.host}:{metrics.port}/metrics", file=sys.stderr, flush=True)
            dashboard = None if args.http is None else db.serve_dashboard(host=args.host, port=args.http)
            if dashboard is not None:
                print(f"millpond: dashboard at {dashboard.url}", file=sys.stderr, flush=True)
            try:
                threading.Event().wait()  # until interrupted
            finally:
                for server in (metrics, dashboard):
                    if server is not None:
                        server.close()
    return 0


def _ui(args: argparse.Namespace) -> int:
    import millpond

    with millpond.connect(_root(args.root), read_only=True, log_level=args.log_level) as db:
        with db.serve_dashboard(host=args.host, port=args.port, password=args.password,
                                password_file=args.password_file) as dashboard:
            print(f"millpond: dashboard of {args.root} at {dashboard.url} (read-only)", file=sys.stderr, flush=True)
            threading.Event().wait()  # until interrupted
    return 0


def _pipeline(args: argparse.Namespace) -> int:
    from millpond import pipelines

    if args.cmd == "init":
        print(f"created {pipelines.init(args.name, args.name)}; to run it: cd {args.name} && millpond pipeline run")
        return 0
    import millpond

    spec = args.spec or pipelines.find_spec()
    project = pipelines.load(spec)
    root = args.root or _spec_storage(spec) or "millpond-data"
    if args.cmd == "dry-run":  # the root's tables, if it exists, read without writing or starting Spark
        tables: set[str] = set()
        if "://" in root or Path(root).exists():
            with millpond.connect(_root(root), read_only=True, log_level=args.log_level) as db:
                tables = set(db.catalog.tables)
        print("\n".join(pipelines.check(project, tables)))
        return 0
    with millpond.connect(_root(root), interval=None, log_level=args.log_level) as db:
        try:
            refresh = args.full_refresh_all or {n.strip() for n in args.full_refresh.split(",") if n.strip()}
            print("\n".join(pipelines.run(db, project, full_refresh=refresh)))
        except pipelines.PipelineError as exc:  # the run's whole report, its failures named (not one line)
            print(f"millpond: {exc}", file=sys.stderr)
            return 1
    return 0


def _spec_storage(spec: "str | Path") -> str | None:
    import yaml

    try:
        storage = (yaml.safe_load(open(spec)) or {}).get("storage")
    except (OSError, yaml.YAMLError):
        return None
    if not storage:
        return None
    return str(Path(spec).parent / storage) if "://" not in storage else storage


def _sql(args: argparse.Namespace) -> int:
    from millpond.api import Database
    from millpond.shell import Printer, interactive, run_script

    script = args.command
    if script is None and not sys.stdin.isatty():
        script = sys.stdin.read()
    interval = args.interval if args.interval is not None else (None if script is not None else "1s")
    if isinstance(interval, str) and interval.lower() in ("none", "off", "0"):
        interval = None
    printer = Printer(sys.stdout, sys.stderr, fmt=args.format, prefix="error: " if script is None else "millpond: ")
    # Spark starts at the first statement that needs it: a query is DuckDB's, CREATE TABLE and INSERT the log's
    with Database(_root(args.root), read_only=args.read_only, interval=interval, log_level=args.log_level,
                  lazy_spark=True) as db:
        if script is None:
            return interactive(db, printer)
        return 0 if run_script(db, script, printer, progress=sys.stderr.isatty()) else 1


def _info(log: Log, args: argparse.Namespace) -> int:
    names = [args.channel] if args.channel else log.channel_names()
    out = []
    for name in names:
        ch = log.channel(name)
        pieces = ch.pieces(ch.start, ch.end) if ch.end > ch.start else []
        out.append({"channel": name, "id": ch.info.id, "physical_channel": ch.info.pchannel, "start": ch.start,
                    "end": ch.end, "wal_frames": sum(p.offset >= 0 for p in pieces),
                    "parquet_files": len({p.key for p in pieces if p.offset < 0}),
                    "schema": {f.name: str(f.type) for f in ch.schema}})
    print(json.dumps({"root": log.store.root, "physical_channels": log.physical_channels, "tick": log.tick(),
                      "channels": out}, indent=2))
    return 0


def _append(log: Log, args: argparse.Namespace) -> int:
    """Into a SQL table's channel, records are rows of the table (its columns); while a Database
    is open on the root, the append goes through it (millpond.log.forward)."""
    from millpond.engine.ingest import table_channel

    ch = table_channel(log, args.channel)
    if ch is None:
        try:
            ch = log.channel(args.channel)
        except MillpondError:
            if not args.schema:
                raise
            ch = log.create_channel(args.channel, _parse_schema(args.schema))
    if args.file and args.file.endswith(".parquet"):
        table = pq.read_table(args.file)
    else:
        data = open(args.file, "rb").read() if args.file else sys.stdin.buffer.read()
        table = _read_json_lines(data, ch.row_schema, args.file or "stdin")
    producer = None
    if args.producer:
        pid, _, seq = args.producer.rpartition(":")
        if not pid or not seq.isdigit():
            raise MillpondError(f"--producer {args.producer!r}: use ID:SEQ, e.g. loader-1:42")
        producer = (pid, int(seq))
    result = ch.append(table, producer=producer)
    print(json.dumps({"channel": ch.name, "first": result.first, "end": result.end, "tick": result.tick,
                      "duplicate": result.duplicate}))
    return 0


def _tail(log: Log, args: argparse.Namespace) -> int:
    ch = log.channel(args.channel)
    start = ch.start if args.start is None else args.start
    if not args.follow:
        _print(ch.read(start, None, hidden=True))
        return 0
    for table in ch.tail(start, timeout=args.timeout):
        _print(table)
    return 0


def _print(table: pa.Table) -> None:
    for row in table.to_pylist():
        print(json.dumps(row, default=str))
    sys.stdout.flush()


def _read_json_lines(data: bytes, schema: pa.Schema, source: str) -> pa.Table:
    """JSON lines parsed against the channel's schema (vectorized); errors name the line and field."""
    if not data.strip():
        return schema.empty_table()
    try:
        return pj.read_json(io.BytesIO(data), parse_options=pj.ParseOptions(explicit_schema=schema,
                                                                            unexpected_field_behavior="error"))
    except pa.ArrowInvalid as exc:
        raise SchemaError(f"{source} {_bad_line(data, schema)}: {exc}") from None


def _bad_line(data: bytes, schema: pa.Schema) -> str:
    """Where a failed parse went wrong (only on the error path: one line at a time)."""
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            return f"line {n}: not valid JSON ({exc})"
        if not isinstance(record, dict):
            return f"line {n}: expected a JSON object, got {type(record).__name__}"
        unknown = sorted(set(record) - set(schema.names))
        if unknown:
            return f"line {n}: unknown field {unknown[0]!r} (the channel has {schema.names})"
        try:
            pj.read_json(io.BytesIO(line), parse_options=pj.ParseOptions(explicit_schema=schema))
        except pa.ArrowInvalid:
            return f"line {n}: a field does not fit the channel's schema {dict(zip(schema.names, map(str, schema.types)))}"
    return "records do not fit the channel's schema"


def _parse_schema(text: str) -> pa.Schema:
    fields = []
    for part in text.split(","):
        name, _, type_name = part.strip().partition(":")
        try:
            fields.append(pa.field(name.strip(), pa.type_for_alias(type_name.strip())))
        except (ValueError, KeyError):
            raise MillpondError(f"--schema: {part.strip()!r} is not NAME:TYPE with an Arrow type "
                                "(int64, float64, string, bool, timestamp[us], ...)") from None
    return pa.schema(fields)


if __name__ == "__main__":
    sys.exit(main())
