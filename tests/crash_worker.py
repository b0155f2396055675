"""Runs the seeded workload on a root, printing ``ACK <n>`` after each step is applied and
flushed. Crash tests start it with MILLPOND_CRASH_AT set so that it SIGKILLs itself.

    python -m tests.crash_worker ROOT SEED STEPS
"""

from __future__ import annotations

import sys

import millpond
from millpond.spark.session import local_session
from tests import workload


def main(root: str, seed: int, count: int) -> None:
    db = millpond.connect(root, spark=local_session(cores="2", shuffle_partitions=2), parallelism=2, interval=None)
    if not db.catalog.tables:
        workload.setup(db)
    print("READY", flush=True)
    for i, step in enumerate(workload.steps(seed, count)):
        workload.apply(db, step)
        db.flush()
        print(f"ACK {i + 1}", flush=True)
    db.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
