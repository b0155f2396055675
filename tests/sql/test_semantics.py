"""One meaning for SQL: every expression of ``semantics_corpus.txt`` evaluated in a materialized view
(Spark) and in an ad-hoc SELECT (DuckDB) gives PostgreSQL's answer, and every construct the corpus
marks as refused is refused by name, at CREATE MATERIALIZED VIEW and in a SELECT.

The corpus's expected column is PostgreSQL's own: when a PostgreSQL server binary is installed,
:func:`test_the_expected_values_are_postgresql_s_own` starts a throwaway server and checks every
expected value and type against it (skipped, with the reason, when none is installed).

How a value is compared (the canonical form):

- the type: PostgreSQL's type name maps to one Arrow type (``integer`` is int32, ``numeric`` any
  decimal, ``text`` a string...), so ``7 / 2`` must be an integer, not a double;
- NULL is ``NULL``; a boolean ``t``/``f``; an integer, a string, a date, a timestamp, a timestamptz
  and an interval compare as PostgreSQL's text output (a timestamp without trailing zeros in its
  fraction, a timestamptz in UTC, the session TimeZone; an interval as IntervalStyle ``postgres``);
- a double compares as a number, equal to 12 significant digits (the engines' libm may differ in
  the last bit); ``NaN`` and ``±Infinity`` exactly;
- a numeric compares as PostgreSQL's text: its digits and its display scale (a quotient's is the
  value's own, ``0.33333333333333333333``; a numeric's the scale of its type), except in the few
  cases :data:`SCALE_DIFFERS` names, where millpond documents another scale (docs/sql.md, "SQL
  semantics"): there it compares by value, equal to PostgreSQL's rounded (half away from zero) to
  the result's scale, and that scale at least PostgreSQL's or 6 digits.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import subprocess
import time
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import millpond
from millpond.errors import SqlError
from tests import pg
from tests.slt.values import interval_text

CORPUS = Path(__file__).with_name("semantics_corpus.txt")
BATCH = 160  # expressions per view and per SELECT (each view costs its epoch a fixed share)

TABLE = """CREATE TABLE t (i INT, j INT, n INT, z INT, b BIGINT, sm SMALLINT, x DOUBLE, h DOUBLE, r REAL,
    d DECIMAL(10,2), e DECIMAL(12,4), s VARCHAR, w VARCHAR, e2 VARCHAR, u VARCHAR, ts TIMESTAMP, ts2 TIMESTAMP,
    dt DATE, flag BOOLEAN, nul INT, ns VARCHAR, nts TIMESTAMP, iv INTERVAL, iv2 INTERVAL, niv INTERVAL,
    tz TIMESTAMPTZ, tz2 TIMESTAMPTZ, ntz TIMESTAMPTZ)"""
PG_TABLE = """CREATE TABLE t (i integer, j integer, n integer, z integer, b bigint, sm smallint, x double precision,
    h double precision, r real, d numeric(10,2), e numeric(12,4), s text, w text, e2 text, u text, ts timestamp,
    ts2 timestamp, dt date, flag boolean, nul integer, ns text, nts timestamp, iv interval, iv2 interval,
    niv interval, tz timestamptz, tz2 timestamptz, ntz timestamptz);
INSERT INTO t VALUES (7, 2, -7, 0, 3000000000, 3, 3.7, 2.5, 1.5, 1.25, -2.5, 'Hello, World', 'a,b,,c', '', 'héllo',
    '2024-03-05 00:07:09.123456', '2023-12-31 23:59:59', '2024-03-05', true, NULL, NULL, NULL, '1 day 02:03:04.5',
    '-1 mon 3 days -04:00:00', NULL, '2024-03-05 00:07:09.123456+00', '2023-12-31 23:59:59-05', NULL);"""


def _row() -> pa.Table:
    return pa.table({
        "i": pa.array([7], pa.int32()), "j": pa.array([2], pa.int32()), "n": pa.array([-7], pa.int32()),
        "z": pa.array([0], pa.int32()), "b": pa.array([3_000_000_000], pa.int64()), "sm": pa.array([3], pa.int16()),
        "x": pa.array([3.7]), "h": pa.array([2.5]), "r": pa.array([1.5], pa.float32()),
        "d": pa.array([Decimal("1.25")], pa.decimal128(10, 2)), "e": pa.array([Decimal("-2.5")], pa.decimal128(12, 4)),
        "s": ["Hello, World"], "w": ["a,b,,c"], "e2": [""], "u": ["héllo"],
        "ts": pa.array([dt.datetime(2024, 3, 5, 0, 7, 9, 123456)], pa.timestamp("us")),
        "ts2": pa.array([dt.datetime(2023, 12, 31, 23, 59, 59)], pa.timestamp("us")),
        "dt": pa.array([dt.date(2024, 3, 5)], pa.date32()), "flag": [True],
        "nul": pa.array([None], pa.int32()), "ns": pa.array([None], pa.string()),
        "nts": pa.array([None], pa.timestamp("us")),
        # intervals as a query returns them (month_day_nano); the instants with offsets, stored as UTC
        "iv": pa.array([pa.MonthDayNano([0, 1, 7_384_500_000_000])], pa.month_day_nano_interval()),
        "iv2": pa.array([pa.MonthDayNano([-1, 3, -14_400_000_000_000])], pa.month_day_nano_interval()),
        "niv": pa.array([None], pa.month_day_nano_interval()),
        "tz": pa.array([dt.datetime(2024, 3, 5, 0, 7, 9, 123456, tzinfo=dt.timezone.utc)], pa.timestamp("us", tz="UTC")),
        "tz2": pa.array([dt.datetime(2023, 12, 31, 23, 59, 59, tzinfo=dt.timezone(-dt.timedelta(hours=5)))],
                        pa.timestamp("us", tz="-05:00")),
        "ntz": pa.array([None], pa.timestamp("us", tz="UTC")),
    })


@dataclass(frozen=True)
class Case:
    line: int
    expr: str
    expected: str | None = None  # PostgreSQL's text output
    type: str | None = None  # PostgreSQL's type name
    refused: str | None = None  # what the SqlError names

    def __str__(self) -> str:
        return f"line {self.line}: {self.expr}"


def load() -> list[Case]:
    cases = []
    for number, line in enumerate(CORPUS.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        expr, _, rest = line.partition("  =>  ")
        rest = rest.strip()
        if rest.startswith("refused:"):
            cases.append(Case(number, expr.strip(), refused=rest.removeprefix("refused:").strip()))
            continue
        value, _, type_name = rest.rpartition("  :: ")
        value = json.loads(value) if value.startswith('"') else value
        cases.append(Case(number, expr.strip(), value, type_name.strip()))
    return cases


CASES = load()
EVALUATED = [c for c in CASES if c.refused is None]
REFUSED = [c for c in CASES if c.refused is not None]


# -- the canonical form ---------------------------------------------------------------------------
# numerics whose display scale is millpond's, not PostgreSQL's (docs/sql.md, "SQL semantics"): compared by value
SCALE_DIFFERS = {
    "x::numeric": "a double as NUMERIC: PostgreSQL keeps the double's shortest digits, millpond 10 (numeric(38,10))",
    "greatest(d, 1.3)": "numerics of different scales: PostgreSQL keeps each value's own, millpond the widest",
    "CASE WHEN i > 5 THEN 1 ELSE 2.5 END": "numerics of different scales, as greatest",
    "avg(d) * 2": "arithmetic on a quotient other than / and unary -: its value as numeric(38,16)",
}

_TYPES = {"integer": pa.int32(), "bigint": pa.int64(), "smallint": pa.int16(), "double precision": pa.float64(),
          "real": pa.float32(), "boolean": pa.bool_(), "date": pa.date32(), "timestamp without time zone":
          pa.timestamp("us"), "timestamp with time zone": pa.timestamp("us", tz="UTC"),
          "interval": pa.month_day_nano_interval(), "bytea": pa.binary()}


def _type_ok(pg_type: str, arrow: pa.DataType) -> bool:
    if pg_type.endswith("[]"):
        return pa.types.is_list(arrow) and _type_ok(pg_type[:-2], arrow.value_type)
    if pg_type == "numeric":
        return pa.types.is_decimal(arrow)
    if pg_type == "text":
        return pa.types.is_string(arrow) or pa.types.is_large_string(arrow)
    if pg_type == "time without time zone":  # a view's (Spark's TimeType) in nanoseconds, a query's in microseconds
        return pa.types.is_time(arrow)
    return arrow == _TYPES.get(pg_type)


def _text(value: object) -> str:
    """PostgreSQL's text output of a value millpond returned."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, list):  # an array of plain words, as PostgreSQL prints it
        return "{" + ",".join(_text(v) for v in value) + "}"
    if isinstance(value, pa.MonthDayNano):
        return interval_text(value.months, value.days, value.nanoseconds // 1000)
    if isinstance(value, dt.datetime):
        utc = value.tzinfo is not None  # a timestamptz: shown in the session TimeZone, UTC
        value = value.astimezone(dt.timezone.utc) if utc else value
        out = value.strftime("%Y-%m-%d %H:%M:%S")
        return out + (f".{value.microsecond:06d}".rstrip("0") if value.microsecond else "") + ("+00" if utc else "")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        return value.replace(microsecond=0).isoformat() + (f".{value.microsecond:06d}".rstrip("0") if value.microsecond
                                                           else "")
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return str(value)


def mismatch(case: Case, value: object, arrow: pa.DataType) -> str | None:
    """Why ``value`` (of Arrow type ``arrow``) is not PostgreSQL's answer to ``case``, or None."""
    if not _type_ok(case.type, arrow):
        return f"type {arrow}, PostgreSQL's is {case.type}"
    if case.expected == "NULL" or value is None:
        return None if case.expected == "NULL" and value is None else f"{_text(value)!r}, want {case.expected!r}"
    if case.type == "numeric" and case.expr not in SCALE_DIFFERS:
        got_text = format(value, "f")  # a Decimal keeps the result's scale
        return None if got_text == case.expected else f"{got_text!r}, want {case.expected!r}"
    if case.type == "numeric":
        got, want = Decimal(value), Decimal(case.expected)
        got_scale, want_scale = -got.as_tuple().exponent, -want.as_tuple().exponent
        if got_scale < min(want_scale, 6):
            return f"{got} has {got_scale} digits after the point, PostgreSQL's {want} has {want_scale}"
        rounded = want.quantize(Decimal(1).scaleb(-got_scale), rounding=ROUND_HALF_UP) if got_scale < want_scale \
            else want
        return None if got == rounded else f"{got}, want {want}"
    if case.type in ("double precision", "real"):
        want_f = float(case.expected.replace("Infinity", "inf"))
        if math.isnan(want_f) or math.isinf(want_f):
            same = (math.isnan(want_f) and math.isnan(value)) or want_f == value
        else:
            same = math.isclose(value, want_f, rel_tol=1e-12 if case.type == "double precision" else 1e-6)
        return None if same else f"{value!r}, want {case.expected}"
    got_text = _text(value)
    return None if got_text == case.expected else f"{got_text!r}, want {case.expected!r}"


# -- running the corpus ---------------------------------------------------------------------------
def _batches(cases: list[Case]) -> list[list[Case]]:
    """Groups of cases for one view or one SELECT each; aggregates apart (one aggregate makes the
    whole SELECT an aggregation)."""
    aggregate = re.compile(r"\b(count|sum|avg|min|max|percentile_cont|percentile_disc)\s*\(", re.IGNORECASE)
    out = []
    for group in ([c for c in cases if not aggregate.search(c.expr)], [c for c in cases if aggregate.search(c.expr)]):
        out += [group[i:i + BATCH] for i in range(0, len(group), BATCH)]
    return out


def _select(cases: list[Case]) -> str:
    return "SELECT " + ", ".join(f"{c.expr} AS c{k}" for k, c in enumerate(cases)) + " FROM t"


def _compare(cases: list[Case], table: pa.Table, results: dict[Case, str | None]) -> None:
    for k, case in enumerate(cases):
        col = table.column(f"c{k}")
        if table.num_rows != 1:
            results[case] = f"{table.num_rows} rows"
        else:
            results[case] = mismatch(case, col[0].as_py(), col.type)


@dataclass
class Runs:
    view: dict[Case, str | None]  # case -> why it differs (None: PostgreSQL's answer)
    select: dict[Case, str | None]
    refusals: dict[Case, str | None]


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory) -> Runs:
    db = millpond.connect(str(tmp_path_factory.mktemp("semantics") / "root"), spark=spark, parallelism=1,
                          interval=None)
    try:
        db.sql(TABLE)
        db.insert("t", _row())
        views: dict[str, list[Case]] = {}
        view_results: dict[Case, str | None] = {}
        for n, batch in enumerate(_batches(EVALUATED)):
            try:
                db.sql(f"CREATE MATERIALIZED VIEW sem{n} AS {_select(batch)}")
                views[f"sem{n}"] = batch
            except Exception:  # find the expressions at fault: one view each
                for m, case in enumerate(batch):
                    try:
                        db.sql(f"CREATE MATERIALIZED VIEW sem{n}_{m} AS {_select([case])}")
                        views[f"sem{n}_{m}"] = [case]
                    except Exception as exc:
                        view_results[case] = f"CREATE failed: {type(exc).__name__}: {exc}"
        db.flush()
        for name, batch in views.items():
            try:
                _compare(batch, db.sql(f"SELECT * FROM {name}"), view_results)
            except Exception as exc:  # the view failed (a data error isolates it)
                view_results.update({case: f"view {name} failed: {exc}" for case in batch})

        select_results: dict[Case, str | None] = {}
        for batch in _batches(EVALUATED):
            try:
                _compare(batch, db.sql(_select(batch)), select_results)
            except Exception:
                for case in batch:
                    try:
                        _compare([case], db.sql(_select([case])), select_results)
                    except Exception as exc:
                        select_results[case] = f"failed: {type(exc).__name__}: {exc}"

        refusals: dict[Case, str | None] = {}
        for k, case in enumerate(REFUSED):
            problems = []
            for path, sql in (("CREATE", f"CREATE MATERIALIZED VIEW refused{k} AS {_select([case])}"),
                              ("SELECT", _select([case]))):
                try:
                    db.sql(sql)
                    problems.append(f"{path} was not refused")
                except SqlError as exc:
                    if case.refused.lower() not in str(exc).lower():
                        problems.append(f"{path}: the error does not name {case.refused!r}: {exc}")
                except Exception as exc:
                    problems.append(f"{path}: {type(exc).__name__} instead of a SqlError: {exc}")
            refusals[case] = "; ".join(problems) or None
        return Runs(view_results, select_results, refusals)
    finally:
        db.close()


def _report(results: dict[Case, str | None], path: str) -> None:
    bad = [f"{case}: {why}" for case, why in results.items() if why is not None]
    passed = len(results) - len(bad)
    print(f"{path}: {passed} of {len(results)} as PostgreSQL")
    assert not bad, f"{len(bad)} of {len(results)} differ from PostgreSQL in {path}:\n" + "\n".join(bad)


def test_the_corpus_covers_a_few_hundred_expressions():
    assert len(EVALUATED) >= 200 and len(REFUSED) >= 20
    assert len({c.expr for c in CASES}) == len(CASES), "an expression is in the corpus twice"
    assert set(SCALE_DIFFERS) <= {c.expr for c in EVALUATED if c.type == "numeric"}


def test_views_give_postgresql_s_answers(runs):
    assert set(runs.view) == set(EVALUATED)
    _report(runs.view, "views (Spark)")


def test_selects_give_postgresql_s_answers(runs):
    assert set(runs.select) == set(EVALUATED)
    _report(runs.select, "SELECT (DuckDB)")


def test_refused_constructs_are_named_at_create_and_in_select(runs):
    _report(runs.refusals, "refusals")


# -- PostgreSQL itself ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def postgres():
    """``psql`` arguments for a throwaway PostgreSQL server on a Unix socket (stopped at teardown)."""
    reason = pg.unavailable()
    if reason:
        pytest.skip(f"{reason}: the expected values were not checked against PostgreSQL (make setup installs it "
                    "where apt-get works)")
    try:
        with pg.server() as server:
            yield server.psql()
    except pg.StartError as exc:
        pytest.fail(str(exc))


_PROBE = """CREATE FUNCTION pg_temp.probe(q text, OUT typ text, OUT isnul boolean, OUT val text, OUT err text) AS $$
BEGIN
  EXECUTE 'SELECT pg_typeof(v)::text, v IS NULL, format(''%s'', v) FROM (SELECT (' || q || ') AS v FROM t) s'
    INTO typ, isnul, val;
EXCEPTION WHEN others THEN err := SQLERRM;
END $$ LANGUAGE plpgsql;"""


def test_the_expected_values_are_postgresql_s_own(postgres):
    def quote(s: str) -> str:
        return "'" + s.replace("'", "''") + "'"
    script = "\n".join([PG_TABLE, _PROBE, *(f"SELECT {k}, typ, isnul, val, err FROM pg_temp.probe({quote(c.expr)});"
                                            for k, c in enumerate(EVALUATED))])
    started = time.monotonic()
    out = subprocess.run([*postgres, "-F", "\x1f"], input=script, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    answers = {}
    for row in out.stdout.splitlines():
        parts = row.split("\x1f")
        if len(parts) == 5 and parts[0].isdigit():
            answers[int(parts[0])] = parts[1:]
    wrong = []
    for k, case in enumerate(EVALUATED):
        typ, isnul, val, err = answers[k]
        got = "NULL" if isnul == "t" else val
        if err:
            wrong.append(f"{case}: PostgreSQL raised {err}")
        elif (got, typ) != (case.expected, case.type):
            wrong.append(f"{case}: PostgreSQL says {got!r} :: {typ}, the corpus {case.expected!r} :: {case.type}")
    print(f"PostgreSQL agrees with {len(EVALUATED) - len(wrong)} of {len(EVALUATED)} expected values "
          f"({time.monotonic() - started:.1f} s)")
    assert not wrong, "\n".join(wrong)


# -- the issues' reproductions --------------------------------------------------------------------
def test_one_meaning_in_a_view_and_in_a_select(open_db):
    """Repros: rounding casts, integer division, DOW, numeric sums and averages, HH in
    to_char, a bare DECIMAL column, NULL ordering — the same answer in a view and in a SELECT."""
    db = open_db()
    db.sql("CREATE TABLE m (k INT, v INT, x DECIMAL(10,2), n DECIMAL, ts TIMESTAMP)")
    db.sql("""INSERT INTO m VALUES (1, 1, 1.25, 1.25, '2024-03-05 00:07:00'), (2, 2, 2.5, 2.5, '2024-03-05 13:30:00'),
              (3, NULL, NULL, NULL, NULL)""")
    query = """SELECT sum(x)::numeric AS s, round(avg(v), 1) AS a, round(1.25, 1) AS b, sum(n) AS sn,
                      CAST(3.7 AS INT) AS c, 7 / 2 AS d, max(EXTRACT(DOW FROM ts)) AS dow,
                      min(to_char(ts, 'HH:MI')) AS hm, count(*) AS rows FROM m"""
    want = [(Decimal("3.75"), Decimal("1.5"), Decimal("1.3"), Decimal("3.75"), 4, 3, Decimal(2), "01:30", 3)]
    db.sql(f"CREATE MATERIALIZED VIEW agg AS {query}")
    db.sql("CREATE MATERIALIZED VIEW top AS SELECT k, v FROM m ORDER BY v DESC LIMIT 2")
    db.flush()
    assert [tuple(r.values()) for r in db.sql("SELECT * FROM agg").to_pylist()] == want
    assert [tuple(r.values()) for r in db.sql(query).to_pylist()] == want
    assert sorted(db.sql("SELECT k FROM top").column("k").to_pylist()) == [2, 3]  # NULL is largest: first DESC
    assert db.sql("SELECT k FROM m ORDER BY v DESC").column("k").to_pylist() == [3, 2, 1]
    assert db.sql("SELECT k FROM m ORDER BY v").column("k").to_pylist() == [1, 2, 3]
    assert db.catalog.tables["m"].columns[3].type == "DECIMAL(38,10)"


def test_an_average_of_bigints_whose_sum_passes_2_63_is_exact_on_every_path(open_db, monkeypatch):
    """avg(bigint) is a numeric in PostgreSQL: its sum is one too (a BIGINT sum would overflow and
    fail the view, or wrap), in the one task of a small epoch and in Spark's stages alike."""
    from millpond.spark import local_plan
    from tests.pg_numeric import average  # PostgreSQL's quotient: its display scale

    db = open_db()
    db.sql("CREATE TABLE b (k INT PRIMARY KEY, g INT, v BIGINT)")
    query = "SELECT g, avg(v) AS a, sum(v) AS s, count(*) AS n FROM b GROUP BY g"
    db.sql(f"CREATE MATERIALIZED VIEW av AS {query}")
    big, values = 2**62 + 1, {}
    for epoch, local in enumerate((10**9, 0, 10**9)):
        monkeypatch.setattr(local_plan, "LOCAL_RECORDS", local)
        rows = [(k, k % 2, big if k % 3 else -big // 3) for k in range(epoch * 4, epoch * 4 + 6)]  # updates too
        db.sql("INSERT INTO b VALUES " + ", ".join(map(str, rows)))  # an existing key is replaced
        values.update({k: (g, v) for k, g, v in rows})
        db.flush()
        sums = {g: sum(v for h, v in values.values() if h == g) for g in (0, 1)}
        counts = {g: sum(h == g for h, _ in values.values()) for g in (0, 1)}
        want = sorted((g, Decimal(average(sum_=sums[g], count=counts[g])), sums[g], counts[g]) for g in (0, 1))
        assert sorted(tuple(r.values()) for r in db.sql("SELECT * FROM av").to_pylist()) == want, epoch
        assert sorted(tuple(r.values()) for r in db.sql(query).to_pylist()) == want, epoch
    assert min(map(abs, sums.values())) >= 2**63  # past BIGINT's range


def test_errors_name_the_construct_and_where_it_is(open_db):
    db = open_db()
    db.sql("CREATE TABLE m (k INT, v INT)")
    with pytest.raises(SqlError, match=r"function nosuch\(\) is not supported") as err:
        db.sql("CREATE MATERIALIZED VIEW bad AS\nSELECT k, nosuch(v) AS f FROM m")
    assert err.value.line == 2 and err.value.col is not None
    with pytest.raises(SqlError, match=r"function nosuch\(\)"):
        db.sql("SELECT nosuch(v) FROM m")
    for volatile in ("now()", "random()", "current_date"):
        with pytest.raises(SqlError, match="materialized view"):
            db.sql(f"CREATE MATERIALIZED VIEW bad AS SELECT k, {volatile} AS t FROM m")
    assert db.sql("SELECT random() < 1 AS r").column("r").to_pylist() == [True]  # fine in a query
    db.sql("INSERT INTO m VALUES (1, 0)")
    db.flush()
    with pytest.raises(SqlError, match="division by zero"):  # DuckDB alone would answer NULL
        db.sql("SELECT k / v FROM m")
    assert "bad" not in db.catalog.views


def test_the_readme_lists_every_supported_function():
    from millpond.sql.semantics import AGGREGATES, FUNCTIONS, WINDOW_FUNCTIONS

    reference = (Path(__file__).parents[2] / "docs" / "sql.md").read_text()
    section = reference[reference.index("## SQL semantics"):]
    missing = [f for f in (*FUNCTIONS, *AGGREGATES, *WINDOW_FUNCTIONS) if f not in section]
    assert not missing, f"docs/sql.md's SQL semantics does not list {missing}"
