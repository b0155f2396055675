"""SIGKILL a process at named points (during ingest, after SSTs are written but before the
manifest commit, between epochs); after restart every base table and view is exact and no
source row is applied twice (COUNT and SUM views would show a doubled row)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import workload

REPO = Path(__file__).resolve().parent.parent
STEPS = 10


def crash_and_recover(open_db, root: str, point: str, nth: int, seed: int) -> None:
    env = {**os.environ, "MILLPOND_CRASH_AT": f"{point}:{nth}", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "tests.crash_worker", root, str(seed), str(STEPS)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == -signal.SIGKILL, f"worker was not killed at {point}:{nth}: {proc.stderr[-2000:]}"
    acked = sum(1 for line in proc.stdout.splitlines() if line.startswith("ACK"))
    assert "READY" in proc.stdout or acked == 0

    db = open_db()
    if not db.catalog.tables:  # killed while creating the schema: nothing was acknowledged
        workload.setup(db)
    db.flush()
    plan = workload.steps(seed, STEPS)
    # The step in flight when the process died is applied entirely or not at all.
    matched = None
    for done in (acked, acked + 1):
        ref = workload.Reference()
        for step in plan[:done]:
            ref.apply(step)
        if workload.mismatches(db, ref) == []:
            matched = done
            break
    assert matched is not None, f"after SIGKILL at {point}:{nth} ({acked} steps acknowledged) the state " \
                                f"matches neither {acked} nor {acked + 1} applied steps"
    # Recovery resumes from the committed offsets: the rest of the workload still lands exactly once.
    for step in plan[matched:]:
        workload.apply(db, step)
        ref.apply(step)
    db.flush()
    assert workload.mismatches(db, ref) == []


QUICK = [
    ("log.after_put", 4),       # during ingest: the batch is durable but unacknowledged
    ("log.before_put", 3),      # during ingest: the batch never made it
    ("epoch.after_job", 3),     # SSTs written, manifest not committed
    ("epoch.after_commit", 2),  # between epochs
]


@pytest.mark.parametrize("point,nth", QUICK)
def test_sigkill_recovers_exactly_once(open_db, root, point, nth):
    crash_and_recover(open_db, root, point, nth, seed=11)


CHAOS = [(p, n, s) for p in ("log.after_put", "log.before_put", "epoch.before_job", "epoch.after_job",
                               "epoch.after_commit") for n in (1, 3, 7) for s in (3,)]


@pytest.mark.chaos
@pytest.mark.parametrize("point,nth,seed", CHAOS)
def test_chaos_sigkill(open_db, root, point, nth, seed):
    crash_and_recover(open_db, root, point, nth, seed)
