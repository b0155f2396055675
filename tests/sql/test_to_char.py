"""to_char's patterns as PostgreSQL reads them: every format below, over four timestamps, in a view
(Spark) and in a query (DuckDB), gives PostgreSQL 15's text; the expected texts are the server's own
(checked against a live server when one is installed, as the semantics corpus is).

PostgreSQL reads a format by the longest keyword at each position, case-sensitively (``mm`` is the
month, ``Mm`` a literal ``M`` then the month), and copies any other character: a user's
``'YYYY-MM-DD HH:mm'`` is accepted, as PostgreSQL accepts it (:mod:`millpond.sql.semantics.to_char`).
"""

from __future__ import annotations

import subprocess

import pytest

from millpond.serve import pgtext
from tests import pg

TIMESTAMPS = ['2024-03-05 14:07:09.123456', '0099-12-31 00:00:00', '2023-01-01 12:00:00.5', '2021-11-13 23:59:59']

# format -> PostgreSQL's to_char of each of TIMESTAMPS
CASES = [
    ('HH:mm', ['02:03', '12:12', '12:01', '11:11']),
    ('Yyyy', ['4024', '9099', '3023', '1021']),
    ('yyyy-mm-dd hh24:mi:ss', ['2024-03-05 14:07:09', '0099-12-31 00:00:00', '2023-01-01 12:00:00', '2021-11-13 23:59:59']),
    ('X Bq', ['X B1', 'X B4', 'X B1', 'X B4']),
    ('\\YYYY', ['\\2024', '\\0099', '\\2023', '\\2021']),
    ('"a\\"b" YY', ['a"b 24', 'a"b 99', 'a"b 23', 'a"b 21']),
    ('"x\\Y"', ['xY', 'xY', 'xY', 'xY']),
    ('Dd', ['33', '55', '11', '77']),
    ('dD', ['33', '55', '11', '77']),
    ('fmdd', ['5', '31', '1', '13']),
    ('FMDay', ['Tuesday', 'Thursday', 'Sunday', 'Saturday']),
    ('Fmdd', ['Fm05', 'Fm31', 'Fm01', 'Fm13']),
    ('y', ['4', '9', '3', '1']),
    ('Y', ['4', '9', '3', '1']),
    ('hH', ['hH', 'hH', 'hH', 'hH']),
    ('Hh', ['Hh', 'Hh', 'Hh', 'Hh']),
    ('sS', ['sS', 'sS', 'sS', 'sS']),
    ('Ms', ['Ms', 'Ms', 'Ms', 'Ms']),
    ('mS', ['mS', 'mS', 'mS', 'mS']),
    ('uS', ['uS', 'uS', 'uS', 'uS']),
    ('Us', ['Us', 'Us', 'Us', 'Us']),
    ('iw IW Iw', ['10 10 41', '53 53 95', '52 52 21', '45 45 12']),
    ('Q q', ['1 1', '4 4', '1 1', '4 4']),
    ('mon Mon MON mOn', ['mar Mar MAR mOn', 'dec Dec DEC mOn', 'jan Jan JAN mOn', 'nov Nov NOV mOn']),
    ('day Day DAY dAY', ['tuesday   Tuesday   TUESDAY   3A4', 'thursday  Thursday  THURSDAY  5A9', 'sunday    Sunday    SUNDAY    1A3', 'saturday  Saturday  SATURDAY  7A1']),
    ('am AM Am pm a.m. A.M.', ['pm PM Am pm p.m. P.M.', 'am AM Am am a.m. A.M.', 'pm PM Am pm p.m. P.M.', 'pm PM Am pm p.m. P.M.']),
    ('TZ tz OF TZH TZM', ['  +00 +00 00', '  +00 +00 00', '  +00 +00 00', '  +00 +00 00']),
    ('ww', ['10', '53', '01', '46']),
    ('ddd DDD Ddd', ['065 065 305', '365 365 531', '001 001 101', '317 317 713']),
    ('e', ['e', 'e', 'e', 'e']),
    ('Mi', ['M4', 'M9', 'M2', 'M1']),
    ('mI', ['m4', 'm9', 'm2', 'm1']),
    ('hH24', ['hH24', 'hH24', 'hH24', 'hH24']),
    ('CC J SSSS SSSSS', ['21 2460375 50829 50829', '01 1757584 0 0', '21 2459946 43200 43200', '21 2459532 86399 86399']),
    ('Y,YYY y,yyy', ['2,024 2,024', '0,099 0,099', '2,023 2,023', '2,021 2,021']),
    ('ID IDDD id iddd', ['2 065 2 065', '4 368 4 368', '7 364 7 364', '6 314 6 314']),
    ('W WW w ww', ['1 10 1 10', '5 53 5 53', '1 01 1 01', '2 46 2 46']),
    ('I IY IYY IYYY i iy iyy', ['4 24 024 2024 4 24 024', '9 99 099 0099 9 99 099', '2 22 022 2022 2 22 022', '1 21 021 2021 1 21 021']),
    ('BC AD B.C. A.D. bc ad b.c. a.d.', ['AD AD A.D. A.D. ad ad a.d. a.d.', 'AD AD A.D. A.D. ad ad a.d. a.d.', 'AD AD A.D. A.D. ad ad a.d. a.d.', 'AD AD A.D. A.D. ad ad a.d. a.d.']),
    ('RM rm FMRM', ['III  iii  III', 'XII  xii  XII', 'I    i    I', 'XI   xi   XI']),
    ('FF1 FF2 FF3 FF4 FF5 FF6 ff3', ['1 12 123 1234 12345 123456 123', '0 00 000 0000 00000 000000 000', '5 50 500 5000 50000 500000 500', '0 00 000 0000 00000 000000 000']),
    ('FXYYYY fxYYYY', ['2024 2024', '0099 0099', '2023 2023', '2021 2021']),
    ('DDth DDTH', ['05th 05TH', '31st 31ST', '01st 01ST', '13th 13TH']),
    ('cc j ssss', ['21 2460375 50829', '01 1757584 0', '21 2459946 43200', '21 2459532 86399']),
    ('FMJ FMSSSS FMCC FMID FMW FMI FMY', ['2460375 50829 21 2 1 4 4', '1757584 0 1 4 5 9 9', '2459946 43200 21 7 1 2 3', '2459532 86399 21 6 2 1 1']),
    ('MS US ms us', ['123 123456 123 123456', '000 000000 000 000000', '500 500000 500 500000', '000 000000 000 000000']),
    ('th', ['th', 'th', 'th', 'th']),
    ('DDTHth', ['05THth', '31STth', '01STth', '13THth']),
    ('FMDDth', ['5th', '31st', '1st', '13th']),
    ('DDTH:', ['05TH:', '31ST:', '01ST:', '13TH:']),
    ('TMDay', ['Tuesday', 'Thursday', 'Sunday', 'Saturday']),
    ('SP', ['SP', 'SP', 'SP', 'SP']),
    ('DDSP', ['05', '31', '01', '13']),
    ('HHTH', ['02ND', '12TH', '12TH', '11TH']),
    ('YYYYth', ['2024th', '0099th', '2023rd', '2021st']),
    ('FMMonth', ['March', 'December', 'January', 'November']),
    ('TMMonth TMmon', ['March mar', 'December dec', 'January jan', 'November nov']),
    ('Month Day', ['March     Tuesday  ', 'December  Thursday ', 'January   Sunday   ', 'November  Saturday ']),
    ('HH12 AM', ['02 PM', '12 AM', '12 PM', '11 PM']),
    ('"Quarter" Q', ['Quarter 1', 'Quarter 4', 'Quarter 1', 'Quarter 4']),
    ('IYYY-IW-ID', ['2024-10-2', '0099-53-4', '2022-52-7', '2021-45-6']),
    ('YYYY-MM-DD"T"HH24:MI:SS.US', ['2024-03-05T14:07:09.123456', '0099-12-31T00:00:00.000000', '2023-01-01T12:00:00.500000', '2021-11-13T23:59:59.000000']),
    ('FMHH12:MI am', ['2:07 pm', '12:00 am', '12:00 pm', '11:59 pm']),
    ('DDD', ['065', '365', '001', '317']),
    ('FMDDD', ['65', '365', '1', '317']),
    ('FMWW', ['10', '53', '1', '46']),
    ('rm', ['iii ', 'xii ', 'i   ', 'xi  ']),
    ('D', ['3', '5', '1', '7']),
    ('FMDay, FMDDth FMMonth YYYY', ['Tuesday, 5th March 2024', 'Thursday, 31st December 0099', 'Sunday, 1st January 2023', 'Saturday, 13th November 2021']),
]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@pytest.fixture(scope="module")
def answers(spark, tmp_path_factory):
    """millpond's to_char of every case: (query answers, view answers), each format -> texts."""
    import millpond

    db = millpond.connect(str(tmp_path_factory.mktemp("to_char") / "root"), spark=spark, interval=None)
    try:
        db.sql("CREATE TABLE ts (k INT PRIMARY KEY, t TIMESTAMP)")
        db.sql("INSERT INTO ts VALUES " + ", ".join(f"({i}, TIMESTAMP {_literal(t)})" for i, t in enumerate(TIMESTAMPS)))
        items = ", ".join(f"to_char(t, {_literal(f)}) AS c{i}" for i, (f, _) in enumerate(CASES))
        db.sql(f"CREATE MATERIALIZED VIEW formatted AS SELECT k, {items} FROM ts")
        db.flush()
        query = db.sql(f"SELECT k, {items} FROM ts ORDER BY k")
        view = db.sql("SELECT * FROM formatted ORDER BY k")
        texts = lambda table: {f: [r[i + 1].decode() if r[i + 1] is not None else None for r in pgtext.rows(table)]
                               for i, (f, _) in enumerate(CASES)}
        return texts(query), texts(view)
    finally:
        db.close()


@pytest.mark.parametrize("fmt,expected", CASES, ids=[f for f, _ in CASES])
def test_to_char_as_postgresql(answers, fmt, expected):
    query, view = answers
    assert query[fmt] == expected, f"query: {fmt!r}"
    assert view[fmt] == expected, f"view: {fmt!r}"


def test_the_expected_texts_are_postgresql_s_own():
    if (reason := pg.unavailable()) is not None:
        pytest.skip(reason)
    with pg.server() as server:
        sql = "".join(f"SELECT to_char(TIMESTAMP {_literal(t)}, {_literal(f)});\n" for f, _ in CASES for t in TIMESTAMPS)
        out = subprocess.run(server.psql(), input=sql, capture_output=True, text=True, check=True).stdout
    got = out.split("\n")[:len(CASES) * len(TIMESTAMPS)]
    want = [text for _, texts in CASES for text in texts]
    assert got == want
