"""Flows: sensor metrics rolled up per minute, then per hour over the per-minute sink.

A flow (``CREATE FLOW``) is a continuous aggregation whose results land in an ordinary table, its
sink. This example shows a late row updating its window, a row too late for an expired window
(counted, not merged), a restart that resumes with no refill, and a second flow that rolls the
first one's sink up per hour. Run it with ``python examples/flows.py``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pyarrow as pa

import millpond

ROOT = str(Path(__file__).resolve().parent.parent / "flows-data")

SCHEMA = """
CREATE TABLE metrics (host VARCHAR, ts TIMESTAMP, cpu DOUBLE, pid INT) APPEND ONLY;

CREATE FLOW cpu_per_min SINK TO cpu_1m
EXPIRE AFTER INTERVAL '10 minutes'
COMMENT 'per host and minute; windows older than 10 minutes are final'
AS SELECT host, date_bin(INTERVAL '1 minute', ts) AS minute,
          avg(cpu) AS avg_cpu, max(cpu) AS max_cpu, count(*) AS n,
          approx_count_distinct(pid) AS procs
   FROM metrics WHERE cpu >= 0
   GROUP BY host, minute;

CREATE FLOW cpu_per_hour SINK TO cpu_1h AS
  SELECT host, date_bin(INTERVAL '1 hour', minute) AS hour, max(max_cpu) AS max_cpu, sum(n) AS n
  FROM cpu_1m GROUP BY host, hour;
"""


def show(title: str, table: pa.Table) -> None:
    print(f"\n{title}")
    print(table.to_pandas().to_string(index=False) if table.num_rows else "  (no rows)")


def readings(rows: list[tuple[str, str, float, int]]) -> pa.Table:
    host, ts, cpu, pid = zip(*rows)
    return pa.table({"host": list(host), "ts": pa.array(list(ts)).cast(pa.timestamp("us")), "cpu": list(cpu),
                     "pid": list(pid)})


def run(root: str = ROOT, spark=None) -> dict[str, pa.Table]:  # noqa: ANN001
    """The example on ``root`` (removed first); returns what it showed, for its test."""
    shutil.rmtree(root, ignore_errors=True)
    seen = {}
    db = millpond.connect(root, spark=spark, interval=None)
    db.sql(SCHEMA)
    db.insert("metrics", readings([
        ("web-1", "2026-11-24 10:00:05", 20.0, 101), ("web-1", "2026-11-24 10:00:35", 40.0, 102),
        ("web-2", "2026-11-24 10:00:10", 70.0, 201), ("web-1", "2026-11-24 10:01:15", 30.0, 101),
        ("web-2", "2026-11-24 10:01:20", -1.0, 201),  # a bad reading: the flow's WHERE drops it
    ]))
    db.flush()
    seen["first"] = db.sql("SELECT * FROM cpu_1m ORDER BY host, minute")
    show("cpu_1m after the first readings", seen["first"])

    # a late reading for 10:00 updates that window (it is dirty again)
    db.insert("metrics", readings([("web-1", "2026-11-24 10:00:50", 90.0, 103)]))
    db.flush()
    seen["late"] = db.sql("SELECT * FROM cpu_1m WHERE host = 'web-1' AND minute = '2026-11-24 10:00' ")
    show("web-1 at 10:00 after a late reading (max 90, 3 readings, 3 processes)", seen["late"])

    # the clock moves to 10:15: 10:00 is older than the watermark minus 10 minutes, so it has
    # expired and its row is final; a reading for it in the same or a later epoch is counted, not merged
    db.insert("metrics", readings([("web-2", "2026-11-24 10:15:00", 50.0, 201),
                                   ("web-1", "2026-11-24 10:00:55", 99.0, 104)]))
    db.flush()
    seen["flows"] = db.sql("SHOW FLOWS").select(["name", "sink", "watermark", "expired"])
    show("SHOW FLOWS: the reading for the expired 10:00 window was counted, not merged", seen["flows"])
    db.close()

    # a restart: the flows' state is in the state store, nothing is refilled
    db = millpond.connect(root, spark=spark, interval=None)
    db.insert("metrics", readings([("web-2", "2026-11-24 10:15:40", 60.0, 202)]))
    db.flush()
    seen["minutes"] = db.sql("SELECT * FROM cpu_1m ORDER BY host, minute")
    show("cpu_1m after a restart and one more reading", seen["minutes"])
    seen["hours"] = db.sql("SELECT * FROM cpu_1h ORDER BY host, hour")
    show("cpu_1h: the per-hour flow over the per-minute sink", seen["hours"])
    db.close()
    return seen


if __name__ == "__main__":
    run(sys.argv[1] if len(sys.argv) > 1 else ROOT)
