"""The ``millpond`` command line: the log, for scripting and debugging.

    millpond log info ROOT [CHANNEL]
    millpond log append ROOT CHANNEL [FILE] [--schema "x:int64,s:string"] [--producer ID:SEQ]
    millpond log tail ROOT CHANNEL [--from N] [--follow] [--timeout SECONDS]

``append`` reads JSON lines (one record per line) from FILE or stdin, or a ``.parquet`` file,
and appends them as one batch: a malformed line or a record that does not fit the channel's
schema is an error naming the line (or row) and field, and nothing is appended. ``tail``
prints records as JSON lines with their ``_seq`` and ``_tick``.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
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
        log = Log(ObjectStore(args.root))
        try:
            return {"info": _info, "append": _append, "tail": _tail}[args.cmd](log, args)
        finally:
            log.close()
    except MillpondError as exc:
        print(f"millpond: {exc}", file=sys.stderr)
        return 1


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
        table = _read_json_lines(data, ch.schema, args.file or "stdin")
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
