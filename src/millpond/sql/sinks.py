"""Sinks: ``CREATE SINK``, ``DROP SINK``, ``SHOW SINKS`` (the engine's side: :mod:`millpond.engine.sinks`).

::

    CREATE SINK [IF NOT EXISTS] name FROM table_or_view WITH (
        connector = 'deltalake', location = '<path or URI>', type = 'upsert' | 'append-only'
        [, storage.<option> = '<value>' ...])      -- delta-rs storage options (e.g. S3 credentials)
    CREATE SINK [IF NOT EXISTS] name FROM table_or_view WITH (
        connector = 'iceberg', catalog.type = 'sql', catalog.uri = '<SQLAlchemy URL>',
        warehouse.path = '<path or URI>', database.name = 'd', table.name = 't',
        type = 'upsert' | 'append-only')
    DROP SINK [IF EXISTS] name
    SHOW SINKS

``CREATE SINK`` writes the source's rows to the target (its first write) before the catalog names
the sink; if that fails, the sink is not created and the error says why. A crash inside it leaves
the target begun and the sink noted as pending under the root: the same statement run again
continues it (any other refuses the target, which is not empty). ``DROP SINK`` stops writing; the
target's table stays.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import replace

import pyarrow as pa
from sqlglot import exp
from sqlglot.tokens import TokenType

from millpond.catalog import SinkDef
from millpond.engine.runtime import Runtime
from millpond.connectors import SINKS as CONNECTORS, target_of
from millpond.connectors.lake_sinks import ICEBERG_OPTIONS
from millpond.engine.sinks import KINDS, check_schema, sink_key
from millpond.errors import MillpondError, SqlError
from millpond.sql.statements import Words, dropped, is_command, source

__all__ = ["is_sink", "create", "drop", "show"]

_SYNTAX = ("CREATE SINK [IF NOT EXISTS] name FROM table_or_view WITH (connector = 'deltalake' | 'iceberg' | "
           "'postgres' | 'kafka', type = 'upsert' | 'append-only', ...) [FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON]")


def is_sink(s: exp.Expression, verb: str) -> bool:
    """Whether ``s`` is a ``<verb> SINK`` statement (sqlglot keeps them as commands)."""
    return is_command(s, verb, "SINK")


def _parse(text: str) -> tuple[str, str, bool, dict[str, str]]:
    w = Words(text, "CREATE SINK", _SYNTAX)
    toks = w.toks
    w.word("CREATE", "SINK")
    if_not_exists = w.word("IF", "NOT", "EXISTS")
    sink = w.name("the sink's name")
    if not w.word("FROM"):
        raise SqlError(f"CREATE SINK {sink}: expected FROM table_or_view ({_SYNTAX})", sql=text)
    src = w.name("the table or view it writes out")
    if not w.word("WITH") or not w.word("("):
        raise SqlError(f"CREATE SINK {sink}: expected WITH (connector = ..., ...) ({_SYNTAX})", sql=text)
    options: dict[str, str] = {}
    while True:
        start = w.i
        while w.i < len(toks) and toks[w.i].text != "=":
            w.i += 1
        key = "".join(t.text for t in toks[start:w.i]).lower()
        if not key or w.i + 1 >= len(toks) or toks[w.i + 1].token_type != TokenType.STRING:
            raise SqlError(f"CREATE SINK {sink}: each option is name = 'value' ({_SYNTAX})", sql=text)
        if key in options:
            raise SqlError(f"CREATE SINK {sink}: option {key!r} is given twice", sql=text)
        options[key] = toks[w.i + 1].text
        w.i += 2
        if w.word(")"):
            break
        if not w.word(","):
            raise SqlError(f"CREATE SINK {sink}: expected ',' or ')' after option {key!r}", sql=text)
    if w.word("FORMAT"):  # RisingWave's FORMAT ... ENCODE ... of a Kafka sink
        fmt = toks[w.i].text.lower() if w.i < len(toks) else ""
        w.i += 1
        if not fmt or not w.word("ENCODE") or w.i >= len(toks):
            raise SqlError(f"CREATE SINK {sink}: expected FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON", sql=text)
        options["format"], options["encode"] = fmt, toks[w.i].text.lower()
        w.i += 1
    if w.i < len(toks) and toks[w.i].text != ";":
        raise SqlError(f"CREATE SINK {sink}: unexpected {toks[w.i].text!r} after its options", sql=text)
    return sink, src, if_not_exists, options


def create(rt: Runtime, s: exp.Command) -> None:
    text = source(s)
    name, src, if_not_exists, options = _parse(text)
    catalog = rt.catalog
    if name in catalog.sinks and if_not_exists:
        return
    connector = options.pop("connector", None)
    if connector not in CONNECTORS:
        raise SqlError(f"CREATE SINK {name}: connector must be one of {', '.join(CONNECTORS)}"
                       f"{f', got {connector!r}' if connector else ''}", sql=text)
    kind = options.pop("type", None)
    if kind not in KINDS:
        raise SqlError(f"CREATE SINK {name}: type must be 'upsert' or 'append-only'"
                       f"{f', got {kind!r}' if kind else ''}", sql=text)
    where = _where(name, connector, kind, options, text)
    rel = catalog.relation(src)
    rt.unfilled(src, f"create sink {name!r} on it")
    sink = SinkDef(0, name, src, connector, kind, tuple(sorted(options.items())), rt.epoch,
                   f"millpond-{uuid.uuid4().hex}", text)
    # the same statement again after a crash inside it: the target it began is this sink's
    pending = rt.sinks.pending(name)
    resumed = pending is not None and name not in catalog.sinks and \
        (pending["source"], pending["connector"], pending["kind"], [tuple(o) for o in pending["options"]]) == \
        (src, connector, kind, list(sink.options))
    if resumed:
        sink = replace(sink, start=pending["start"], token=pending["token"])
    check_schema(name, rel.schema)
    if kind == "upsert" and not sink_key(catalog, rt, sink):
        raise SqlError(f"CREATE SINK {name}: an upsert sink keeps rows by the key of {src!r}, and it has none "
                       "(a table needs a PRIMARY KEY; a view's rows need a GROUP BY); use type = 'append-only' "
                       "to write its changes instead", sql=text)
    target = target_of(sink)
    try:
        held = target.rows()
    except Exception as exc:  # noqa: BLE001 - the target's own error, named
        raise MillpondError(f"CREATE SINK {name}: cannot read the target {where}: {type(exc).__name__}: {exc}") from None
    if held is not None and not (resumed and target.written(sink.token) is not None):
        raise SqlError(f"CREATE SINK {name}: {where} already holds a table ({held} rows); a sink writes a table "
                       "of its own (choose a new one)", sql=text)
    catalog.with_sink(sink)  # the name is free and the source exists: checked before anything is written
    rt.sinks.note_pending(sink)
    try:  # the first write, before the catalog names the sink: a sink exists only once its target holds the rows
        rt.sinks.write(catalog, sink, rt.epoch)
    except Exception as exc:
        rt.sinks.forget(sink)
        rt.sinks.clear_pending(name)
        raise MillpondError(f"CREATE SINK {name}: writing the rows of {src!r} to {where} failed, "
                            f"so the sink was not created: {type(exc).__name__}: {exc}") from None
    rt.commit_catalog(catalog.with_sink(sink))
    rt.sinks.clear_pending(name)


def _where(name: str, connector: str, kind: str, options: dict[str, str], text: str) -> str:
    """Check the target's options (a relative path made absolute) and say where the target is."""
    if connector == "postgres":
        from millpond.connectors.postgres_sink import check_options

        return check_options(name, options, text)
    if connector == "kafka":
        from millpond.connectors.kafka_sink import check_options

        return check_options(name, options, kind, text)
    if connector == "deltalake":
        allowed = ("location",)
        if not options.get("location"):
            raise SqlError(f"CREATE SINK {name}: location = '<path or URI>' of the Delta table is required", sql=text)
        if "://" not in options["location"]:
            options["location"] = os.path.abspath(options["location"])
    else:
        allowed = (*ICEBERG_OPTIONS, "catalog.name")
        missing = [o for o in ICEBERG_OPTIONS if not options.get(o)]
        if missing:
            raise SqlError(f"CREATE SINK {name}: an Iceberg sink needs {', '.join(missing)} (catalog.type = 'sql', "
                           "catalog.uri = '<SQLAlchemy URL>', warehouse.path = '<path>', database.name, table.name)",
                           sql=text)
        if options["catalog.type"] != "sql":
            raise SqlError(f"CREATE SINK {name}: catalog.type must be 'sql' (pyiceberg's SQL catalog), got "
                           f"{options['catalog.type']!r}", sql=text)
    unknown = sorted(k for k in options if k not in allowed and not (connector == "deltalake" and k.startswith("storage.")))
    if unknown:
        known = "location, storage.<delta-rs storage option>" if connector == "deltalake" else ", ".join(allowed)
        raise SqlError(f"CREATE SINK {name}: unknown option {unknown[0]!r} for connector {connector!r} "
                       f"(known: connector, type, {known})", sql=text)
    if connector == "deltalake":
        return repr(options["location"])
    return f"Iceberg table {options['database.name']}.{options['table.name']} of catalog {options['catalog.uri']!r}"


def drop(rt: Runtime, s: exp.Command) -> None:
    """``DROP SINK [IF EXISTS] name``: the sink stops; the target's table stays as written."""
    name, if_exists = dropped(s, "SINK")
    if name not in rt.catalog.sinks and if_exists:
        return
    sink = rt.catalog.sinks.get(name)
    rt.commit_catalog(rt.catalog.without_sink(name))
    if sink is not None:
        rt.sinks.forget(sink)
    rt.sinks.clear_pending(name)


def show(rt: Runtime) -> pa.Table:
    """``SHOW SINKS``: ``name``, ``source``, ``connector``, ``type``, ``location``, ``epoch`` (the
    last epoch its target holds: as this process wrote it, else as the target's own commit and the
    root record it — after a restart and in a read-only open too), ``lag`` (committed epochs it has
    not written), ``error`` (why its last write failed: it is retried after every epoch; or why its
    target could not be read), ``sql``."""
    sinks = sorted(rt.catalog.sinks.values(), key=lambda k: k.name)
    last = rt.epoch
    done, errors = [], []
    for k in sinks:
        error = rt.sinks.errors.get(k.name)
        try:
            done.append(rt.sinks.progress(k))
        except Exception as exc:  # noqa: BLE001 - the target's own error, shown on its row
            done.append(None)
            error = error or f"cannot read the target: {type(exc).__name__}: {exc}"
        errors.append(error)
    return pa.table({
        "name": pa.array([k.name for k in sinks], pa.string()),
        "source": pa.array([k.source for k in sinks], pa.string()),
        "connector": pa.array([k.connector for k in sinks], pa.string()),
        "type": pa.array([k.kind for k in sinks], pa.string()),
        "location": pa.array([k.option("location") or k.option("topic") or
                              f"{k.option('database.name')}.{k.option('table.name')}" for k in sinks], pa.string()),
        "epoch": pa.array(done, pa.int64()),
        "lag": pa.array([None if d is None else last - d for d in done], pa.int64()),
        "error": pa.array(errors, pa.string()),
        "sql": pa.array([k.sql for k in sinks], pa.string()),
    })
