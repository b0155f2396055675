import json

import pytest

from millpond import paths
from millpond.errors import StorageError
from millpond.store.manifest import FORMAT_VERSION, Manifest, ManifestStore
from millpond.store.objects import ObjectStore


def test_a_manifest_of_another_state_format_is_refused_by_name(tmp_path):
    store = ObjectStore(str(tmp_path))
    manifests = ManifestStore(store)
    manifests.commit(Manifest(version=1, epoch=1))
    assert manifests.latest().epoch == 1
    old = json.loads(Manifest(version=2, epoch=2).to_json()) | {"format": FORMAT_VERSION - 1}
    store.put_if_absent(paths.manifest_key(2), json.dumps(old).encode())
    with pytest.raises(StorageError, match=rf"manifest '.*{paths.manifest_key(2)}' under .* has state format "
                                           rf"{FORMAT_VERSION - 1}; this millpond reads format {FORMAT_VERSION}"):
        manifests.latest()


def test_an_expiry_floor_survives_the_manifest_and_compaction_drops_older_keys():
    from datetime import datetime

    import polars as pl

    from millpond.columns import DEL, EP, KH
    from millpond.store.compaction import merge_rows

    m = Manifest(version=3, epoch=3, expiry={"o1.n2.groups": ["minute", 120_000_000]})
    assert Manifest.from_json(m.to_json()).expiry == m.expiry
    assert "expiry" not in json.loads(Manifest(version=1, epoch=1).to_json())  # old manifests read the same
    minutes = [datetime(1970, 1, 1, 0, i) for i in (0, 1, 2, 3)] + [None]
    rows = pl.DataFrame({KH: [1, 2, 3, 4, 5], "minute": minutes, EP: [1, 2, 3, 3, 3], DEL: [False] * 5})
    kept = merge_rows(rows, ("minute",), additive=False, safe_epoch=3, bottom=True)
    assert kept[KH].to_list() == [1, 2, 3, 4, 5]
    expired = merge_rows(rows, ("minute",), additive=False, safe_epoch=3, bottom=True,
                         expiry=("minute", 120_000_000))
    assert expired[KH].to_list() == [3, 4, 5]  # minutes 0 and 1 are below the floor; a NULL window stays


def test_a_state_in_time_order_loses_expired_files_whole_and_rewrites_only_the_one_across_the_floor(tmp_path):
    """A flow's state keyed by window minute then hash (:func:`millpond.engine.flows.cluster_floor`):
    with a key floor in its expiry, the files wholly below the floor leave no output, a file across
    it with at least half its range below keeps its live windows (one with less waits), a file above
    it is not touched, and the state is then within policy."""
    from datetime import datetime, timedelta

    import polars as pl

    from millpond.columns import DEL, EP, KH
    from millpond.engine.flows import cluster_floor
    from millpond.store.compaction import Policy, apply, pick, run_task
    from millpond.store.manifest import Levels
    from millpond.store.objects import open_store
    from millpond.store.sst import read_all, write_sst

    store = open_store(str(tmp_path), {})

    def rows(minutes: range) -> pl.DataFrame:  # two hosts per minute window
        ms = [m for m in minutes for _ in range(2)]
        return pl.DataFrame({KH: [(m << 32) | (7 + i % 2) for i, m in enumerate(ms)],
                             "minute": [datetime(1970, 1, 1) + timedelta(minutes=m) for m in ms],
                             "host": ["a", "b"] * len(minutes), "n": list(range(len(ms))),
                             EP: [1] * len(ms), DEL: [False] * len(ms)})

    files = tuple(write_sst(store, f"l1/{i}.sst", rows(range(10 * i, 10 * i + 10)), keys=("minute", "host"))
                  for i in range(3))
    levels = Levels((), (files,))
    floor = 15 * 60_000_000 + 30_000_000  # 00:15:30: windows up to 00:15 have expired
    expiry = ["minute", floor, cluster_floor(floor)]
    assert pick("s", levels, Policy(), 1, "c/", expiry[:2]) is None  # without a key floor: nothing to do
    task = pick("s", levels, Policy(), 1, "c/", expiry)
    assert (task.source, task.target, task.inputs) == (1, 1, files[:2])  # the second: 00:10-00:15 of 00:10-00:19
    levels = apply(levels, task, run_task(store, task))
    assert levels.levels[0][-1] == files[2]  # untouched
    assert len(levels.levels[0]) == 2 and levels.levels[0][0].min_kh >= cluster_floor(floor)
    kept = pl.from_arrow(read_all(store, levels.levels[0][0]))
    assert sorted(set(kept["minute"].to_list())) == [datetime(1970, 1, 1, 0, m) for m in range(16, 20)]
    assert pick("s", levels, Policy(), 1, "c/", expiry) is None
    # a file with less than half its range expired waits for the floor to pass its middle
    later = ["minute", 23 * 60_000_000, cluster_floor(23 * 60_000_000)]  # windows 20-22 of 20-29 expired
    task = pick("s", levels, Policy(), 1, "c/", later)
    assert task.inputs == levels.levels[0][:1]  # 16-19: wholly expired, no output
    levels = apply(levels, task, run_task(store, task))
    assert levels.levels[0] == (files[2],) and pick("s", levels, Policy(), 1, "c/", later) is None
    later = 25 * 60_000_000
    task = pick("s", levels, Policy(), 1, "c/", ["minute", later, cluster_floor(later)])
    assert task.inputs == (files[2],)


def test_a_big_old_run_moves_down_whole_and_small_runs_merge_among_themselves():
    """Compaction's picks (store/compaction.py): a backfill's big L0 file under an epoch's small
    ones moves to an L1 it does not overlap without being rewritten; small L0 files over a large
    L1 merge into one L0 run; L0 files as large as the L1 they overlap merge into it."""
    from millpond.store.compaction import Policy, apply, pick, run_task
    from millpond.store.manifest import Levels
    from millpond.store.sst import SstRef

    def ref(key: str, size: int) -> SstRef:
        return SstRef(key, -(1 << 62), 1 << 62, 1, 1, 10, size, "ff" * 32)

    policy = Policy(l0_trigger=4)
    small = tuple(ref(f"s{i}", 1_000) for i in range(3))
    levels = Levels((*small, ref("big", 10_000_000)), ())
    task = pick("s", levels, policy, 1, "c/")
    assert task.move and [r.key for r in task.inputs] == ["big"] and task.target == 1
    assert run_task(None, task) == task.inputs  # nothing read, nothing written
    levels = apply(levels, task, task.inputs)
    assert levels.l0 == small and [r.key for r in levels.levels[0]] == ["big"]
    levels = Levels((ref("s3", 1_000), *levels.l0), levels.levels)
    task = pick("s", levels, policy, 1, "c/")
    assert not task.move and task.target == 0 and len(task.inputs) == 4
    levels = apply(levels, task, (ref("run", 4_000),))
    assert [r.key for r in levels.l0] == ["run"] and [r.key for r in levels.levels[0]] == ["big"]
    levels = Levels((*(ref(f"l{i}", 2_000_000) for i in range(4)), *levels.l0), levels.levels)
    task = pick("s", levels, policy, 1, "c/")
    assert task.target == 1 and {r.key for r in task.inputs} == {"l0", "l1", "l2", "l3", "run", "big"}
