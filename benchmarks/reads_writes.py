"""Reads and writes by key: do they cost what they touch, or the whole relation?

One root per size N: a table with a primary key ``kv(k, g, v)`` of N rows, a key-less table
``ev(k, v)`` of N rows and a view ``per_k = SELECT k, count(*), sum(v) FROM ev GROUP BY k`` of N
groups. Against it, each operation repeated (median of ``--repeat``, after one warm-up):

- ``SELECT * FROM per_k WHERE k = …`` and ``SELECT * FROM kv WHERE k = …`` in the process, and the
  first over the PostgreSQL wire protocol (``db.serve()``, psycopg, one connection);
- a one-row ``INSERT INTO kv`` of an existing key (an upsert), a 1,000-row and a 100,000-row bulk
  upsert of existing keys (``db.insert``; the latter median of 3);
- ``UPDATE kv SET v = v + 1 WHERE k = …`` and ``DELETE FROM kv WHERE k = …`` (no FLUSH after them);
- the baseline, in the same process: a one-row epoch (one row inserted into ``ev``, then ``FLUSH``).

After loading, the root settles: the background compaction of what the load wrote is applied (as
idle background epochs apply it), so the reads meet the state a running database keeps, not the
load's pile of level-0 files (their number is printed). Every answer is checked against the rows
the benchmark knows it wrote. The last lines print the
ratio of the largest N to the smallest per operation (flat in the relation's size: near 1) and
each DML's time over the one-row epoch's.

    .venv/bin/python benchmarks/reads_writes.py [--sizes 100000,1000000,10000000] [--repeat 9]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import psycopg
import pyarrow as pa

import millpond
from millpond.spark.session import local_session

CHUNK = 1_000_000


BULK = 100_000


def settle(db, limit: float = 300.0) -> int:  # noqa: ANN001
    """Wait until state compaction has caught up (no compaction running, level 0 below its
    trigger), applying each finished one as an idle epoch does; returns the deepest level 0 left."""
    state = db.runtime.coordinator.state
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        db.flush()  # nothing to run: applies a finished compaction and starts the next
        depth = max((len(lv.l0) for lv in state.manifest.states.values()), default=0)
        if state._running is None and depth < state.policy.l0_trigger:  # noqa: SLF001
            return depth
        time.sleep(0.2)
    return depth


def _median_ms(fn, repeat: int) -> float:  # noqa: ANN001
    fn(0)
    times = []
    for i in range(1, repeat + 1):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def measure(spark, n: int, repeat: int) -> dict[str, float]:  # noqa: ANN001
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="reads-writes-") as root:
        db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
        try:
            db.sql("CREATE TABLE kv (k BIGINT PRIMARY KEY, g INT, v BIGINT); CREATE TABLE ev (k BIGINT, v BIGINT); "
                   "CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k")
            t0 = time.perf_counter()
            for lo in range(0, n, CHUNK):
                k = np.arange(lo, min(n, lo + CHUNK), dtype=np.int64)
                db.insert("kv", pa.table({"k": k, "g": (k % 100).astype(np.int32), "v": k * 2}))
                db.insert("ev", pa.table({"k": k, "v": k * 3}))
                db.flush()
            load = time.perf_counter() - t0
            t0 = time.perf_counter()
            depth = settle(db)
            settled = time.perf_counter() - t0
            rng = np.random.default_rng(n)
            keys = rng.integers(0, n, 10 * repeat + 10)

            def point_view(i: int) -> None:
                k = int(keys[i])
                got = db.sql(f"SELECT * FROM per_k WHERE k = {k}").to_pylist()
                assert got == [{"k": k, "n": 1, "s": k * 3}], got

            def point_table(i: int) -> None:
                k = int(keys[i])
                got = db.sql(f"SELECT k, g, v FROM kv WHERE k = {k}").to_pylist()
                assert len(got) == 1 and got[0]["k"] == k and got[0]["g"] == k % 100, got

            out["point query, view (ms)"] = _median_ms(point_view, repeat)
            out["point query, table (ms)"] = _median_ms(point_table, repeat)

            server = db.serve(port=0)
            with psycopg.connect(host="127.0.0.1", port=server.port, user="millpond", autocommit=True) as conn:
                def point_wire(i: int) -> None:
                    k = int(keys[i])
                    got = conn.execute("SELECT k, n FROM per_k WHERE k = %s", (k,)).fetchall()
                    assert got == [(k, 1)], got
                out["point query, view, wire (ms)"] = _median_ms(point_wire, repeat)
            server.close()

            def upsert(i: int) -> None:
                db.sql(f"INSERT INTO kv VALUES ({int(keys[i])}, 7, -1)")

            def bulk(i: int) -> None:
                k = rng.choice(n, 1000, replace=False).astype(np.int64)
                db.insert("kv", pa.table({"k": k, "g": np.full(1000, 8, np.int32), "v": k}))

            def big_bulk(i: int) -> None:
                k = rng.choice(n, BULK, replace=False).astype(np.int64)
                db.insert("kv", pa.table({"k": k, "g": np.full(BULK, 9, np.int32), "v": k}))

            def update(i: int) -> None:
                db.sql(f"UPDATE kv SET v = v + 1 WHERE k = {int(keys[i + 2 * repeat])}")

            def delete(i: int) -> None:
                db.sql(f"DELETE FROM kv WHERE k = {int(keys[i + 4 * repeat])}")

            def epoch(i: int) -> None:
                db.sql(f"INSERT INTO ev VALUES ({n + i}, 1); FLUSH")

            out["one-row upsert (ms)"] = _median_ms(upsert, repeat)
            out["1,000-row bulk upsert (ms)"] = _median_ms(bulk, repeat)
            out[f"{BULK:,}-row bulk upsert (ms)"] = _median_ms(big_bulk, 3)
            out["UPDATE by key (ms)"] = _median_ms(update, repeat)
            out["DELETE by key (ms)"] = _median_ms(delete, repeat)
            db.flush()
            out["one-row epoch, baseline (ms)"] = _median_ms(epoch, repeat)
            gone = [int(keys[i + 4 * repeat]) for i in range(repeat + 1)]
            left = db.sql(f"SELECT count(*) AS c FROM kv WHERE k IN ({', '.join(map(str, gone))})").column("c")[0]
            assert left.as_py() == 0, f"{left} deleted keys still in kv"
            assert db.sql("SELECT count(*) AS c FROM kv").column("c")[0].as_py() == n - len(set(gone))
        finally:
            db.close()
    print(f"  N = {n:,}: loaded in {load:.1f} s, compaction settled in {settled:.1f} s (level 0: {depth} files)",
          flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    spark = local_session(cores="2", shuffle_partitions=2)
    results = {n: measure(spark, n, args.repeat) for n in sizes}
    ops = list(results[sizes[0]])
    print(f"{'operation (median of ' + str(args.repeat) + ')':38}" + "".join(f"{f'N={n:,}':>16}" for n in sizes)
          + f"{f'{sizes[-1]:,}/{sizes[0]:,}':>20}")
    for op in ops:
        print(f"{op:38}" + "".join(f"{results[n][op]:16.1f}" for n in sizes)
              + f"{results[sizes[-1]][op] / results[sizes[0]][op]:20.2f}")
    for op in ("UPDATE by key (ms)", "DELETE by key (ms)"):
        print(f"{op[:-5]} / one-row epoch: " + ", ".join(
            f"N={n:,}: {results[n][op] / results[n]['one-row epoch, baseline (ms)']:.2f}" for n in sizes))


if __name__ == "__main__":
    main()
