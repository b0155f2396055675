"""The state store against a model: a dict of committed versions per epoch.

Hypothesis draws sequences of ingest / seal / compact / reopen / crash / pin / gc operations on
a newest-wins table and an additive (multiset) table, on a store whose compaction policy is tiny
(every second L0 file compacts, levels of a few KiB), so runs go through many compactions into
several levels. After every step the store must equal the model: the writer's reads (shared
buffer included) at the latest epoch, and reads at every retained older epoch.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from millpond import paths
from millpond.errors import FencedError, MillpondError, StorageError
from millpond.store import cache
from millpond.store import compaction, sst
from millpond.store.compaction import Policy, l0_runs
from millpond.store.faulty import FaultyStore
from millpond.store.objects import ObjectStore
from millpond.store.store import StateStore

POLICY = Policy(l0_trigger=2, l0_stall=6, base_level_bytes=3000, level_ratio=2, target_file_bytes=1500)
KEYS = 40

ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.lists(st.tuples(st.integers(0, KEYS), st.integers(-5, 5)), min_size=1, max_size=30)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, KEYS), min_size=1, max_size=10)),
    st.tuples(st.just("seal")), st.tuples(st.just("seal")),
    st.tuples(st.just("compact")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("crash")),
    st.tuples(st.just("gc")),
), min_size=1, max_size=40)


class Model:
    """Committed snapshots per epoch + the writer's uncommitted puts."""

    def __init__(self):
        self.kv: dict[int, dict[int, int]] = {0: {}}       # epoch -> key -> value (newest-wins table)
        self.bag: dict[int, dict[int, int]] = {0: {}}      # epoch -> key -> count (additive table)
        self.pending_kv: dict[int, int | None] = {}
        self.pending_bag: dict[int, int] = {}

    @property
    def epoch(self) -> int:
        return max(self.kv)

    def latest_kv(self) -> dict[int, int]:
        """The newest-wins table as its writer sees it: the last commit plus pending puts."""
        kv = dict(self.kv[self.epoch])
        for k, v in self.pending_kv.items():
            if v is None:
                kv.pop(k, None)
            else:
                kv[k] = v
        return kv

    def commit(self) -> None:
        kv = self.latest_kv()
        bag = dict(self.bag[self.epoch])
        for k, d in self.pending_bag.items():
            bag[k] = bag.get(k, 0) + d
        e = self.epoch + 1
        self.kv[e], self.bag[e] = kv, {k: c for k, c in bag.items() if c}
        self.drop()

    def drop(self) -> None:
        self.pending_kv, self.pending_bag = {}, {}


def _kv(keys: list[int], values: list[int | None]) -> pl.DataFrame:
    return pl.DataFrame({"_kh": keys, "v": [0 if v is None else v for v in values],
                         "_del": [v is None for v in values]}, schema={"_kh": pl.Int64, "v": pl.Int64, "_del": pl.Boolean})


def _bag(keys: list[int], counts: list[int]) -> pl.DataFrame:
    return pl.DataFrame({"_kh": keys, "item": [f"i{k % 3}" for k in keys], "_count": counts, "_del": [False] * len(keys)},
                        schema={"_kh": pl.Int64, "item": pl.String, "_count": pl.Int64, "_del": pl.Boolean})


def _read(store: StateStore, epoch: int | None) -> tuple[dict[int, int], dict[int, int]]:
    probe = np.arange(2048, dtype=np.int64)  # every key a test writes
    kv = store.table("kv", epoch=epoch).lookup(probe)
    bag = store.table("bag", ("item",), additive=True, epoch=epoch).lookup(probe)
    scan = store.table("kv", epoch=epoch).scan()
    got_kv = {} if kv is None else dict(zip(kv["_kh"].to_list(), kv["v"].to_list()))
    got_scan = {} if scan is None else dict(zip(scan["_kh"].to_list(), scan["v"].to_list()))
    assert got_kv == got_scan, "multi-get and scan disagree"
    return got_kv, ({} if bag is None else dict(zip(bag["_kh"].to_list(), bag["_count"].to_list())))


def _check(store: StateStore, model: Model) -> None:
    for e in range(max(store.manifest.safe_epoch, 0), model.epoch + 1):
        kv, bag = _read(store, e)
        assert kv == model.kv[e], f"newest-wins table at epoch {e}"
        assert bag == model.bag[e], f"additive table at epoch {e}"


def _run(root: str, steps: list, retention: int, faulty: bool, policy: Policy = POLICY,
         options: dict | None = None) -> StateStore:
    def open_store() -> StateStore:
        base = FaultyStore(root, options, seed=7, transient=0.15) if faulty else ObjectStore(root, options)
        return StateStore(base, policy=policy, retention_epochs=retention, background=False)

    store, model = open_store(), Model()
    for step in steps:
        kind = step[0]
        nxt = model.epoch + 1
        if kind == "put":
            pairs = dict(step[1])  # the last write of a key in one batch wins
            keys = sorted(pairs)
            store.ingest("kv", _kv(keys, [abs(pairs[k]) for k in keys]), nxt)
            model.pending_kv.update({k: abs(pairs[k]) for k in keys})
            # a count may not go negative: clamp the delta against model + pending
            cur = model.bag[model.epoch]
            deltas = {k: max(d, -(cur.get(k, 0) + model.pending_bag.get(k, 0))) for k, d in pairs.items()}
            deltas = {k: d for k, d in deltas.items() if d}
            if deltas:
                ks = sorted(deltas)
                store.ingest("bag", _bag(ks, [deltas[k] for k in ks]), nxt, keys=("item",), additive=True)
                for k, d in deltas.items():
                    model.pending_bag[k] = model.pending_bag.get(k, 0) + d
        elif kind == "delete":
            keys = sorted(set(step[1]))
            store.ingest("kv", _kv(keys, [None] * len(keys)), nxt)
            model.pending_kv.update({k: None for k in keys})
        elif kind == "seal":
            store.seal(nxt).result()
            model.commit()
        elif kind == "compact":
            store.compact()
        elif kind == "reopen":  # a clean restart: the uncommitted buffer is gone
            store.close()
            cache.block_cache().clear()
            store, _ = open_store(), model.drop()
        elif kind == "crash":  # files of the epoch are uploaded, its version is never written
            broken = StateStore(FaultyStore(root, options, seed=1, broken_writes=(paths.MANIFEST_PREFIX,)), policy=policy,
                                retention_epochs=retention, background=False)
            broken.ingest("kv", _kv([1, 2], [99, 98]), nxt)
            with pytest.raises(StorageError, match="manifest"):
                broken.seal(nxt).result()
            broken.close()
        elif kind == "gc":
            store.collect_garbage()
            referenced = store.manifest.files()
            listed = set(store.store.list(paths.SST_PREFIX))
            assert referenced <= listed, "GC deleted a referenced file"
            left = {k for k in listed - referenced if paths.parse_sst_version(k) < store.manifest.version}
            assert not left, "GC left unreferenced files of older versions"
        # the writer sees its own buffer: latest reads include pending puts
        kv, bag = _read(store, None)
        assert kv == model.latest_kv()
        _check(store, model)
    return store


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=ops, retention=st.integers(0, 3))
def test_store_matches_the_model(tmp_path_factory, steps, retention):
    root = str(tmp_path_factory.mktemp("model"))
    _run(root, steps, retention, faulty=False).close()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=ops)
def test_transient_storage_faults_are_retried_and_invisible(tmp_path_factory, steps):
    root = str(tmp_path_factory.mktemp("faulty"))
    store = _run(root, steps, 1, faulty=True)
    store.close()


def test_a_long_run_compacts_into_levels_and_reads_at_retained_epochs(tmp_path):
    rng = np.random.default_rng(5)
    steps = []
    for _ in range(30):
        steps.append(("put", [(int(k), int(v)) for k, v in zip(rng.integers(0, KEYS, 15), rng.integers(-5, 6, 15))]))
        steps.append(("delete", [int(k) for k in rng.integers(0, KEYS, 3)]))
        steps.append(("seal",))
    small = Policy(l0_trigger=2, l0_stall=6, base_level_bytes=1000, level_ratio=2, target_file_bytes=400)
    store = _run(str(tmp_path), steps + [("gc",)], retention=4, faulty=False, policy=small)
    levels = store.manifest.state("kv")
    assert store.stats["compactions"] >= 10
    assert len(levels.levels) >= 2, "small levels must have spilled past L1"
    assert len(levels.l0) < small.l0_trigger
    assert any(len(level) > 1 for level in levels.levels), "a level is split into files by key range"
    assert store.manifest.safe_epoch == store.manifest.epoch - 4
    with pytest.raises(MillpondError, match="no longer readable"):
        store.table("kv", epoch=store.manifest.safe_epoch - 1)
    store.close()


def test_small_l0_runs_merge_among_themselves_over_a_large_l1(tmp_path, monkeypatch):
    """L0 files small next to the L1 bytes they overlap merge into one L0 run (each file of
    hashed keys overlaps all of L1: merging into it would rewrite it), larger ones into L1;
    the store equals the model after every step, at every retained epoch."""
    targets, real = [], compaction.apply

    def apply(levels, task, outputs):  # noqa: ANN001, ANN202
        targets.append(task.target)
        return real(levels, task, outputs)
    monkeypatch.setattr(compaction, "apply", apply)
    rng = np.random.default_rng(9)
    steps = [("put", [(k, 1) for k in range(1000)]), ("seal",), ("put", [(k, 2) for k in range(1000, 2000)]), ("seal",)]
    for _ in range(40):  # then small changes all over the keys
        steps.append(("put", [(int(k), int(v)) for k, v in zip(rng.integers(0, 2000, 40), rng.integers(-5, 6, 40))]))
        steps.append(("delete", [int(k) for k in rng.integers(0, 2000, 5)]))
        steps.append(("seal",))
    policy = Policy(l0_trigger=2, l0_stall=6, base_level_bytes=1 << 20, level_ratio=2, target_file_bytes=16_000,
                    l0_share=3)
    store = _run(str(tmp_path), steps + [("gc",)], retention=4, faulty=False, policy=policy)
    assert 0 in targets and 1 in targets, targets
    assert l0_runs(store.manifest.state("kv").l0) <= policy.l0_stall
    store.close()


def test_a_merge_read_one_range_of_keys_at_a_time_equals_the_model(tmp_path, monkeypatch):
    """Compaction reads and merges its inputs by ranges of key hashes (bounded memory): cut at
    every block here, the store still equals the model after every step, at every retained epoch."""
    monkeypatch.setattr(compaction, "MERGE_BYTES", 1)
    monkeypatch.setattr(sst, "BLOCK_BYTES", 256)  # blocks of 64 rows: files of many blocks
    cuts, real = [], compaction._ranges
    monkeypatch.setattr(compaction, "_ranges", lambda metas, budget: cuts.append(r := real(metas, budget)) or r)
    rng = np.random.default_rng(11)
    steps = [("put", [(k, 1) for k in range(0, 2000, 3)]), ("seal",)]
    for _ in range(12):
        steps.append(("put", [(int(k), int(v)) for k, v in zip(rng.integers(0, 2000, 300), rng.integers(-5, 6, 300))]))
        steps.append(("delete", [int(k) for k in rng.integers(0, 2000, 40)]))
        steps.append(("seal",))
    store = _run(str(tmp_path), steps + [("gc",)], retention=2, faulty=False)
    assert max(map(len, cuts)) > 5, "no merge was cut into ranges"
    store.close()


def test_a_pin_keeps_an_epoch_readable_and_its_files_alive(tmp_path):
    store = StateStore(ObjectStore(str(tmp_path)), policy=POLICY, background=False)
    store.ingest("kv", _kv([1, 2, 3], [10, 20, 30]), 1)
    store.seal(1).result()
    with store.pin(1):
        for e in range(2, 12):
            store.ingest("kv", _kv([1, 2], [e, e]), e)
            store.seal(e).result()
        assert store.manifest.safe_epoch <= 1
        kv, _ = _read(store, 1)
        assert kv == {1: 10, 2: 20, 3: 30}
    store.ingest("kv", _kv([3], [0]), 12)
    store.seal(12).result()
    store.compact()
    assert store.manifest.safe_epoch == 12
    assert _read(store, None)[0] == {1: 11, 2: 11, 3: 0}
    store.close()


def test_a_compaction_that_finished_by_close_is_kept_not_redone(tmp_path):
    """Closing waits for a background compaction in flight; its result is committed then, so the
    next open does not merge the same files again."""
    import threading

    release = threading.Event()

    def slow(store, tasks):  # noqa: ANN001, ANN202 - still running when close() is called
        release.wait(10)
        return [compaction.run_task(store, t) for t in tasks]

    store = StateStore(ObjectStore(str(tmp_path)), policy=POLICY, background=True, runner=slow)
    for e in (1, 2):
        store.ingest("kv", _kv([e, e + 1], [e, e]), e)
        store.seal(e).result()
    assert store._running is not None and len(store.manifest.state("kv").l0) == 2
    threading.Timer(0.2, release.set).start()
    store.close()
    again = StateStore(ObjectStore(str(tmp_path)), policy=POLICY)
    levels = again.manifest.state("kv")
    assert levels.l0 == () and len(levels.levels[0]) == 1 and again.stats["compactions"] == 0
    assert _read(again, None)[0] == {1: 1, 2: 2, 3: 2}
    again.close()


def test_the_store_on_an_s3_server_with_faults(s3_url, s3_options, tmp_path):
    """The same code against an S3-protocol server (moto on loopback): conditional puts fence,
    compaction, GC and a crashed commit behave as on a folder, with transient faults retried."""
    root = f"{s3_url}/{tmp_path.name}"
    rng = np.random.default_rng(11)
    steps = []
    for i in range(12):
        steps.append(("put", [(int(k), int(v)) for k, v in zip(rng.integers(0, KEYS, 10), rng.integers(-5, 6, 10))]))
        steps.append(("delete", [int(k) for k in rng.integers(0, KEYS, 2)]))
        steps += [("seal",)] + ([("crash",)] if i == 4 else []) + ([("reopen",)] if i == 7 else [])
    store = _run(root, steps + [("compact",), ("gc",)], retention=2, faulty=True, options=s3_options)
    assert store.stats["compactions"] >= 2
    assert store.store.retries > 0, "the faulty store injected nothing"
    second = StateStore(ObjectStore(root, s3_options), policy=POLICY)
    store.ingest("kv", _kv([1], [7]), store.manifest.epoch + 1)
    store.seal(store.manifest.epoch + 1).result()
    second.ingest("kv", _kv([1], [8]), second.manifest.epoch + 1)
    with pytest.raises(FencedError, match="another writer"):
        second.seal(second.manifest.epoch + 1).result()
    assert store.table("kv").lookup(np.array([1]))["v"].to_list() == [7]  # the first writer's state
    second.close()
    store.close()


def test_a_stale_writer_cannot_recreate_a_collected_version(tmp_path):
    root = str(tmp_path)
    stale = StateStore(ObjectStore(root), policy=POLICY, background=False)
    live = StateStore(ObjectStore(root), policy=POLICY, background=False)
    for e in range(1, 9):
        live.ingest("kv", _kv([e], [e]), e)
        live.seal(e).result()
    live.collect_garbage()
    assert paths.manifest_key(1) not in live.store.list(paths.MANIFEST_PREFIX)  # old versions are gone
    stale.ingest("kv", _kv([1], [100]), 1)
    with pytest.raises(FencedError, match="another writer"):
        stale.seal(1).result()
    assert live.table("kv").lookup(np.array([1]))["v"].to_list() == [1]
    live.ingest("kv", _kv([9], [9]), 9)
    live.seal(9).result()  # the live writer keeps working
    stale.close()
    live.close()


def test_seal_uploads_off_the_writer_path_and_buffered_rows_are_readable_meanwhile(tmp_path):
    slow = FaultyStore(str(tmp_path), seed=3, latency=0.3)  # every object-store call takes 0.3 s
    store = StateStore(slow, policy=POLICY, background=False, retention_epochs=1)
    store.ingest("kv", _kv([1, 2], [10, 20]), 1)
    pending = store.seal(1)
    assert not pending.done()  # the upload is under way...
    assert _read(store, None)[0] == {1: 10, 2: 20}  # ...and the writer reads its epoch already
    store.ingest("kv", _kv([2], [None]), 2)  # the next epoch runs while the previous one lands
    assert _read(store, None)[0] == {1: 10}
    assert store.manifest.epoch == 0  # nothing is committed before its files are durable
    pending.result()
    assert store.manifest.epoch == 1
    store.seal(2).result()
    assert store.manifest.epoch == 2 and _read(store, None)[0] == {1: 10} and _read(store, 1)[0] == {1: 10, 2: 20}
    store.close()


def test_a_compaction_round_takes_the_deepest_l0_first_and_a_bounded_size(monkeypatch):
    """One round's merges are applied together when its last one ends, so a round is bounded
    (``BATCH_BYTES``): the states with the most L0 runs first, every trivial move, and always at
    least one merge however large."""
    from types import SimpleNamespace

    from millpond.store import store as store_module
    from millpond.store.manifest import Levels

    monkeypatch.setattr(store_module, "BATCH_BYTES", 100)

    def ref(name: str, epoch: int, size: int) -> sst.SstRef:
        return sst.SstRef(name, 0, 10, epoch, epoch, 1, size, "00" * 32)

    runs = {"deep": 5, "mid": 3, "shallow": 2, "moved": 1}
    states = {sid: Levels(tuple(ref(f"{sid}{e}", e, 10) for e in range(n))) for sid, n in runs.items()}
    fake = SimpleNamespace(manifest=SimpleNamespace(states=states))

    def task(sid: str, size: int, move: bool = False) -> compaction.Task:
        return compaction.Task(sid, 0, 1, (ref(sid, 1, size),), 0, False, "p/", 1 << 20, move=move)

    tasks = [task("shallow", 40), task("mid", 70), task("moved", 500, move=True), task("deep", 60)]
    assert [t.state for t in StateStore._batch(fake, tasks)] == ["moved", "deep", "shallow"]  # mid: past 100
    assert [t.state for t in StateStore._batch(fake, [task("mid", 900), task("deep", 1000)])] == ["deep"]
    states["twin"] = states["deep"]  # of equal depth, the smaller merge first
    assert [t.state for t in StateStore._batch(fake, [task("deep", 80), task("twin", 30)])] == ["twin"]


def test_a_merge_cut_into_many_ranges_writes_files_of_the_target_size(tmp_path, monkeypatch):
    """The rows of a range short of a file are carried into the next range's: ranges far smaller
    than a file still give files of about the target size, disjoint, every row once."""
    monkeypatch.setattr(compaction, "MERGE_BYTES", 1)
    monkeypatch.setattr(sst, "BLOCK_BYTES", 256)
    store = ObjectStore(str(tmp_path))
    refs = []
    for i in range(3):  # three overlapping runs, one key in three in each
        keys = list(range(i, 30_000, 3))
        rows = _kv(keys, [k * 10 for k in keys]).with_columns(pl.lit(i + 1).cast(pl.Int64).alias("_ep"))
        refs.append(sst.write_sst(store, f"in/{i}.sst", rows))
    task = compaction.Task("kv", 0, 1, tuple(refs), 10, True, "out/", target_file_bytes=100_000)
    outputs = compaction.run_task(store, task)
    assert 2 < len(outputs) < 20, f"{len(outputs)} files for 30,000 rows of ~100 KB files"
    assert sum(r.rows for r in outputs) == 30_000
    assert all(a.max_kh < b.min_kh for a, b in zip(outputs, outputs[1:])), "outputs overlap"
    assert min(r.rows for r in outputs[:-1]) > 1_000, [r.rows for r in outputs]
