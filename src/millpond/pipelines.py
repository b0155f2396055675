"""Spark Declarative Pipelines projects, maintained incrementally: ``millpond pipeline run``.

An SDP project is a ``spark-pipeline.yml`` (``name``, ``libraries``: globs of files, ``storage``,
``configuration``) and SQL files of datasets. open-source Spark recomputes every materialized
view on every ``spark-pipelines run``; here each dataset becomes a millpond view, kept
incrementally, and a run commits epochs only for what is new:

- ``CREATE [OR REFRESH] MATERIALIZED VIEW v AS SELECT …`` — a view;
- ``CREATE [OR REFRESH] STREAMING TABLE t AS SELECT … FROM STREAM(src)`` — a view over ``src``
  (for a source that only appends, the same rows as SDP's streaming table);
- ``CREATE STREAMING TABLE t`` with ``CREATE FLOW f AS INSERT INTO t BY NAME SELECT …`` — a view,
  the ``UNION ALL`` of its flows (columns matched by name);
- ``CREATE [TEMPORARY] VIEW v AS SELECT …`` — a view too (millpond keeps it; SDP would inline a
  temporary one, and refuses a persisted view that reads a temporary one).

The queries are Spark's SQL, translated to PostgreSQL's (``_from_spark``). ``STREAM(x)`` reads
``x``: another dataset of the project or a millpond table of the root. A
dataset defined twice, a cycle, a flow into a materialized view and a read of a dataset that
exists nowhere are refused before anything is created, as SDP refuses them (``dry-run`` stops
there). A run creates what is new, recreates a dataset whose SQL changed (and the datasets that
read it), drops the datasets the project no longer defines, then flushes.

Python files run first (``spark/pipeline_sources.py``): ``@dp.table`` / ``@dp.append_flow``
functions over ``spark.readStream`` as streams into tables of the root, ``@dp.materialized_view``
functions recomputed into tables (as SDP recomputes them); what else they define is named as not
supported yet, and the rest of the project still runs. The spec's ``configuration`` is what
SDP makes of it: ``${key}`` in the SQL files, ``spark.conf.get(key)`` in the Python ones.
"""

from __future__ import annotations

import glob
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from millpond.errors import MillpondError, SqlError

if TYPE_CHECKING:
    from millpond.api import Database

__all__ = ["Dataset", "Project", "find_spec", "load", "check", "run", "init", "PipelineError"]


class PipelineError(MillpondError):
    """A project that cannot run, with the file and the dataset it concerns."""


@dataclass
class Dataset:
    name: str
    kind: str  # materialized view, streaming table, temporary view
    query: str | None  # None: a streaming table its flows write
    where: str  # file:line
    flows: list[tuple[str, str, str]] = field(default_factory=list)  # (name, query, where)
    declared: list[tuple[str, str | None]] = field(default_factory=list)  # its declared columns (name, type)

    def sql(self) -> str:
        """The view's SELECT: its query, or the UNION ALL of its flows' (by name); as its declared
        columns, where it declares them (each cast to its declared type)."""
        if not self.declared:
            return self._query()
        cols = ", ".join(f"CAST(q.{_q(n)} AS {t}) AS {_q(n)}" if t else f"q.{_q(n)}" for n, t in self.declared)
        return f"SELECT {cols} FROM ({self._query()}) AS q"

    def _query(self) -> str:
        if self.query is not None:
            return self.query
        if not self.flows:
            raise PipelineError(f"{self.where}: streaming table {self.name!r} has no query and no flow writes it")
        first = _outputs(self.flows[0][1])
        parts = [self.flows[0][1]] + [f"SELECT {', '.join(_q(c) for c in first)} FROM ({q}) AS {_q(n)}"
                                      for n, q, _ in self.flows[1:]]
        return " UNION ALL ".join(f"({p})" if len(parts) > 1 else p for p in parts)


@dataclass(frozen=True)
class Files:
    """A folder of files a query reads (``parquet.`path```, ``read_files('path', format => 'csv')``):
    a files table of the root, its columns those of the folder's first file; or a Delta table
    (``delta.`path```, format ``delta``): a Delta source table, its columns the table's."""

    name: str
    path: str
    format: str


@dataclass
class Project:
    name: str
    folder: Path
    datasets: dict[str, Dataset]
    unsupported: list[str]  # what the project holds that millpond does not run yet, said by name
    files: dict[str, Files] = field(default_factory=dict)
    python: list[Path] = field(default_factory=list)  # Python files: their datasets are read at run (with Spark)
    configuration: dict[str, str] = field(default_factory=dict)  # the spec's: ${key} in SQL, spark.conf in Python

    def order(self, tables: set[str]) -> list[Dataset]:
        """The datasets in dependency order; a PipelineError for a cycle or an unknown input."""
        deps = {n: _reads(d.sql()) for n, d in self.datasets.items()}
        for n, reads in deps.items():
            unknown = sorted(r for r in reads if r not in self.datasets and r not in tables and r not in self.files)
            if unknown:
                raise PipelineError(f"{self.datasets[n].where}: dataset {n!r} reads {', '.join(map(repr, unknown))}, "
                                    "which is neither a dataset of the pipeline nor a table of the root")
            temporary = sorted(r for r in reads if self.datasets.get(r) and self.datasets[r].kind == "temporary view")
            if self.datasets[n].kind == "view" and temporary:
                raise PipelineError(f"{self.datasets[n].where}: view {n!r} reads the temporary view {temporary[0]!r}: a "
                                    "persisted view cannot read a temporary one (make it persisted, or the view "
                                    "temporary)")
        done: list[Dataset] = []
        state: dict[str, int] = {}

        def visit(n: str, path: list[str]) -> None:
            if state.get(n) == 2:
                return
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n]
                raise PipelineError(f"the pipeline's datasets form a cycle: {' -> '.join(cycle)}")
            state[n] = 1
            for r in sorted(deps[n]):
                if r in self.datasets:
                    visit(r, [*path, n])
            state[n] = 2
            done.append(self.datasets[n])
        for n in sorted(self.datasets):
            visit(n, [])
        return done


_HEAD = re.compile(
    r"CREATE\s+(?:OR\s+(?:REFRESH|REPLACE)\s+)?(?P<kind>MATERIALIZED\s+VIEW|STREAMING\s+TABLE|TEMP(?:ORARY)?\s+VIEW|"
    r"VIEW|FLOW)\s+(?P<name>[\w.`\"]+)\s*(?P<rest>.*)\Z", re.I | re.S)
_INTO = re.compile(r"AS\s+INSERT\s+INTO\s+(?P<target>[\w.`\"]+)\s+(?:BY\s+NAME\s+)?(?P<query>.*)\Z", re.I | re.S)
_FILES = re.compile(r"\b(parquet|csv|json|delta)\.`([^`]+)`|\bread_files\(\s*'([^']+)'\s*(?:,\s*format\s*=>\s*'(\w+)')?\s*\)",
                    re.I)
_AS_QUERY = re.compile(r"\bAS\s+(\(?\s*(?:SELECT|WITH|VALUES|TABLE)\b.*)\Z", re.I | re.S)
_STREAM = re.compile(r"\bSTREAM\s*\(\s*([\w.`\"]+)\s*\)|\bSTREAM\s+([\w`\"][\w.`\"]*)", re.I)


def _name(raw: str) -> str:
    return raw.split(".")[-1].strip('`"').lower()


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _body(rest: str, where: str) -> str | None:
    """A definition's query after its optional column list, comment and properties, in
    PostgreSQL's SQL; None if none."""
    m = _AS_QUERY.search(rest)
    if m is None:
        if re.search(r"\bAS\b", rest, re.I):
            raise PipelineError(f"{where}: the query after AS is not a SELECT")
        return None
    return _from_spark(_STREAM.sub(lambda s: s.group(1) or s.group(2), m.group(1)).strip(), where)


def _from_spark(query: str, where: str) -> str:
    from millpond.sql.spark_dialect import from_spark

    try:
        return from_spark(query)
    except SqlError as exc:
        raise PipelineError(f"{where}: {exc}") from None


def _declared(head: str, where: str) -> list[tuple[str, str | None]]:
    from millpond.sql.spark_dialect import declared

    try:
        return declared(head)
    except SqlError as exc:
        raise PipelineError(f"{where}: {exc}") from None


def _reads(sql: str) -> set[str]:
    tree = sqlglot.parse_one(sql, dialect="postgres")
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    return {t.name.lower() for t in tree.find_all(exp.Table) if t.name and t.name.lower() not in ctes}


def _outputs(sql: str) -> list[str]:
    tree = sqlglot.parse_one(sql, dialect="postgres")
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    names = [s.alias_or_name for s in select.expressions]
    if any(n in ("", "*") for n in names):
        raise PipelineError(f"a flow's SELECT must name its columns (BY NAME): {sql[:80]!r}")
    return names


_VARIABLE = re.compile(r"\$\{(?:(spark|sparkconf|hivevar|hiveconf|env|system):)?([^}:]+)\}")


def _substitute(text: str, configuration: dict[str, str]) -> str:
    """``${key}`` (and ``${spark:key}``, ``${hiveconf:key}``…, ``${env:NAME}``) replaced as Spark's
    variable substitution replaces them in SDP's SQL files; a name nothing defines stays as written."""
    import os

    def value(m: re.Match) -> str:
        if m.group(1) == "env":
            return os.environ.get(m.group(2), m.group(0))
        return m.group(0) if m.group(1) == "system" else configuration.get(m.group(2), m.group(0))
    return _VARIABLE.sub(value, text)


def _statements(text: str) -> list[tuple[str, int]]:
    """A SQL file's statements with the line each starts on (split at top-level semicolons)."""
    from millpond.sql.statements import tokens

    bounds, start = [], 0
    for tok in tokens(text):
        if tok.text == ";":
            bounds.append((start, tok.start))
            start = tok.end + 1
    bounds.append((start, len(text)))
    out = []
    for a, b in bounds:
        chunk = re.sub(r"\A(?:\s*--[^\n]*\n|\s*/\*.*?\*/)*", lambda m: "\n" * m.group(0).count("\n"),
                       text[a:b], flags=re.S)  # leading comments (their lines kept, for the line number)
        if chunk.strip():
            first = a + len(chunk) - len(chunk.lstrip())
            out.append((chunk.strip(), text[:first].count("\n") + 1))
    return out


def _sources(sql: str, folder: Path, files: dict[str, Files], where: str) -> str:
    """``sql`` with each folder it reads (``parquet.`p```, ``read_files('p', format => 'f')``) as
    the files table that takes it in, and each Delta table (``delta.`p```, ``STREAM(delta.`p`)``)
    as the Delta source table that follows its versions."""
    import hashlib

    def table(m: re.Match) -> str:
        fmt = (m.group(1) or m.group(4) or "").lower()
        path = m.group(2) or m.group(3)
        if fmt not in ("parquet", "csv", "json", "delta"):
            raise PipelineError(f"{where}: read_files needs format => 'parquet', 'csv' or 'json'")
        path = path if "://" in path else str((folder / path).resolve())
        name = ("delta_" if fmt == "delta" else "files_") + hashlib.sha256(f"{fmt}:{path}".encode()).hexdigest()[:10]
        files[name] = Files(name, path, fmt)
        return name
    return _FILES.sub(table, sql)


SPEC_NAMES = ("spark-pipeline.yaml", "spark-pipeline.yml")


def find_spec(start: str | Path = ".") -> Path:
    """The spec SDP would find: ``spark-pipeline.yaml`` or ``.yml`` in ``start`` or its nearest
    ancestor holding one (both in one folder is refused, as SDP refuses it)."""
    folder = Path(start).resolve()
    while True:
        found = [folder / n for n in SPEC_NAMES if (folder / n).is_file()]
        if len(found) > 1:
            raise PipelineError(f"{folder}: both spark-pipeline.yaml and spark-pipeline.yml: keep one")
        if found:
            return found[0]
        if folder.parent == folder:
            raise PipelineError(f"no spark-pipeline.yaml or spark-pipeline.yml in {Path(start).resolve()} or a folder "
                                "above it (give --spec)")
        folder = folder.parent


def load(spec: str | Path) -> Project:
    """The project of a ``spark-pipeline.yml``: its SQL files' datasets and flows, checked."""
    import yaml

    spec = Path(spec)
    try:
        conf = yaml.safe_load(spec.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise PipelineError(f"{spec}: cannot read the pipeline spec: {exc}") from None
    folder = spec.parent
    configuration = conf.get("configuration") or {}
    if not isinstance(configuration, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in configuration.items()):
        raise PipelineError(f"{spec}: configuration is a mapping of strings to strings (quote numbers and "
                            f"booleans), got {configuration!r}")
    files: list[Path] = []
    for lib in conf.get("libraries") or [{"glob": {"include": "transformations/**"}}]:
        pattern = (lib.get("glob") or {}).get("include") if isinstance(lib, dict) else None
        if not pattern:
            raise PipelineError(f"{spec}: a library is {{glob: {{include: <pattern>}}}}, got {lib!r}")
        pattern = pattern + "/**" if not any(c in pattern for c in "*?[") and (folder / pattern).is_dir() else pattern
        files += [Path(p) for p in sorted(glob.glob(str(folder / pattern), recursive=True)) if Path(p).is_file()]
    datasets: dict[str, Dataset] = {}
    flows: list[tuple[str, str, str, str]] = []
    unsupported: list[str] = []
    files_read: dict[str, Files] = {}
    python: list[Path] = []
    for f in dict.fromkeys(files):
        rel = f.relative_to(folder)
        if f.suffix == ".py":
            python.append(f)
            continue
        if f.suffix != ".sql":
            continue
        for stmt, line in _statements(_substitute(f.read_text(), configuration)):
            where = f"{rel}:{line}"
            if re.match(r"SET\b", stmt, re.I):
                continue
            m = _HEAD.match(stmt)
            if m is None:
                raise PipelineError(f"{where}: not a pipeline definition (CREATE MATERIALIZED VIEW, CREATE STREAMING "
                                    f"TABLE, CREATE [TEMPORARY] VIEW or CREATE FLOW): {stmt[:60]!r}")
            kind, name = " ".join(m.group("kind").lower().replace("temp ", "temporary ").split()), _name(m.group("name"))
            if kind == "flow":
                into = _INTO.match(m.group("rest").strip())
                if into is None:
                    raise PipelineError(f"{where}: flow {name!r}: expected AS INSERT INTO <table> BY NAME SELECT …")
                query = _STREAM.sub(lambda s: s.group(1) or s.group(2),
                                    _sources(into.group("query"), folder, files_read, where)).strip()
                flows.append((name, _name(into.group("target")), _from_spark(query, where), where))
                continue
            if name in datasets:
                raise PipelineError(f"{where}: dataset {name!r} is defined twice (first at {datasets[name].where})")
            rest = _sources(m.group("rest"), folder, files_read, where)
            body = _body(rest, where)
            head = rest[:_AS_QUERY.search(rest).start()] if body is not None else rest
            datasets[name] = Dataset(name, kind, body, where, declared=_declared(head, where))
    for name, target, query, where in flows:
        d = datasets.get(target)
        if d is None:
            raise PipelineError(f"{where}: flow {name!r} writes {target!r}, which the pipeline does not define "
                                "(CREATE STREAMING TABLE it)")
        if d.kind != "streaming table":
            raise PipelineError(f"{where}: flow {name!r} writes {target!r}, a {d.kind}: a flow writes a streaming table")
        if d.query is not None:
            raise PipelineError(f"{where}: flow {name!r} writes {target!r}, which has a query of its own")
        d.flows.append((name, query, where))
    return Project(str(conf.get("name") or folder.name), folder, datasets, unsupported, files_read, python,
                   configuration)


def _key(project: Project) -> str:
    return f"pipelines/{re.sub(r'[^A-Za-z0-9_.-]', '_', project.name)}.json"


def check(project: Project, tables: set[str]) -> list[str]:
    """``dry-run``: the project's graph checked against the root's ``tables`` and what the Python
    files define (read from their text); the lines to report."""
    from millpond.spark.pipeline_sources import names

    python = {n: p.relative_to(project.folder) for p in project.python for n in sorted(names(p))}  # name -> file
    ordered = project.order(tables | set(python))
    for d in ordered:
        try:
            sqlglot.parse_one(d.sql(), dialect="postgres")
        except sqlglot.errors.ParseError as exc:
            raise PipelineError(f"{d.where}: dataset {d.name!r}: {str(exc).splitlines()[0]}") from None
    n = len({d.name for d in ordered} | set(python))
    return [f"pipeline {project.name!r}: {n} dataset{'s' * (n != 1)}", *(f"  not run: {u}" for u in project.unsupported),
            *(f"  {name} (Python, {file}): run with Spark" for name, file in python.items()),
            *(f"  {d.name} ({d.kind}, {d.where})" for d in ordered), "dry run: the graph is valid"]


def run(db: "Database", project: Project, full_refresh: "set[str] | bool" = frozenset()) -> list[str]:
    """Bring the root's views to the project's datasets and flush; the lines to report.
    ``full_refresh`` (names, or True for all) drops those SQL datasets first: they are created again
    and their state rebuilt from the log, as SDP's ``--full-refresh`` resets and recomputes them."""
    from millpond.errors import MissingError
    from millpond.spark.pipeline_sources import names, run_files

    report = [f"pipeline {project.name!r}"]
    unsupported = list(project.unsupported)  # and what the Python files hold (the project stays as loaded)
    failed: dict[str, str] = {}  # a dataset that cannot be created or streamed -> why; the others still are
    if project.python:  # streams into tables first (with the spec's configuration): the SQL datasets read them
        run_files(db, project.folder, project.python, project.folder / ".millpond-checkpoints" / project.name,
                  report, unsupported, failed, configuration=project.configuration)
    tables = set(db.catalog.tables)
    ordered = project.order(tables | set(failed))  # a failed Python table's readers fail with it
    n = len({d.name for d in ordered} | {name for p in project.python for name in names(p)})
    report[0] += f": {n} dataset{'s' * (n != 1)}"
    report += [f"  not run: {u}" for u in unsupported]
    store = db.runtime.store
    try:
        owned = set(json.loads(store.get(_key(project))))
    except MissingError:
        owned = set()
    for src in project.files.values():  # the folders and Delta tables read, as source tables (created once)
        if src.name in db.catalog.tables:
            continue
        if src.format == "delta":  # its columns are the Delta table's; each version read as a change
            db.sql(f"CREATE TABLE {src.name} WITH (connector = 'deltalake', location = '{src.path}')")
            report.append(f"  created {src.name} (Delta source table of {src.path})")
            continue
        db.sql(f"CREATE TABLE {src.name} ({_columns(db, src)}) APPEND ONLY WITH (connector = 'files', "
               f"path = '{src.path}', format = '{src.format}')")
        report.append(f"  created {src.name} (files table of {src.path})")
    views = db.catalog.views
    wanted = {d.name: d.sql() for d in ordered}
    clash = sorted(n for n in wanted if n in tables)
    if clash:
        raise PipelineError(f"dataset {clash[0]!r} is also a table of the root: rename one")
    refresh = set(wanted) if full_refresh is True else {n.split(".")[-1].lower() for n in full_refresh}
    unknown = sorted(refresh - set(wanted))
    if unknown:
        raise PipelineError(f"--full-refresh {', '.join(unknown)}: not a SQL dataset of the pipeline (a Python "
                            "streaming table cannot be reset yet)")
    stale = {n for n in owned | set(wanted) if n in views and (n not in wanted or _stored(views[n]) != wanted[n]
                                                                   or n in refresh)}
    while True:  # and every view that reads a stale one (DROP refuses a view others read)
        more = {n for n, v in views.items() if n not in stale and _reads(_stored(v)) & stale}
        if not more:
            break
        stale |= more
    for n in [v for v in reversed(list(views)) if v in stale]:  # readers before what they read
        db.sql(f"DROP MATERIALIZED VIEW IF EXISTS {_q(n)}")
        report.append(f"  dropped {n}{_why(n, views[n], wanted, refresh)}")
    for d in ordered:
        if d.name in db.catalog.views:
            continue
        blocked = sorted(_reads(wanted[d.name]) & set(failed))
        if blocked:
            failed[d.name] = f"{d.where}: reads {', '.join(map(repr, blocked))}, which failed"
            continue
        try:
            db.sql(f"CREATE MATERIALIZED VIEW {_q(d.name)} AS {wanted[d.name]}")
        except MillpondError as exc:  # the error, and the query it is about (SDP's SQL, read as PostgreSQL's)
            failed[d.name] = f"{d.where}: {exc}; read as PostgreSQL's SQL: {wanted[d.name]}"
            continue
        report.append(f"  created {d.name} ({d.kind})")
    store.put(_key(project), json.dumps(sorted(wanted)).encode())
    epochs = db.flush()
    report.append(f"committed {len(epochs)} epoch{'s' * (len(epochs) != 1)}; last epoch {db.epoch}")
    if failed:
        raise PipelineError("\n".join([*report, *(f"  failed: {n} ({why})" for n, why in failed.items()),
                                        f"{len(failed)} dataset{'s' * (len(failed) != 1)} failed; the others ran"]))
    return report


def _why(name: str, view, wanted: dict[str, str], refresh: set[str]) -> str:  # noqa: ANN001
    if name not in wanted:
        return " (no longer in the pipeline)"
    if _stored(view) != wanted[name]:
        return " (its SQL changed)"
    return " (full refresh)" if name in refresh else " (it reads a dataset dropped)"


def _columns(db: "Database", src: Files) -> str:
    """A files table's columns: those of the folder's first file (as SDP infers them), local or on
    object storage (read with the root's storage options)."""
    from millpond.catalog.types import sql_type

    schema = db.runtime.sources.files.first_schema(src.path, src.format)
    if schema is None:
        raise PipelineError(f"{src.path}: no {src.format} file to read the columns of (SDP infers them from the files)")
    return ", ".join(f"{_q(f.name)} {sql_type(f.type)}" for f in schema)


def _stored(view) -> str:  # noqa: ANN001
    sql = view.sql
    m = re.match(r"\s*CREATE\s+MATERIALIZED\s+VIEW\s+\S+\s+AS\s+(.*)\Z", sql, re.I | re.S)
    return m.group(1).strip() if m else sql


SPEC = """name: {name}
storage: {storage}
libraries:
  - glob:
      include: transformations/**
"""
PYTHON_EXAMPLE = """from pyspark import pipelines as dp
from pyspark.sql import DataFrame


@dp.materialized_view
def example_python_materialized_view() -> DataFrame:
    # a Python dataset: recomputed on Spark on every run, as SDP does
    return spark.range(10)
"""
SQL_EXAMPLE = """-- a SQL dataset: millpond keeps it incrementally (it reads the Python one, and the root's tables)
CREATE MATERIALIZED VIEW example_sql_materialized_view AS
SELECT id FROM example_python_materialized_view
WHERE id % 2 = 0
"""


def init(folder: str | Path, name: str) -> Path:
    """A new project, as ``spark-pipelines init`` writes it (its storage, which is also the
    millpond root ``run`` uses by default, in ``pipeline-storage/``); it runs on both as it is."""
    folder = Path(folder)
    if folder.exists():
        raise PipelineError(f"{folder} exists already: choose another name, or remove it")
    (folder / "transformations").mkdir(parents=True)
    (folder / "pipeline-storage").mkdir()
    storage = f"file://{(folder / 'pipeline-storage').resolve()}"
    (folder / "spark-pipeline.yml").write_text(SPEC.format(name=name, storage=storage))
    (folder / "transformations" / "example_python_materialized_view.py").write_text(PYTHON_EXAMPLE)
    (folder / "transformations" / "example_sql_materialized_view.sql").write_text(SQL_EXAMPLE)
    return folder / "spark-pipeline.yml"
