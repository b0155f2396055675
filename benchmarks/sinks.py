"""Sinks into Delta Lake tables: what a sink costs per epoch, how far behind it is, and how many
files its table has after many epochs.

A keyed table ``kv(k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)`` of ``--rows`` rows and a view
``per_g = SELECT g, count(*), sum(v), max(v) FROM kv GROUP BY g`` (``--groups`` groups). Three
sinks: ``kv`` upsert (the table itself: each epoch merges the changed keys), ``per_g`` upsert and
``per_g`` append-only (its changelog). Each epoch upserts ``--batch`` random keys of ``kv`` and
flushes. The epochs run twice in one process, on two roots: first without sinks (the baseline),
then with the three sinks.

Printed: the median epoch (``insert`` + ``flush``) without and with the sinks, and their ratio; the
sinks' median write time per epoch (their lag: a sink writes right after the epoch's commit, so a
change reaches Delta that long after millpond committed it) and rows written per second; the
files of each Delta table's current version and its versions at the end (the sinks compact their
small files every ``millpond.engine.sinks.COMPACT_EVERY`` writes); every Delta table checked
equal to its source at the end.

    .venv/bin/python benchmarks/sinks.py [--rows 100000] [--batch 1000] [--epochs 1000] [--groups 1000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

import millpond
from millpond.spark.session import local_session

SINKS = {"kv_out": ("kv", "upsert"), "per_g_out": ("per_g", "upsert"), "per_g_log": ("per_g", "append-only")}


def run(spark, args, sinks: bool) -> dict:  # noqa: ANN001
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory(prefix="sinks-") as tmp:
        db = millpond.connect(f"{tmp}/root", spark=spark, interval=None)
        out = Path(tmp) / "delta"
        try:
            db.sql("CREATE TABLE kv (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT); CREATE MATERIALIZED VIEW per_g AS "
                   "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM kv GROUP BY g")
            keys = np.arange(args.rows)
            db.insert("kv", _rows(keys, rng, args.groups))
            db.flush()
            if sinks:
                for name, (src, kind) in SINKS.items():
                    db.sql(f"CREATE SINK {name} FROM {src} WITH (connector = 'deltalake', "
                           f"location = '{out / name}', type = '{kind}')")
            spent, rt = [], db.runtime
            catch_up = rt.sinks.catch_up

            def timed(catalog: object, upto: int) -> None:
                started = time.perf_counter()
                catch_up(catalog, upto)
                spent.append(time.perf_counter() - started)
            rt.sinks.catch_up = timed
            times, writes = [], []
            for _ in range(args.epochs):
                batch = _rows(rng.choice(args.rows, args.batch, replace=False), rng, args.groups)
                started, before = time.perf_counter(), sum(spent)
                db.insert("kv", batch)
                db.flush()
                times.append(time.perf_counter() - started)
                writes.append(sum(spent) - before)
            result = {"epoch": statistics.median(times)}
            if sinks:
                result["write"] = statistics.median(writes)
                after = writes
                rows = {n: DeltaTable(str(out / n)).to_pyarrow_table() for n in SINKS}
                written = sum(rt.sinks.rows.get(db.catalog.sinks[n].token, 0) for n in SINKS)
                result["rows_per_s"] = written / max(sum(after), 1e-9)
                result["files"] = {n: (len(DeltaTable(str(out / n)).file_uris()), DeltaTable(str(out / n)).version())
                                   for n in SINKS}
                for name, (src, kind) in SINKS.items():
                    have = db.sql(f"SELECT * FROM {src}")
                    got = rows[name]
                    if kind == "append-only":
                        got = _replay(got)
                    assert _sorted(got) == _sorted(have), f"sink {name} differs from {src}"
                result["checked"] = True
            return result
        finally:
            db.close()


def _rows(keys: np.ndarray, rng: np.random.Generator, groups: int) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "g": pa.array(rng.integers(0, groups, len(keys)), pa.int64()),
                     "v": pa.array(rng.integers(0, 1_000_000, len(keys)), pa.int64())})


def _replay(changes: pa.Table) -> pa.Table:
    import duckdb

    con = duckdb.connect()
    con.register("c", changes)
    cols = ", ".join(f'"{c}"' for c in changes.column_names if c not in ("_op", "_epoch"))
    return con.sql(f"SELECT {cols} FROM (SELECT {cols}, sum(CASE WHEN _op = 'insert' THEN 1 ELSE -1 END) AS w "
                   f"FROM c GROUP BY ALL), range(w::BIGINT)").to_arrow_table()


def _sorted(t: pa.Table) -> list:
    return sorted(map(tuple, (r.values() for r in t.to_pylist())), key=repr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--epochs", type=int, default=1_000)
    ap.add_argument("--groups", type=int, default=1_000)
    args = ap.parse_args()
    spark = local_session(cores="2")
    base = run(spark, args, sinks=False)
    with_sinks = run(spark, args, sinks=True)
    print(f"{args.epochs} epochs of {args.batch:,} upserts into {args.rows:,} rows, 3 sinks "
          f"(kv upsert, per_g upsert, per_g append-only)")
    print(f"epoch median: {base['epoch']:.3f} s without sinks, {with_sinks['epoch']:.3f} s with them "
          f"(x{with_sinks['epoch'] / base['epoch']:.2f})")
    print(f"sinks' write per epoch (median; their lag behind the commit): {with_sinks['write']:.3f} s; "
          f"rows written / write seconds: {with_sinks['rows_per_s']:,.0f}/s")
    for name, (files, version) in with_sinks["files"].items():
        print(f"  {name}: {files} files in its current version, {version + 1} versions")
    print("every Delta table equals its source" if with_sinks["checked"] else "NOT CHECKED")


if __name__ == "__main__":
    main()
