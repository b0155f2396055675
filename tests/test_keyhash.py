"""millpond.keyhash against Spark's own xxhash64, type by type, on random values with NULLs."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pytest

from millpond.keyhash import xxhash64

RNG = np.random.default_rng(7)
N = 400


def _strings(n: int) -> list[str | None]:
    alphabet = list("abcxyz09 ") + ["é", "ß", "漢", "🙂"]
    out: list[str | None] = []
    for i in range(n):
        length = int(RNG.integers(0, 70))  # below and above the 32-byte stripes, every tail length
        out.append(None if i % 17 == 3 else "".join(RNG.choice(alphabet, length)))
    return out


def _nulls(values: list, every: int = 11) -> list:
    return [None if i % every == 5 else v for i, v in enumerate(values)]


COLUMNS = {
    "b": pa.array(_nulls([bool(x) for x in RNG.integers(0, 2, N)]), pa.bool_()),
    "s": pa.array(_nulls(RNG.integers(-2**15, 2**15, N).tolist()), pa.int16()),
    "i": pa.array(_nulls(RNG.integers(-2**31, 2**31, N).tolist()), pa.int32()),
    "l": pa.array(_nulls([*RNG.integers(-2**63, 2**63 - 1, N - 3, dtype=np.int64).tolist(), 0, -1, 2**63 - 1]),
                  pa.int64()),
    "f": pa.array(_nulls([*RNG.normal(0, 1e3, N - 4).tolist(), -0.0, 0.0, float("nan"), float("inf")]), pa.float32()),
    "d": pa.array(_nulls([*RNG.normal(0, 1e9, N - 4).tolist(), -0.0, 0.0, float("nan"), float("-inf")]),
                  pa.float64()),
    "v": pa.array(_strings(N), pa.string()),
    "dt": pa.array(_nulls([dt.date(1970, 1, 1) + dt.timedelta(days=int(x)) for x in RNG.integers(-30000, 30000, N)]),
                   pa.date32()),
    "ts": pa.array(_nulls(RNG.integers(-2**50, 2**50, N).tolist()), pa.timestamp("us")),
    "tz": pa.array(_nulls(RNG.integers(-2**50, 2**50, N).tolist()), pa.timestamp("us", "UTC")),
    "n": pa.array(_nulls([decimal.Decimal(int(x)).scaleb(-2) for x in RNG.integers(-10**15, 10**15, N)]),
                  pa.decimal128(18, 2)),
    "w": pa.array(_nulls([decimal.Decimal(int(x) * 10**18 + int(y)).scaleb(-4)
                          for x, y in zip(RNG.integers(-10**15, 10**15, N), RNG.integers(0, 10**18, N))]),
                  pa.decimal128(38, 4)),
    "small_w": pa.array(_nulls([decimal.Decimal(int(x)) for x in
                                [*RNG.integers(-300, 300, N - 4).tolist(), 0, -1, 127, -128]]), pa.decimal128(20, 0)),
    "st": pa.array(_nulls([{"months": int(a), "days": int(b), "micros": int(c)} for a, b, c in
                           zip(RNG.integers(-100, 100, N), RNG.integers(-100, 100, N), RNG.integers(-10**12, 10**12, N))],
                          every=13),
                   pa.struct([("months", pa.int32()), ("days", pa.int32()), ("micros", pa.int64())])),
}


def _spark_hashes(spark, table: pa.Table, exprs: list[str]) -> list[np.ndarray]:
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    df = spark.createDataFrame(table)
    got = df.selectExpr("_pos", *(f"xxhash64({e}) AS h{i}" for i, e in enumerate(exprs))).toArrow().sort_by("_pos")
    return [got.column(f"h{i}").to_numpy() for i in range(len(exprs))]


@pytest.mark.parametrize("names", [[c] for c in COLUMNS] + [["i", "v"], ["v", "l", "dt"], ["n", "w", "b", "ts"]])
def test_each_type_hashes_as_spark_hashes_it(spark, names):
    table = pa.table({**{k: COLUMNS[k] for k in names}, "_pos": pa.array(np.arange(N))})
    [expected] = _spark_hashes(spark, table, [", ".join(f"`{k}`" for k in names)])
    got = xxhash64([table.column(k) for k in names])
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, f"{names}: row {bad[:3]} ({[table.column(k)[int(bad[0])] for k in names]}): " \
                          f"{got[bad[:3]]} != Spark's {expected[bad[:3]]}"


def test_no_columns_and_chunked_input():
    assert xxhash64([]).size == 0
    whole = xxhash64([COLUMNS["v"]])
    chunked = pa.chunked_array([COLUMNS["v"][:100], COLUMNS["v"][100:]])
    assert (xxhash64([chunked]) == whole).all()
    assert (xxhash64([COLUMNS["v"][10:20]]) == whole[10:20]).all()  # a sliced array's offsets
