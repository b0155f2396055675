"""Caches and restore: state several times larger than the cache budgets still reads right and
the caches stay within budget; a restart reads lazily; backpressure bounds L0."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import polars as pl
import pytest

from millpond import paths
from millpond.store import cache
from millpond.store.compaction import Policy, l0_runs
from millpond.store.objects import ObjectStore
from millpond.store.store import StateStore, run_in_process


@pytest.fixture(autouse=True)
def fresh_caches(tmp_path):
    yield
    cache.configure(memory_bytes=256 << 20, disk_bytes=4 << 30, disk_dir=str(tmp_path / "default-disk"))


def _load(store: StateStore, n: int, epochs: int, rng) -> dict[int, int]:  # noqa: ANN001
    expect = {}
    for e in range(1, epochs + 1):
        keys = np.sort(rng.choice(n * 4, n, replace=False)).astype(np.int64)
        vals = rng.integers(0, 1 << 40, n)
        store.ingest("kv", pl.DataFrame({"_kh": keys, "v": vals, "pad": [f"{v:032d}" for v in vals],
                                         "_del": np.zeros(n, bool)}), e)
        store.seal(e).result()
        expect.update(zip(keys.tolist(), vals.tolist()))
    return expect


def _check_reads(store: StateStore, expect: dict[int, int], rng, rounds: int = 20) -> None:  # noqa: ANN001
    keys = np.array(sorted(expect), dtype=np.int64)
    for _ in range(rounds):
        probe = rng.choice(keys, 300, replace=False)
        got = store.table("kv").lookup(probe)
        assert dict(zip(got["_kh"].to_list(), got["v"].to_list())) == {int(k): expect[int(k)] for k in probe}


def test_state_five_times_the_memory_budget(tmp_path):
    budget = 256 << 10
    cache.configure(memory_bytes=budget)
    rng = np.random.default_rng(1)
    store = StateStore(ObjectStore(str(tmp_path / "root")), background=False)
    expect = _load(store, 20_000, 3, rng)
    state_bytes = sum(r.size for lv in store.manifest.states.values() for r in lv.files())
    assert state_bytes >= 5 * budget * 0.4  # compressed on storage; decoded it is larger still
    _check_reads(store, expect, rng)
    mem = cache.block_cache()
    assert mem.used <= budget and mem.evictions > 0
    scan = store.table("kv").scan()
    assert scan.height == len(expect) and mem.used <= budget
    store.close()


def test_remote_state_five_times_both_budgets_and_a_lazy_restart(s3_url, s3_options, tmp_path):
    mem_budget, disk_budget = 96 << 10, 384 << 10
    cache.configure(memory_bytes=mem_budget, disk_bytes=disk_budget, disk_dir=str(tmp_path / "disk"))
    rng = np.random.default_rng(2)
    root = f"{s3_url}/{tmp_path.name}"
    store = StateStore(ObjectStore(root, s3_options), background=False)
    expect = _load(store, 25_000, 4, rng)
    state_bytes = sum(r.size for lv in store.manifest.states.values() for r in lv.files())
    assert state_bytes >= 5 * disk_budget
    _check_reads(store, expect, rng)
    store.close()

    class Counting(ObjectStore):
        read = 0

        def _get_ranges(self, key, starts, ends):  # noqa: ANN001, ANN202
            out = super()._get_ranges(key, starts, ends)
            Counting.read += sum(map(len, out))
            return out

    cache.configure(memory_bytes=mem_budget, disk_bytes=disk_budget, disk_dir=str(tmp_path / "disk2"))
    again = StateStore(Counting(root, s3_options), background=False)  # a restart: empty caches
    assert Counting.read == 0, "opening the root downloaded state"
    probe = np.array(sorted(expect)[:5], dtype=np.int64)
    got = again.table("kv").lookup(probe)
    assert got.height == 5
    assert Counting.read < state_bytes / 10, f"the first read fetched {Counting.read} of {state_bytes} bytes"
    _check_reads(again, expect, rng)
    disk = cache._DISK
    assert disk.used <= disk_budget and disk.evictions > 0 and disk.hits > 0
    assert cache.block_cache().used <= mem_budget
    again.close()


def test_commits_stall_while_l0_is_past_its_bound(tmp_path, caplog):
    def slow(store, tasks):  # noqa: ANN001, ANN202
        time.sleep(0.5)
        return run_in_process(store, tasks)

    policy = Policy(l0_trigger=2, l0_stall=4)
    store = StateStore(ObjectStore(str(tmp_path)), policy=policy, background=True, runner=slow)
    deepest = 0
    with caplog.at_level(logging.WARNING, logger="millpond.store"):
        for e in range(1, 16):
            store.ingest("kv", pl.DataFrame({"_kh": [e], "v": [e], "_del": [False]}), e)
            store.seal(e).result()
            deepest = max(deepest, l0_runs(store.manifest.state("kv").l0))
    assert store.stats["stalls"] > 0
    assert deepest <= policy.l0_stall
    assert "waiting for compaction" in caplog.text
    got = store.table("kv").scan()
    assert sorted(got["_kh"].to_list()) == list(range(1, 16))
    store.close()


def test_an_epochs_many_files_are_one_l0_run_for_backpressure(tmp_path):
    """A backfill cut in steps commits many files of one epoch (disjoint keys): they count as one
    run, so their number does not bring the bound closer (counting files, the first commit here
    would have waited); separate epochs' files still do."""
    from millpond.store.state_table import write_state

    release = threading.Event()

    def held(store, tasks):  # noqa: ANN001, ANN202  (a compaction that runs until released)
        release.wait(60)
        return run_in_process(store, tasks)

    policy = Policy(l0_trigger=4, l0_stall=4)
    store = StateStore(ObjectStore(str(tmp_path)), policy=policy, background=True, runner=held)
    files = [write_state(store.store, paths.sst_key(0, 1, "a", "kv", i % 2, f"-{i:02d}"), pl.DataFrame({"_kh": [10 * i, 10 * i + 1], "v": [i, i],
                                                                          "_del": [False, False]}), 1, keys=(),
                         additive=False) for i in range(12)]
    store.commit(1, {"kv": files}, {})
    assert len(store.manifest.state("kv").l0) == 12 and l0_runs(store.manifest.state("kv").l0) == 1
    for e in (2, 3):
        store.ingest("kv", pl.DataFrame({"_kh": [1000 + e], "v": [e], "_del": [False]}), e)
        store.seal(e).result()
    assert l0_runs(store.manifest.state("kv").l0) == 3 and store.stats["stalls"] == 0
    store.ingest("kv", pl.DataFrame({"_kh": [1004], "v": [4], "_del": [False]}), 4)
    threading.Timer(0.5, release.set).start()  # the compaction ends after the commit has stalled
    store.seal(4).result()  # a fourth run: at the bound, so this commit waited for the compaction
    assert store.stats["stalls"] > 0 and store.stats["compactions"] > 0
    assert sorted(store.table("kv").scan()["_kh"].to_list()) == sorted([10 * i + j for i in range(12) for j in (0, 1)]
                                                                        + [1002, 1003, 1004])
    store.close()
