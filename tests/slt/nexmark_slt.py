"""Writes ``nexmark_before.slt`` and ``nexmark_after.slt``: every query of ``millpond.nexmark.QUERIES``
as a view over a small deterministic batch of events, in both orders — views created before the
data, and after it (backfilled from the log, then kept current through one more load). Each epoch
costs every view a fixed share (test_nexmark.py), so each file has as few epochs as its order needs. Expected values are PostgreSQL's (the views mirrored as plain views, ``TUMBLE``/``HOP``
spelled out), so this needs a PostgreSQL server:

    python -m tests.slt.nexmark_slt

Run it again when ``QUERIES`` or the generator change; review the diff.
"""

from __future__ import annotations

import sys
from pathlib import Path

from millpond.nexmark import DDL, QUERIES
from tests import pg
from tests.slt.engines import Postgres
from tests.slt.runner import complete

HERE = Path(__file__).parent
LOADS = [(0, 500), (500, 500)]  # events [first, first + count): 10 s of event time each at RATE
MORE = (1000, 300)  # one more load after the backfill (nexmark_after.slt)
SEED, RATE = 7, 50
THRESHOLD = 40  # results of more values are written hashed (their row count is in a readable query)
_LETTERS = {"smallint": "I", "integer": "I", "bigint": "I", "numeric": "R", "double precision": "R", "real": "R"}


def _types(server: pg.Server) -> dict[str, str]:
    """Each query's type letters, from PostgreSQL's view of it."""
    engine = Postgres(server)
    try:
        for statement in DDL:
            engine.statement(statement)
        for name, sql in QUERIES.items():
            engine.statement(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        out = {}
        for name in QUERIES:
            answer = engine.query(f"SELECT data_type FROM information_schema.columns WHERE table_name = '{name}' "
                                  "ORDER BY ordinal_position")
            out[name] = "".join(_LETTERS.get(row[0], "T") for row in answer.rows)
        return out
    finally:
        engine.close()


def _load(first: int, count: int) -> str:
    return f"load nexmark {first} {count} seed {SEED} rate {RATE}\n"


def _checks(types: dict[str, str], when: str) -> str:
    counts = "\nUNION ALL ".join(f"SELECT '{name}' AS view, count(*) AS n FROM {name}" for name in QUERIES)
    out = [f"# -- {when} " + "-" * (92 - len(when)) + "\n", f"query TI rowsort\n{counts}\n----\n\n"]
    out += [f"query {types[name]} rowsort\nSELECT * FROM {name}\n----\n\n" for name in QUERIES]
    return "".join(out)


def _header(order: str) -> str:
    return (f"# Nexmark (millpond.nexmark: DDL, QUERIES, generate) with small data, views created {order}.\n"
            "# Written by tests/slt/nexmark_slt.py (its docstring says how to regenerate it); the expected\n"
            "# values are PostgreSQL's. 'load nexmark FIRST COUNT seed S rate R' inserts the events\n"
            "# [FIRST, FIRST + COUNT) of generate(..., seed=S, events_per_second=R) (tests/slt/__init__.py).\n\n"
            f"hash-threshold {THRESHOLD}\n\n")


def _ddl() -> str:
    return "".join(f"statement ok\n{statement}\n\n" for statement in DDL)


def _views() -> str:
    return "".join(f"statement ok\nCREATE MATERIALIZED VIEW {name} AS\n{_dedent(sql)}\n\n" for name, sql in QUERIES.items())


def _dedent(sql: str) -> str:
    lines = sql.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()), default=0)
    return "\n".join([lines[0].strip(), *(line[indent:] for line in lines[1:])])


def before(types: dict[str, str]) -> str:
    out = [_header("before the data"), _ddl(), _views(), *(_load(first, count) for first, count in LOADS),
           "\nstatement ok\nFLUSH\n\n", _checks(types, f"events 0-{LOADS[-1][0] + LOADS[-1][1] - 1}")]
    return "".join(out)


def after(types: dict[str, str]) -> str:
    out = [_header("after the data"), _ddl(), *(_load(first, count) for first, count in LOADS),
           "\nstatement ok\nFLUSH\n\n", _views(), "statement ok\nFLUSH\n\n",
           _checks(types, f"backfilled: events 0-{LOADS[-1][0] + LOADS[-1][1] - 1}"),
           _load(*MORE), "\nstatement ok\nFLUSH\n\n",
           _checks(types, f"and one more load: events {MORE[0]}-{MORE[0] + MORE[1] - 1}")]
    return "".join(out)


def main() -> int:
    reason = pg.unavailable()
    if reason:
        print(f"needs PostgreSQL: {reason}", file=sys.stderr)
        return 2
    with pg.server() as server:
        types = _types(server)
        problems = []
        for name, text in (("nexmark_before.slt", before(types)), ("nexmark_after.slt", after(types))):
            path = HERE / name
            path.write_text(text)
            engine = Postgres(server)
            try:
                problems += complete(path, engine)
            finally:
                engine.close()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
