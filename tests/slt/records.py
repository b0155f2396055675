"""Parse a sqllogictest file into records (the format: ``tests/slt/__init__.py``).

    >>> [type(r).__name__ for r in parse_text("statement ok\\nCREATE TABLE t (a INT)\\n\\n"
    ...                                       "query I rowsort\\nSELECT a FROM t\\n----\\n1\\n")]
    ['Statement', 'Query']

Parsing knows nothing of engines: a record carries its conditions (``skipif``/``onlyif``) and the
runner decides where it runs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Condition", "Record", "Statement", "Query", "Load", "Halt", "HashThreshold", "ParseError", "parse",
           "parse_text"]

SORT_MODES = ("nosort", "rowsort", "valuesort")
_HASHED = re.compile(r"^(\d+) values hashing to ([0-9a-f]{32})$")


class ParseError(ValueError):
    """A malformed file; the message starts with ``file:line``."""


@dataclass(frozen=True)
class Condition:
    """``skipif ENGINE`` (``skip=True``) or ``onlyif ENGINE``."""

    skip: bool
    engine: str

    def allows(self, engine: str) -> bool:
        return (self.engine != engine) if self.skip else (self.engine == engine)


@dataclass(frozen=True)
class Record:
    path: str
    line: int  # of the record's first line (its first condition, if any)
    conditions: tuple[Condition, ...] = field(default=(), kw_only=True)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def runs_on(self, engine: str) -> bool:
        return all(c.allows(engine) for c in self.conditions)


@dataclass(frozen=True)
class Statement(Record):
    """``statement ok`` / ``statement error [regex]`` (also ``query error [regex]``): SQL that must
    succeed, or fail with a message the regex finds (``re.search``; none: any error)."""

    sql: str
    error: bool = False
    pattern: str | None = None


@dataclass(frozen=True)
class Query(Record):
    """``query TYPES [SORTMODE] [label]``, SQL, ``----``, the expected values."""

    sql: str
    types: str  # one letter per column: I integer, R real (3 decimals), T text
    sort: str  # nosort | rowsort | valuesort
    expected: tuple[str, ...]  # the lines after ``----`` (possibly one "N values hashing to H" line)
    results_line: int  # the line of ``----`` (completion rewrites the lines after it)

    @property
    def hashed(self) -> tuple[int, str] | None:
        """``(count, md5)`` when the expected block is ``N values hashing to H``."""
        m = _HASHED.match(self.expected[0]) if len(self.expected) == 1 else None
        return (int(m.group(1)), m.group(2)) if m else None


@dataclass(frozen=True)
class Load(Record):
    """``load nexmark FIRST COUNT [seed S] [rate R]``: insert Nexmark's events ``[FIRST, FIRST +
    COUNT)`` (``millpond.nexmark.generate``) into the tables ``person``, ``auction``, ``bid``."""

    first: int
    count: int
    seed: int = 0
    rate: int = 10_000


@dataclass(frozen=True)
class HashThreshold(Record):
    """``hash-threshold N``: results of more than N values are written hashed. Checking accepts
    either form whatever the threshold; completion (``tests.slt.complete``) writes by it."""

    values: int


@dataclass(frozen=True)
class Halt(Record):
    """``halt``: stop running the file here (on the engines its conditions allow)."""


def parse(path: str | Path) -> list[Record]:
    """The records of a file, each named ``path:line`` (``path`` relative to the working folder)."""
    path = Path(path)
    return parse_text(path.read_text(), name=os.path.relpath(path))


def parse_text(text: str, *, name: str = "<text>") -> list[Record]:
    lines = text.splitlines()
    records: list[Record] = []
    k = 0

    def fail(line: int, why: str) -> ParseError:
        return ParseError(f"{name}:{line}: {why}")

    def block(start: int) -> tuple[list[str], int]:
        """Lines from ``start`` up to a blank line (comments dropped), and the index after them."""
        out, j = [], start
        while j < len(lines) and lines[j].strip():
            if not lines[j].startswith("#"):
                out.append(lines[j])
            j += 1
        return out, j

    while k < len(lines):
        stripped = lines[k].strip()
        if not stripped or stripped.startswith("#"):
            k += 1
            continue
        first = k + 1
        conditions = []
        while lines[k].split()[0] in ("skipif", "onlyif"):
            words = lines[k].split()
            if len(words) < 2:
                raise fail(k + 1, f"{words[0]} needs an engine name")
            conditions.append(Condition(words[0] == "skipif", words[1]))
            k += 1
            if k == len(lines) or not lines[k].strip():
                raise fail(k, "a condition must be followed by a record")
        words = lines[k].split()
        head = lines[k]
        common = {"conditions": tuple(conditions)}
        if words[0] == "hash-threshold":
            if len(words) != 2 or not words[1].isdigit():
                raise fail(k + 1, f"expected 'hash-threshold N', got {head!r}")
            records.append(HashThreshold(name, first, int(words[1]), **common))
            k += 1
        elif words[0] == "halt":
            records.append(Halt(name, first, **common))
            k += 1
        elif words[0] == "statement" or (words[0] == "query" and words[1:2] == ["error"]):
            if words[1:2] not in (["ok"], ["error"]):
                raise fail(k + 1, f"expected 'statement ok' or 'statement error [regex]', got {head!r}")
            error = words[1] == "error"
            pattern = head.split(None, 2)[2].strip() if error and len(words) > 2 else None
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise fail(k + 1, f"bad error regex {pattern!r}: {exc}") from None
            sql, k = block(k + 1)
            if not sql:
                raise fail(first, "a statement without SQL")
            if "----" in sql:
                raise fail(first, "'----' in a statement (expected results belong to a query)")
            records.append(Statement(name, first, "\n".join(sql), error=error, pattern=pattern, **common))
        elif words[0] == "query":
            if len(words) < 2 or not re.fullmatch(r"[ITR]+", words[1]):
                raise fail(k + 1, f"expected 'query TYPES [nosort|rowsort|valuesort]' (TYPES of I, T, R), got {head!r}")
            sort = words[2] if len(words) > 2 else "nosort"
            if sort not in SORT_MODES:
                raise fail(k + 1, f"unknown sort mode {sort!r} (one of {', '.join(SORT_MODES)})")
            body, k = block(k + 1)
            if "----" not in body:
                raise fail(first, "a query without '----' and its expected values")
            cut = body.index("----")
            sql, expected = body[:cut], body[cut + 1:]
            if not sql:
                raise fail(first, "a query without SQL")
            dashes = next(j for j in range(first - 1, k) if lines[j] == "----") + 1
            records.append(Query(name, first, "\n".join(sql), words[1], sort, tuple(expected), dashes, **common))
        elif words[0] == "load":
            m = re.fullmatch(r"load nexmark (\d+) (\d+)((?: (?:seed|rate) \d+)*)", " ".join(words))
            if not m:
                raise fail(k + 1, f"expected 'load nexmark FIRST COUNT [seed S] [rate R]', got {head!r}")
            options = dict(re.findall(r"(seed|rate) (\d+)", m.group(3)))
            records.append(Load(name, first, int(m.group(1)), int(m.group(2)), int(options.get("seed", 0)),
                                int(options.get("rate", 10_000)), **common))
            k += 1
        else:
            raise fail(k + 1, f"unknown record {head!r}")
    return records
