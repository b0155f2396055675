"""Run a sqllogictest file's records on engines and say where they differ from the file.

:func:`run` runs every record, in order, on every engine its conditions allow, and returns the
failures (it goes on after one, as sqllogictest does). A failure names the file and line, the
engine, the SQL, and the expected block beside the engine's answer in the file's own format.
:func:`complete` is sqllogictest's completion mode: it rewrites a file's expected blocks with an
engine's answers (``python -m tests.slt.complete``).
"""

from __future__ import annotations

import difflib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from tests.slt.engines import Engine, EngineError
from tests.slt.records import Halt, HashThreshold, Load, Query, Record, Statement, parse
from tests.slt.values import arrange, values_hash

__all__ = ["Failure", "Outcome", "run", "check_query", "complete"]


@dataclass(frozen=True)
class Failure:
    record: Record
    engine: str
    message: str

    def __str__(self) -> str:
        sql = getattr(self.record, "sql", None)
        shown = "\n".join("    " + line for line in sql.splitlines()) + "\n" if sql else ""
        return f"{self.record.where}: on {self.engine}: {self.message}\n{shown}"


@dataclass
class Outcome:
    failures: list[Failure] = field(default_factory=list)
    ran: dict[str, int] = field(default_factory=dict)  # engine -> records it ran
    queries: dict[str, int] = field(default_factory=dict)  # engine -> query results it checked
    seconds: dict[tuple[str, str], float] = field(default_factory=dict)  # (record's place, engine) -> time

    def summary(self, *, slowest: int = 3) -> str:
        counts = ", ".join(f"{name}: {self.ran[name]} records, {self.queries.get(name, 0)} results checked"
                           for name in self.ran)
        top = sorted(self.seconds.items(), key=lambda item: -item[1])[:slowest]
        return counts + "; slowest: " + ", ".join(f"{where} on {engine} {t:.1f} s" for (where, engine), t in top)


def _normalize(line: str) -> str:
    return " ".join(line.split())


def _lines(rows: list[list[str]]) -> list[str]:
    return [" ".join(row) for row in rows]


def check_query(record: Query, rows: list[list[str | None]], columns: int | None) -> str | None:
    """Why ``rows`` (PostgreSQL's text of each value) is not the record's expected block, or None."""
    if columns is not None and columns != len(record.types):
        return f"{columns} columns, the record's types {record.types!r} say {len(record.types)}"
    got = arrange(rows, record.types, record.sort)
    values = sum(len(r) for r in got)
    if record.hashed:
        count, digest = record.hashed
        if (values, values_hash(got)) == (count, digest):
            return None
        return f"expected {count} values hashing to {digest}, got {values} values hashing to {values_hash(got)}"
    expected = [_normalize(line) for line in record.expected]
    if [_normalize(line) for line in _lines(got)] == expected:
        return None
    flat = [v for r in got for v in r]
    if len(record.types) > 1 and len(expected) == len(flat) and [_normalize(v) for v in flat] == expected:
        return None  # the classic layout: one value per line
    diff = "\n".join(difflib.unified_diff(expected, [_normalize(line) for line in _lines(got)], "expected", "got",
                                          lineterm="", n=2))
    return (f"wrong result ({len(got)} rows)\n  expected:\n" + "".join(f"    {line}\n" for line in record.expected)
            + "  got:\n" + "".join(f"    {line}\n" for line in _lines(got)) + "  diff:\n"
            + "".join(f"    {line}\n" for line in diff.splitlines()[2:]))


def _one(record: Record, engine: Engine) -> str | None:
    """Run ``record`` on ``engine``; why it failed, or None."""
    if isinstance(record, HashThreshold):
        return None
    if isinstance(record, Load):
        try:
            engine.load(record)
        except EngineError as exc:
            return f"load failed: {exc}"
        return None
    if isinstance(record, Statement):
        try:
            if not engine.statement(record.sql):
                return None  # nothing to run on this engine (FLUSH, SHOW… on PostgreSQL)
        except EngineError as exc:
            if not record.error:
                return f"statement failed: {exc}"
            if record.pattern and engine.checks_messages and not re.search(record.pattern, str(exc)):
                return f"the error does not match /{record.pattern}/: {exc}"
            return None
        return f"statement succeeded, expected an error{f' matching /{record.pattern}/' if record.pattern else ''}" \
            if record.error else None
    assert isinstance(record, Query)
    try:
        answer = engine.query(record.sql)
    except EngineError as exc:
        return f"query failed: {exc}"
    return None if answer is None else check_query(record, answer.rows, answer.columns)


def run(records: Sequence[Record], engines: Sequence[Engine]) -> Outcome:
    """Run ``records`` in order on each engine their conditions allow (until a ``halt``)."""
    outcome = Outcome(ran={e.name: 0 for e in engines})
    halted: set[str] = set()
    for record in records:
        for engine in engines:
            if engine.name in halted or not record.runs_on(engine.name):
                continue
            if isinstance(record, Halt):
                halted.add(engine.name)
                continue
            outcome.ran[engine.name] += 1
            if isinstance(record, Query):
                outcome.queries[engine.name] = outcome.queries.get(engine.name, 0) + 1
            started = time.monotonic()
            why = _one(record, engine)
            outcome.seconds[record.where, engine.name] = time.monotonic() - started
            if why:
                outcome.failures.append(Failure(record, engine.name, why))
    return outcome


def complete(path: str | Path, engine: Engine, *, only_empty: bool = False) -> list[str]:
    """Rewrite the expected block of every query of ``path`` that runs on ``engine`` with its
    answer (rows one per line, values separated by a space; hashed above the file's
    ``hash-threshold``; with ``only_empty``, only blocks that have no line yet); the other records
    run as usual. Returns the problems met (statements and queries that failed)."""
    path = Path(path)
    lines = path.read_text().splitlines()
    replacements: dict[int, list[str]] = {}  # the line of '----' -> new expected lines
    problems = []
    threshold = 0
    for record in parse(path):
        if not record.runs_on(engine.name):
            continue
        if isinstance(record, Halt):
            break
        if isinstance(record, HashThreshold):
            threshold = record.values
        if isinstance(record, Query):
            try:
                answer = engine.query(record.sql)
            except EngineError as exc:
                problems.append(f"{record.where}: query failed: {exc}")
                continue
            if answer is not None and not (only_empty and record.expected):
                got = arrange(answer.rows, record.types, record.sort)
                values = sum(len(r) for r in got)
                replacements[record.results_line] = [f"{values} values hashing to {values_hash(got)}"] \
                    if threshold and values > threshold else _lines(got)
        else:
            why = _one(record, engine)
            if why:
                problems.append(f"{record.where}: {why}")
    out, k = [], 0
    while k < len(lines):
        out.append(lines[k])
        k += 1
        if k in replacements:  # lines[k - 1] is the '----' of a completed query
            out += replacements[k]
            while k < len(lines) and lines[k].strip():
                k += 1
    path.write_text("\n".join(out) + "\n")
    return problems
