"""Compaction under the engine: views stay equal to the oracle after every epoch while state is
compacted in the background (in-process) or as a Spark job (remote), L0 stays bounded, garbage
is collected, and a reopened root reads the same."""

from __future__ import annotations

import random

import pytest

from millpond import paths
from millpond.store.compaction import Policy, l0_runs
from tests import workload

SMALL = Policy(l0_trigger=2, l0_stall=4, base_level_bytes=20_000, level_ratio=2, target_file_bytes=8_000)


@pytest.mark.parametrize("where", ["spark", pytest.param("local", marks=pytest.mark.chaos)])
def test_views_match_the_oracle_while_state_compacts(open_db, spark, root, where):
    import millpond

    db = millpond.connect(root, spark=spark, parallelism=2, interval=None, compaction=where)
    db.runtime.coordinator.state.policy = SMALL
    workload.setup(db)
    ref = workload.Reference()
    rng = random.Random(3)
    plan = workload.steps(3, 12, alter=True)  # a column added to each table midway
    i = 0
    while i < len(plan):
        for step in plan[i:i + rng.randrange(1, 3)]:
            workload.apply(db, step)
            ref.apply(step)
            i += 1
        db.flush()
        assert workload.mismatches(db, ref) == [], f"{where}: after step {i}, epoch {db.epoch}"
        state = db.runtime.coordinator.state
        assert max(l0_runs(lv.l0) for lv in state.manifest.states.values()) <= SMALL.l0_stall
    state = db.runtime.coordinator.state
    state.compact()
    assert state.stats["compactions"] > 0 and state.stats["gc_deleted"] > 0
    assert any(lv.levels for lv in state.manifest.states.values())
    state.collect_garbage()
    listed = set(state.store.list(paths.SST_PREFIX))
    assert state.manifest.files() <= listed
    assert {k for k in listed - state.manifest.files() if paths.parse_sst_version(k) < state.manifest.version} == set()
    db.close()
    again = open_db()
    assert workload.mismatches(again, ref) == []
