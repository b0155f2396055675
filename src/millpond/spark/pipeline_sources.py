"""Python datasets of a Spark Declarative Pipelines project. ``pyspark.pipelines``' own decorators
register the functions, into a registry of ours (:class:`Collected`):

- ``@dp.table``, ``@dp.append_flow`` functions that return a streaming DataFrame: each runs on
  Spark as a stream into a table of the root, through the log's Spark sink (exactly once per
  micro-batch: its producer is the checkpoint's batch id), up to what is available now
  (:func:`stream_into`);
- ``@dp.materialized_view``, ``@dp.temporary_view`` functions that return a batch DataFrame: run
  on Spark on every pipeline run, as SDP runs them, their rows replacing the table's in one epoch
  (:func:`recompute_into`): the SQL views that read the table stay incremental.
"""

from __future__ import annotations

import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
from pyspark.pipelines.flow import AutoCdcFlow, Flow
from pyspark.pipelines.graph_element_registry import GraphElementRegistry, graph_element_registration_context
from pyspark.pipelines.output import MaterializedView, Output, StreamingTable, TemporaryView
from pyspark.sql.pandas.types import to_arrow_schema

__all__ = ["Source", "collect", "names", "run_files", "stream_into", "recompute_into"]


@dataclass
class Source:
    """A table a Python dataset writes: its flows' functions, where it was defined, and whether it
    is recomputed on every run (a materialized or temporary view) or streamed into."""

    name: str
    where: str
    flows: list[tuple[str, Callable[[], Any]]] = field(default_factory=list)
    recomputed: bool = False


class Collected(GraphElementRegistry):
    def __init__(self) -> None:
        self.outputs: list[Output] = []
        self.flows: list[Flow] = []
        self.unsupported: list[str] = []

    def register_output(self, output: Output) -> None:
        self.outputs.append(output)

    def register_flow(self, flow: Flow) -> None:
        self.flows.append(flow)

    def register_auto_cdc_flow(self, flow: AutoCdcFlow) -> None:
        self.unsupported.append(f"Auto CDC flow {flow.name!r}")

    def register_sql(self, sql_text: str, file_path: Path) -> None:
        self.unsupported.append(f"SQL registered from Python ({file_path})")


def names(path: Path) -> set[str]:
    """The datasets a Python file defines, read from its text without running it (``dry-run``):
    functions decorated ``@dp.table`` / ``@dp.materialized_view`` / ``@dp.temporary_view`` (their
    ``name=`` or the function's), and ``dp.create_streaming_table("t")``."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                call = dec if isinstance(dec, ast.Call) else None
                attr = (call.func if call else dec)
                if isinstance(attr, ast.Attribute) and attr.attr in ("table", "materialized_view", "temporary_view"):
                    named = [k.value.value for k in (call.keywords if call else [])
                             if k.arg == "name" and isinstance(k.value, ast.Constant)]
                    found.add(str(named[0] if named else node.name).split(".")[-1].lower())
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "create_streaming_table" and node.args and isinstance(node.args[0], ast.Constant)):
            found.add(str(node.args[0].value).split(".")[-1].lower())
    return found


def run_files(db: Any, folder: Path, paths: list[Path], checkpoints: Path, report: list[str], unsupported: list[str],
              failed: dict[str, str], *, configuration: dict[str, str]) -> None:
    """Each Python file's datasets run into tables of the root, each reported; what a file defines
    that is not run is added to ``unsupported``, a dataset that fails (alone) to ``failed``. The
    spec's ``configuration`` is set on the session the functions find active (``spark.conf.get``),
    for the run, then the session's own values are restored (it may be the user's)."""
    spark = db.spark
    before = {k: spark.conf.get(k, None) for k in configuration}
    for k, v in configuration.items():
        spark.conf.set(k, v)
    try:
        _run_files(db, folder, paths, checkpoints, report, unsupported, failed)
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _run_files(db: Any, folder: Path, paths: list[Path], checkpoints: Path, report: list[str], unsupported: list[str],
               failed: dict[str, str]) -> None:
    for path in paths:
        rel = str(path.relative_to(folder))
        try:
            sources, skipped = collect(path, rel, db.spark)
        except Exception as exc:  # noqa: BLE001 - the user's module failed to load: said, the rest runs
            unsupported.append(f"{rel}: could not be loaded: {type(exc).__name__}: {exc}")
            continue
        unsupported.extend(skipped)
        for source in sources.values():
            try:
                n = recompute_into(db, source) if source.recomputed else stream_into(db, source, checkpoints)
            except Exception as exc:  # noqa: BLE001 - the user's function or its stream: this table fails alone
                why = f"{source.where}: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
                if "TABLE_OR_VIEW_NOT_FOUND" in why:
                    why += (" (a Python dataset reads what is outside the pipeline and the root -- files, Spark's "
                            "catalog; reading the pipeline's own datasets from Python is not supported yet)")
                failed[source.name] = why
                continue
            if not source.recomputed:
                flows = len(source.flows)
                report.append(f"  streamed into {source.name} ({source.where}, {flows} flow{'s' * (flows != 1)})")
            else:
                report.append(f"  recomputed {source.name} ({source.where}, "
                              + ("unchanged)" if n is None else f"{n} row{'s' * (n != 1)})"))


def collect(path: Path, rel: str, spark: Any) -> tuple[dict[str, Source], list[str]]:
    """The tables a Python file defines (with their flows), and what it defines that millpond does
    not run (named). The file runs with ``spark`` among its globals, as SDP runs it."""
    registry = Collected()
    with graph_element_registration_context(registry):
        runpy.run_path(str(path), init_globals={"spark": spark}, run_name=f"millpond_pipeline_{path.stem}")
    sources: dict[str, Source] = {}
    unsupported = [f"{rel}: {u}" for u in registry.unsupported]
    for out in registry.outputs:
        name = out.name.split(".")[-1].lower()
        if isinstance(out, (MaterializedView, TemporaryView)):
            sources[name] = Source(name, rel, recomputed=True)
        elif isinstance(out, StreamingTable):
            sources[name] = Source(name, rel)
    for flow in registry.flows:
        target = flow.target.split(".")[-1].lower()
        if target in sources:
            sources[target].flows.append((flow.name, flow.func))
    return sources, unsupported


def stream_into(db: Any, source: Source, checkpoints: Path) -> None:
    """Run ``source``'s flows as streams into its table until they hold what is available now
    (the table is created from the first flow's schema if it does not exist)."""
    from millpond.catalog.types import sql_type

    for flow_name, func in source.flows:
        df = func()
        if not df.isStreaming:
            raise ValueError(f"flow {flow_name!r} of {source.name!r} returns a batch DataFrame: a streaming table's "
                             "flow reads a stream (spark.readStream...)")
        if source.name not in db.catalog.tables:
            schema: pa.Schema = to_arrow_schema(df.schema)
            cols = ", ".join(f'"{f.name}" {sql_type(f.type)}' for f in schema)
            db.sql(f'CREATE TABLE "{source.name}" ({cols}) APPEND ONLY')
        query = (df.writeStream.format("millpond").option("root", db.runtime.store.root)
                 .option("channel", source.name).option("checkpointLocation", str(checkpoints / f"{source.name}-{flow_name}"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()


def recompute_into(db: Any, source: Source) -> int | None:
    """Run a materialized view's function on Spark and make its rows the table's, in one epoch
    (created from the rows' schema if it does not exist); the number of rows, None when they are
    the table's already (no change, no epoch)."""
    from millpond.catalog.types import sql_type

    (_, func), = source.flows  # a materialized view has the one flow its decorator made
    df = func()
    if df.isStreaming:
        raise ValueError(f"{source.name!r} returns a streaming DataFrame: a materialized view's function returns "
                         "a batch one (spark.read...; a stream is a @dp.table)")
    rows: pa.Table = df.toArrow()
    cols = ", ".join(f'"{f.name}" {sql_type(f.type)}' for f in rows.schema)
    if source.name not in db.catalog.tables:
        db.sql(f'CREATE TABLE "{source.name}" ({cols})')
    else:
        have = db.catalog.tables[source.name].schema
        if have.names != rows.schema.names:
            raise ValueError(f"{source.name!r} now returns columns {rows.schema.names}, its table has {have.names}: "
                             "drop the table (and the views reading it) to change them")
        if _same(db.read(source.name), rows):
            return None
        db.sql(f'DELETE FROM "{source.name}"')
    db.insert(source.name, rows)
    return rows.num_rows


def _same(old: pa.Table, new: pa.Table) -> bool:
    """Whether two tables hold the same rows, in any order (False when they cannot be compared)."""
    import polars as pl

    if old.num_rows != new.num_rows:
        return False
    try:
        a, b = pl.from_arrow(old), pl.from_arrow(new.cast(old.schema))
        return a.sort(a.columns, nulls_last=True).equals(b.sort(b.columns, nulls_last=True))
    except Exception:  # noqa: BLE001 - nested or odd types: taken as changed (replaced)
        return False
