"""How a Kafka message's value (and key) becomes rows: ``FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE
JSON | CSV | BYTES`` (:mod:`millpond.connectors.kafka`). A chunk of one partition's messages is read
at once (one JSON or CSV read over them all); only when that fails is each read alone, to name the
messages at fault. :func:`decoded` decodes one partition's messages as the driver or a Spark task
reads them."""

from __future__ import annotations

from dataclasses import dataclass
from io import BytesIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from millpond.catalog import TableDef
from millpond.connectors.source_errors import text
from millpond.log.conform import conform

__all__ = ["Decoded", "decode", "decode_all", "decoded"]


def decode(t: TableDef, options: dict[str, str], values: list, keys: list | None
            ) -> tuple[pa.Table, list[tuple[int, str]]]:
    """The rows of the messages ``values`` (with ``keys``: their keys) that read well, in their
    order (a keyed format's with ``_op``: 1 upsert, -1 delete, a changed key's delete a row of
    its own just before), and the messages that do not: (index, error)."""
    try:
        return decode_all(t, options, values, keys), []
    except Exception:  # noqa: BLE001 - some message is at fault: which one is found below
        pass
    bad = []
    for i, v in enumerate(values):  # the error path only: each message alone
        try:
            decode_all(t, options, [v], None if keys is None else [keys[i]])
        except Exception as exc:  # noqa: BLE001 - any reader's error names the message
            bad.append((i, text(exc)))
    skipped = {i for i, _ in bad}
    good = [i for i in range(len(values)) if i not in skipped]
    if not bad:  # each reads alone, not together: read them one by one
        return pa.concat_tables([decode_all(t, options, [values[i]], None if keys is None else [keys[i]])
                                 for i in good]), []
    rows = decode_all(t, options, [values[i] for i in good], None if keys is None else [keys[i] for i in good]) \
        if good else decode_all(t, options, [], [] if keys is not None else None)
    return rows, bad


def _columns(t: TableDef, options: dict[str, str]) -> list:
    """The table's columns a message's value fills (INCLUDE's are the message's)."""
    included = {v for k, v in options.items() if k.startswith("include.")}
    return [f for f in t.schema if f.name not in included]


def decode_all(t: TableDef, options: dict[str, str], values: list, keys: list | None) -> pa.Table:
    fields = _columns(t, options)
    where = f"table {t.name!r}"
    schema = pa.schema(fields)
    types = {c.name: c.type for c in t.columns}
    enc, fmt = options["encode"], options["format"]
    if fmt == "plain":
        if any(v is None for v in values) and values:
            raise ValueError("the message has no value")
        if enc == "bytes":
            rows = pa.table({fields[0].name: pa.array(values, pa.binary())})
        elif enc == "csv":
            rows = pcsv.read_csv(BytesIO(b"\n".join(values) + b"\n"), read_options=pcsv.ReadOptions(
                column_names=schema.names), parse_options=pcsv.ParseOptions(delimiter=options.get("encode.delimiter", ",")),
                convert_options=pcsv.ConvertOptions(column_types={f.name: f.type for f in fields
                                                                  if not pa.types.is_struct(f.type)},
                                                    strings_can_be_null=True)) if values else schema.empty_table()
            if rows.num_rows != len(values):
                raise ValueError(f"{len(values)} messages read as {rows.num_rows} CSV rows")
        else:
            rows = _json(values, schema)
        return conform(where, schema, rows, key=t.primary_key, types=types)
    key = list(t.primary_key)
    if fmt == "upsert":
        gone = np.array([v is None for v in values], bool)
        kept = [v for v in values if v is not None] if gone.any() else values
        rows = conform(where, schema, _json(kept, schema), key=key, types=types)
        if not gone.any():
            return rows.append_column("_op", pa.array(np.ones(len(values), np.int8)))
        dead = _keys(t, [k for k, g in zip(keys, gone) if g])
        out = pa.concat_tables([rows.append_column("_pos", pa.array(np.flatnonzero(~gone))),
                                _key_rows(dead, schema, np.flatnonzero(gone))], promote_options="default")
        out = out.sort_by("_pos").drop_columns(["_pos"])
        return out.append_column("_op", pc.if_else(pc.is_null(out.column("_dead")), 1, -1).cast(pa.int8())) \
            .drop_columns(["_dead"])
    return _debezium(t, schema, values, types)


def _json(values: list, schema: pa.Schema, *, structs: bool = False) -> pa.Table:
    """Messages each one JSON object, as rows of ``schema``'s columns (fields the object lacks:
    NULL; fields ``schema`` lacks: ignored). A struct column is read as the reader infers it (and
    conformed after), unless ``structs``."""
    if not values:
        return schema.empty_table()
    data = b"\n".join(values)
    explicit = schema if structs else pa.schema([f for f in schema if not pa.types.is_struct(f.type)])
    rows = pjson.read_json(BytesIO(data), parse_options=pjson.ParseOptions(
        explicit_schema=explicit, unexpected_field_behavior="ignore",
        newlines_in_values=data.count(b"\n") != len(values) - 1))
    if rows.num_rows != len(values):
        raise ValueError(f"{len(values)} messages read as {rows.num_rows} JSON objects")
    missing = [f.name for f in schema if f.name not in rows.column_names]
    for name in missing:  # a struct column no message has
        rows = rows.append_column(name, pa.nulls(rows.num_rows, schema.field(name).type))
    return rows.select(schema.names)


def _keys(t: TableDef, keys: list) -> pa.Table:
    """Message keys as the table's key columns: a JSON object of them, or (a one-column key) the
    key's JSON value."""
    key = list(t.primary_key)
    schema = pa.schema([t.schema.field(k) for k in key])
    if any(k is None for k in keys):
        raise ValueError("a message with no value (a delete) has no key either")
    if all(k.lstrip()[:1] == b"{" for k in keys):
        rows = _json(keys, schema)
    elif len(key) == 1:
        wrapped = pc.binary_join_element_wise(pa.scalar(b'{"k":'), pa.array(keys, pa.binary()), pa.scalar(b"}"), b"")
        rows = _json(wrapped.to_pylist(), pa.schema([pa.field("k", schema.field(0).type)])).rename_columns(key)
    else:
        raise ValueError(f"a message key is not a JSON object of the key columns {key}")
    return conform(f"table {t.name!r}'s key", schema, rows, key=key, types={c.name: c.type for c in t.columns})


def _key_rows(keys: pa.Table, schema: pa.Schema, positions: np.ndarray) -> pa.Table:
    """Deletes of ``keys`` as rows of ``schema`` (NULL but the key), at ``positions``, marked ``_dead``."""
    cols = {f.name: keys.column(f.name) if f.name in keys.column_names else pa.nulls(keys.num_rows, f.type)
            for f in schema}
    return pa.table({**cols, "_pos": pa.array(positions), "_dead": pa.array(np.ones(keys.num_rows, bool))})


def _debezium(t: TableDef, schema: pa.Schema, values: list, types: dict[str, str]) -> pa.Table:
    """Debezium's change events (bare or inside ``payload``) as upserts and deletes by key."""
    kept = [v for v in values if v is not None]  # a tombstone after a delete: nothing more to do
    row = pa.struct(list(schema))
    event = pa.schema([("before", row), ("after", row), ("op", pa.string())])
    outer = pa.schema([*event, ("payload", pa.struct(list(event)))])
    data = _json(kept, outer, structs=True)
    payload = data.column("payload")
    field = {name: pc.coalesce(pc.struct_field(payload, name), data.column(name)) for name in ("before", "after", "op")}
    op = field["op"]
    if pc.any(pc.is_null(op)).as_py():
        raise ValueError("a Debezium event without op")
    unknown = pc.unique(pc.filter(op, pc.invert(pc.is_in(op, pa.array(["c", "r", "u", "d"])))))
    if len(unknown):
        raise ValueError(f"Debezium op {unknown[0].as_py()!r} is not supported (c, r, u, d are)")
    key = list(t.primary_key)
    n = len(kept)
    after = pa.Table.from_struct_array(field["after"]) if n else schema.empty_table()
    before = pa.Table.from_struct_array(field["before"]) if n else schema.empty_table()
    is_delete = pc.equal(op, "d")
    if pc.any(pc.and_(pc.invert(is_delete), pc.is_null(field["after"]))).as_py():
        raise ValueError("a Debezium insert or update without after")
    if pc.any(pc.and_(is_delete, pc.is_null(field["before"]))).as_py():
        raise ValueError("a Debezium delete without before (the table upstream needs REPLICA IDENTITY with its key)")
    pos = np.arange(n, dtype=np.float64)
    ups = pc.invert(is_delete)
    upserts = conform(f"table {t.name!r}", schema, _fill(after.filter(ups), schema), key=key, types=types)
    dels = before.filter(is_delete).select(key)
    # an update that changed the key deletes the old key just before its new row
    moved = pc.and_(pc.equal(op, "u"), pc.is_valid(field["before"]))
    if pc.any(moved).as_py():
        old, new = before.filter(moved).select(key), after.filter(moved).select(key)
        changed = np.zeros(old.num_rows, bool)
        for k in key:
            changed |= np.asarray(pc.fill_null(pc.not_equal(old.column(k), new.column(k)), True))
        moved_pos = pos[np.asarray(moved)][changed] - 0.5
        dels = pa.concat_tables([dels, old.filter(pa.array(changed))])
        del_pos = np.concatenate([pos[np.asarray(is_delete)], moved_pos])
    else:
        del_pos = pos[np.asarray(is_delete)]
    dels = conform(f"table {t.name!r}'s key", pa.schema([schema.field(k) for k in key]), dels, key=key, types=types)
    out = pa.concat_tables([upserts.append_column("_pos", pa.array(pos[np.asarray(ups)])),
                            _key_rows(dels, schema, del_pos)], promote_options="default")
    out = out.sort_by("_pos").drop_columns(["_pos"])
    return out.append_column("_op", pc.if_else(pc.is_null(out.column("_dead")), 1, -1).cast(pa.int8())) \
        .drop_columns(["_dead"])


def _fill(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with ``schema``'s columns it lacks (structs the event schema left out) as NULL."""
    for f in schema:
        if f.name not in rows.column_names:
            rows = rows.append_column(f.name, pa.nulls(rows.num_rows, f.type))
    return rows.select(schema.names)


@dataclass
class Decoded:
    """One partition's messages decoded: ``rows`` (INCLUDE's columns too; ``_op`` for upserts and
    deletes), the malformed messages' ``(offset, error)``, the ``last`` offset taken (-1: none),
    whether the table ``stopped`` at the first malformed one (``on_error = 'stop'``), and how many
    messages were ``kept``."""

    partition: int
    rows: pa.Table
    bad: list[tuple[int, str]]
    last: int
    stopped: bool
    kept: int


def decoded(t: TableDef, p: int, group: list) -> Decoded:
    """Table ``t``'s partition ``p``'s messages ``group`` (in offset order) as :class:`Decoded` (no
    side effect: the driver or a Spark task decodes)."""
    options = dict(t.source)
    vals = [m.value() for m in group]
    last = group[-1].offset() if group else -1
    keys = [m.key() for m in group] if options["format"] == "upsert" and None in vals else None
    rows, bad = decode(t, options, vals, keys)
    stopped = bool(bad) and options["on_error"] == "stop"
    if stopped:  # the messages before it come in, none after it
        first = bad[0][0]
        rows = decode_all(t, options, vals[:first], None if keys is None else keys[:first])
        group, last, bad = group[:first], group[first].offset() - 1, [(group[first].offset(), bad[0][1])]
    elif bad:
        skipped = {i for i, _ in bad}
        offsets = [m.offset() for m in group]
        bad = [(offsets[i], err) for i, err in bad]
        group = [m for i, m in enumerate(group) if i not in skipped]
    includes = {k.removeprefix("include."): v for k, v in options.items() if k.startswith("include.")}
    for what, name in sorted(includes.items()):
        if what == "partition":
            col = pa.array(np.full(len(group), p, np.int32))
        elif what == "offset":
            col = pa.array([m.offset() for m in group], pa.int64())
        elif what == "timestamp":
            col = pa.array([m.timestamp()[1] for m in group], pa.int64()).cast(
                pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
        else:
            col = pa.array([m.key() for m in group], pa.binary())
        rows = rows.append_column(name, col)
    return Decoded(p, rows, bad, last, stopped, len(group))
