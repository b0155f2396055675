"""Random inserts, updates and deletes over many epochs; after every epoch each view equals
DuckDB recomputing its SQL over base tables that DuckDB itself maintained with the same DML."""

from __future__ import annotations

import random

import pytest

from tests import workload


@pytest.mark.parametrize("seed, n", [(7, 12), pytest.param(2024, 30, marks=pytest.mark.chaos)])
def test_views_match_duckdb_after_every_epoch(open_db, seed, n):
    rng = random.Random(seed)
    db = open_db()
    workload.setup(db)
    ref = workload.Reference()
    plan = workload.steps(seed, n, alter=True)  # make test keeps to its time budget; make chaos runs longer
    seen = dict.fromkeys(workload.VIEWS, 0)
    i = 0
    while i < len(plan):
        for step in plan[i:i + rng.randrange(1, 4)]:  # one to three changes per epoch
            workload.apply(db, step)
            ref.apply(step)
            i += 1
        db.flush()
        assert workload.mismatches(db, ref) == [], f"seed {seed}, after step {i}, epoch {db.epoch}"
        for name in seen:
            seen[name] += db.sql(f"SELECT * FROM {name}").num_rows
    assert all(seen.values()), f"some views stayed empty, so the workload checked nothing there: {seen}"
    # the key-less table keeps no state (its log is its rows, consolidated on read); the keyed one does
    tables = {t.name: f"o{t.id}." for t in db.catalog.tables.values()}
    states = db.runtime.coordinator.manifest.states
    assert not [s for s in states if s.startswith(tables["visit"])]
    assert [s for s in states if s.startswith(tables["info"])]
