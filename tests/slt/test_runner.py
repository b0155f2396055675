"""The runner itself, without Spark or PostgreSQL: parsing, values, comparison, the mirror."""

from __future__ import annotations

import datetime as dt
import doctest
from decimal import Decimal

import pyarrow as pa
import pytest

from tests.slt import mirror, records, values
from tests.slt.engines import Answer, EngineError
from tests.slt.records import Condition, Halt, HashThreshold, Load, ParseError, Query, Statement, parse_text
from tests.slt.runner import check_query, run
from tests.slt.values import arrange, copy_decode, copy_encode, pg_text, values_hash

FILE = """# a comment
statement ok
CREATE TABLE t (k INT)

skipif postgresql
statement error (?i)no table
SELECT * FROM nope

hash-threshold 8

query IT rowsort label-1
SELECT k, 'x'
# a comment inside
FROM t
----
1 x

load nexmark 0 100 seed 3

onlyif millpond
halt
"""


@pytest.mark.parametrize("module", [mirror, records, values])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


def test_parse_every_kind_of_record():
    parsed = parse_text(FILE, name="f.slt")
    assert [type(r) for r in parsed] == [Statement, Statement, HashThreshold, Query, Load, Halt]
    create, error, threshold, query, load, halt = parsed
    assert (create.line, create.sql, create.error) == (2, "CREATE TABLE t (k INT)", False)
    assert (error.line, error.error, error.pattern, error.conditions) == \
        (5, True, "(?i)no table", (Condition(True, "postgresql"),))
    assert not error.runs_on("postgresql") and error.runs_on("millpond")
    assert threshold.values == 8
    assert (query.types, query.sort, query.sql, query.expected, query.results_line) == \
        ("IT", "rowsort", "SELECT k, 'x'\nFROM t", ("1 x",), 15)
    assert (load.first, load.count, load.seed, load.rate) == (0, 100, 3, 10_000)
    assert halt.runs_on("millpond") and not halt.runs_on("postgresql") and halt.where == "f.slt:20"


@pytest.mark.parametrize("text,why", [
    ("statement maybe\nSELECT 1\n", "f.slt:1: expected 'statement ok'"),
    ("query X\nSELECT 1\n----\n", "f.slt:1: expected 'query TYPES"),
    ("query I sideways\nSELECT 1\n----\n", "unknown sort mode 'sideways'"),
    ("query I\nSELECT 1\n", "f.slt:1: a query without '----'"),
    ("\n\nskipif millpond\n\nstatement ok\nSELECT 1\n", "f.slt:3: a condition must be followed by a record"),
    ("frobnicate\n", "f.slt:1: unknown record 'frobnicate'"),
    ("statement error (unclosed\nSELECT 1\n", "bad error regex"),
    ("load nexmark some\n", "expected 'load nexmark FIRST COUNT"),
])
def test_parse_errors_say_where(text, why):
    with pytest.raises(ParseError, match=pytest.importorskip("re").escape(why)):
        parse_text(text, name="f.slt")


def test_millpond_values_print_as_postgresql_prints_them():
    table = pa.table({"i": pa.array([7, None], pa.int32()), "f": [3.0, 1e15], "r": pa.array([0.1, 1e6], pa.float32()),
                      "d": pa.array([Decimal("1.50"), Decimal("-0.000001")], pa.decimal128(10, 6)),
                      "b": [True, False], "s": ["", "a b"],
                      "ts": pa.array([dt.datetime(2024, 3, 5, 0, 7, 9, 120000), dt.datetime(2024, 3, 5)]),
                      "dt": pa.array([dt.date(2024, 3, 5), None], pa.date32())})
    assert values.arrow_rows(table) == [
        ["7", "3", "0.1", "1.500000", "t", "", "2024-03-05 00:07:09.12", "2024-03-05"],
        [None, "1e+15", "1e+06", "-0.000001", "f", "a b", "2024-03-05 00:00:00", None]]
    assert pg_text(float("nan")) == "NaN" and pg_text(float("-inf")) == "-Infinity"


@pytest.mark.parametrize("value,text", [
    (pa.MonthDayNano([14, 3, 4 * 3600 * 10**9 + 306 * 10**9 + 5 * 10**8]), "1 year 2 mons 3 days 04:05:06.5"),
    (pa.MonthDayNano([0, -1, 10**9]), "-1 days +00:00:01"),
    (pa.MonthDayNano([-3, 0, 0]), "-3 mons"),
    (pa.MonthDayNano([0, 0, 0]), "00:00:00"),
    (pa.MonthDayNano([0, 0, 36 * 3600 * 10**9]), "36:00:00"),
    (pa.MonthDayNano([0, 0, -25 * 10**7]), "-00:00:00.25"),
    (dt.timedelta(days=21, seconds=86399), "21 days 23:59:59"),
    (-dt.timedelta(days=21, seconds=86399), "-21 days -23:59:59"),
    (dt.datetime(2001, 1, 1, 18, 0, 0, 500000, tzinfo=dt.timezone(dt.timedelta(hours=2))), "2001-01-01 16:00:00.5+00"),
])
def test_intervals_and_time_zones_print_as_postgresql_prints_them(value, text):
    assert pg_text(value) == text  # each as PostgreSQL 15 prints it (IntervalStyle postgres, TimeZone UTC)


def test_copy_text_format_round_trips():
    row = ["a\tb", None, "back\\slash", "new\nline", ""]
    assert copy_decode(copy_encode(row)) == row
    assert copy_decode("\\N\t\\101\\n") == [None, "A\n"]


def test_sort_modes_and_hash():
    rows = [["2", "b"], ["10", None]]
    assert arrange(rows, "IT", "nosort") == [["2", "b"], ["10", "NULL"]]
    assert arrange(rows, "IT", "rowsort") == [["10", "NULL"], ["2", "b"]]
    assert arrange(rows, "IT", "valuesort") == [["10"], ["2"], ["NULL"], ["b"]]
    assert values_hash([["1", "x"]]) == __import__("hashlib").md5(b"1\nx\n").hexdigest()


def _query(expected: str, types: str = "IT", sort: str = "rowsort") -> Query:
    return parse_text(f"query {types} {sort}\nSELECT\n----\n{expected}\n", name="f.slt")[0]


def test_check_query_layouts_and_messages():
    rows = [["1", "a  b"], ["2", None]]
    assert check_query(_query("1 a b\n2   NULL"), rows, 2) is None  # whitespace is not significant
    assert check_query(_query("1\na b\n2\nNULL"), rows, 2) is None  # one value per line
    digest = values_hash(arrange(rows, "IT", "rowsort"))
    assert check_query(_query(f"4 values hashing to {digest}"), rows, 2) is None
    assert "3 columns" in check_query(_query("1 a b"), [["1", "a", "b"]], 3)
    why = check_query(_query("1 a b\n2 c"), rows, 2)
    assert "expected:\n    1 a b\n    2 c\n  got:\n    1 a  b\n    2 NULL" in why and "-2 c\n    +2 NULL" in why
    assert "hashing to" in check_query(_query(f"4 values hashing to {'0' * 32}"), rows, 2)


class _Fake:
    """An engine with canned answers."""

    def __init__(self, name: str, answers: dict[str, object]):
        self.name, self.answers, self.ran = name, answers, []
        self.checks_messages = name == "millpond"

    def _answer(self, sql: str):
        self.ran.append(sql)
        answer = self.answers.get(sql)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def statement(self, sql: str) -> bool:
        self._answer(sql)
        return True

    def query(self, sql: str):
        return self._answer(sql)

    def load(self, record) -> None:
        self.ran.append(f"load {record.first}")


def test_run_reports_each_engine_and_goes_on_after_a_failure():
    text = """statement error boom
S1

query I
Q1
----
1

skipif millpond
query I
Q2
----
2

halt

statement ok
NEVER
"""
    good = _Fake("postgresql", {"S1": EngineError("boom"), "Q1": Answer([["1"]], 1), "Q2": Answer([["2"]], 1)})
    bad = _Fake("millpond", {"S1": EngineError("bang"), "Q1": Answer([["5"]], 1)})
    outcome = run(parse_text(text, name="f.slt"), [bad, good])
    assert [(f.record.line, f.engine) for f in outcome.failures] == [(1, "millpond"), (4, "millpond")]
    assert "does not match /boom/: bang" in str(outcome.failures[0])
    assert str(outcome.failures[1]).startswith("f.slt:4: on millpond: wrong result (1 rows)\n")
    assert "\n    Q1\n" in str(outcome.failures[1])
    assert bad.ran == ["S1", "Q1"] and good.ran == ["S1", "Q1", "Q2"]
    assert outcome.ran == {"millpond": 2, "postgresql": 3}


def test_the_mirror_spells_out_windows_and_upserts():
    m = mirror.Mirror()
    assert m.translate("CREATE TABLE s (a INT, b INT, PRIMARY KEY (a, b)) WITH (append_only = false);") == \
        "CREATE TABLE s (a INT, b INT, PRIMARY KEY (a, b))"
    assert m.translate("INSERT INTO s VALUES (1, 2)") == "INSERT INTO s VALUES (1, 2) ON CONFLICT (a, b) DO NOTHING"
    assert m.translate("INSERT INTO other VALUES (1)") == "INSERT INTO other VALUES (1)"
    assert m.translate("DROP MATERIALIZED VIEW IF EXISTS v") == "DROP VIEW IF EXISTS v"
    for statement in ("SET parallelism = 2", "SHOW TABLES", "EXPLAIN MATERIALIZED VIEW v", "DESCRIBE t", "flush"):
        assert m.translate(statement) is None
    hop = m.translate("SELECT window_start, count(*) FROM HOP(e, ts, INTERVAL '5 minutes', INTERVAL '15 minutes') "
                      "GROUP BY window_start")
    assert "GENERATE_SERIES(0," in hop and "AS hop" in hop and "ts IS NOT NULL" in hop
    tumble = m.translate("CREATE MATERIALIZED VIEW w AS SELECT * FROM TUMBLE(e, ts, INTERVAL '10' SECOND) AS x")
    assert tumble.startswith("CREATE VIEW w AS SELECT") and "AS x" in tumble and "GENERATE_SERIES" not in tumble


def test_the_nexmark_files_have_the_current_queries():
    from pathlib import Path

    from millpond.nexmark import DDL, QUERIES
    from tests.slt.records import parse

    def flat(sql: str) -> str:
        return " ".join(sql.split())

    for name in ("nexmark_before.slt", "nexmark_after.slt"):
        statements = [r.sql for r in parse(Path(__file__).with_name(name)) if isinstance(r, Statement)]
        views = {s.split()[3]: flat(s.split(None, 5)[5]) for s in statements if s.startswith("CREATE MATERIALIZED VIEW")}
        tables = [flat(s) for s in statements if s.startswith("CREATE TABLE")]
        assert (views, tables) == ({k: flat(v) for k, v in QUERIES.items()}, [flat(s) for s in DDL]), \
            f"{name} does not have millpond.nexmark's current DDL and QUERIES: python -m tests.slt.nexmark_slt"
