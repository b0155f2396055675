"""The state store: versions of levelled SSTs on object storage, with compaction, pins and GC.

Object storage is the home of state; memory and local disk are caches (``cache.py``). One
:class:`StateStore` per writer (the coordinator) owns the current manifest version and is the
only thing that writes versions, so commits and compaction results are applied one at a time.

Commit of epoch ``e`` (:meth:`StateStore.commit`; steps 5 and 6 of the epoch protocol in
:mod:`millpond.engine.coordinator`), in order:

1. every file of ``e`` is already durable (a put returns only then; Spark tasks wrote them);
2. write version ``v + 1`` = {epoch ``e``, the new files on top of L0, the commit metadata}
   with put-if-absent — the one atomic step; a second writer is fenced here;
3. apply finished compactions (each a version of its own) and start the next one;
4. backpressure: while a state table has ``l0_stall`` L0 runs, wait for compaction (counted in
   ``stats["stalls"]`` and logged) instead of letting reads slow down without bound. A run is one
   epoch's files (:func:`~millpond.store.compaction.l0_runs`): its tasks' and steps' files hold
   disjoint keys, so a read meets one of them per key.

A plain key-value API sits on the same machinery (used by tests and benchmarks): :meth:`ingest`
puts sorted puts/deletes of epoch ``e`` into the *shared buffer*, readable by this writer at once;
:meth:`seal` uploads the buffer in the background and commits ``e`` when all of its files are
durable, while the writer goes on ingesting ``e + 1``.

Garbage collection (:meth:`collect_garbage`) deletes files no retained version references and
that were created on a version older than the current one (so files of another writer's
in-flight work are never touched), and manifest versions older than the oldest pinned one.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import Callable, ContextManager, Iterator

import polars as pl
import pyarrow as pa

from millpond import faults, paths
from millpond.columns import COUNT, DEL, EP, KH
from millpond.errors import MillpondError, StorageError
from millpond.store import compaction
from millpond.store.manifest import Levels, Manifest, ManifestStore
from millpond.store.objects import ObjectStore
from millpond.store.sst import SstRef, write_sst
from millpond.store.state_table import StateTable

__all__ = ["StateStore"]

log = logging.getLogger("millpond.store")

BATCH_BYTES = 512 << 20  # a round of compaction merges about this many input bytes (StateStore._batch)

# A compaction runner takes (store, tasks) and returns each task's outputs (in-process or Spark).
Runner = Callable[[ObjectStore, list[compaction.Task]], list[tuple[SstRef, ...]]]


def run_in_process(store: ObjectStore, tasks: list[compaction.Task]) -> list[tuple[SstRef, ...]]:
    return [compaction.run_task(store, t) for t in tasks]


class StateStore:
    def __init__(self, store: ObjectStore, *, policy: compaction.Policy | None = None, retention_epochs: int = 0,
                 background: bool = True, runner: Runner = run_in_process,
                 clock: Callable[[], float] = time.time, ids: Callable[[], str] = paths.random_id):
        self.store = store
        self.clock, self.ids = clock, ids
        self.policy = policy or compaction.Policy()
        self.retention_epochs = retention_epochs
        self.background, self.runner = background, runner
        # wraps each compaction round (its tasks) while it runs: the engine shows it as a job
        self.watch: Callable[[list[compaction.Task]], ContextManager[None]] = lambda _tasks: nullcontext()
        self.manifests = ManifestStore(store)
        self.manifest = self.manifests.latest()  # recovery: the last committed version, read lazily
        self.stats = defaultdict(int)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="millpond-compact")
        self._running: Future | None = None
        self._running_prefix: str | None = None
        self._running_safe = 0  # the safe epoch of the compaction in flight
        self._buffer: dict[int, dict[str, pa.Table]] = {}  # epoch -> state -> staged rows
        self._specs: dict[str, tuple[tuple[str, ...], bool]] = {}
        self._uploader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="millpond-upload")
        self._lock = threading.Lock()
        self._held: Counter[int] = Counter()  # manifest version -> readers of this process holding it

    # -- commit -------------------------------------------------------------------------------
    def commit(self, epoch: int, new: dict[str, list[SstRef]], offsets: dict, *,
               keep: Callable[[str], bool] = lambda _sid: True, failed: dict[str, dict] | None = None,
               expiry: dict[str, list] | None = None, defaults: dict[str, str] | None = None,
               filling: dict[str, list[int]] | None = None) -> Manifest:
        """Commit ``epoch``: ``new`` files go on top of each state's L0; states for which ``keep``
        is false are dropped from the version (a dropped view's state); ``failed`` replaces the
        failed consumers (default: they stay as they are); ``expiry`` sets states' expiry floors
        and ``defaults`` the columns its older files lack (:class:`~millpond.store.manifest.Manifest`;
        default: as they are); ``filling`` replaces the views backfilling in bounded epochs (default: as
        they are, those still in ``offsets``)."""
        if epoch <= self.manifest.epoch:
            raise MillpondError(f"epoch {epoch} is not after the committed epoch {self.manifest.epoch}")
        states = {sid: lv for sid, lv in self.manifest.states.items() if keep(sid)}
        for sid, refs in new.items():
            old = states.get(sid, Levels())
            states[sid] = Levels((*sorted(refs, key=lambda r: r.key), *old.l0), old.levels)
        failed = self.manifest.failed if failed is None else failed
        expiry = {sid: floor for sid, floor in {**self.manifest.expiry, **(expiry or {})}.items() if sid in states}
        defaults = {sid: d for sid, d in {**self.manifest.defaults, **(defaults or {})}.items() if sid in states}
        self._write(Manifest(self.manifest.version + 1, epoch, self.manifest.safe_epoch, states, offsets, failed,
                             expiry, defaults,
                             {k: v for k, v in (self.manifest.filling if filling is None else filling).items()
                              if k in offsets}))
        self.maintain()
        return self.manifest

    def _write(self, manifest: Manifest) -> None:
        self.manifests.commit(manifest)  # 2. the atomic step (FencedError if the version is taken)
        with self._lock:  # readers see the new version and the shrunk buffer together
            self.manifest = manifest
            for e in [e for e in self._buffer if e <= manifest.epoch]:
                del self._buffer[e]

    # -- compaction ---------------------------------------------------------------------------
    def maintain(self) -> None:
        """Apply finished compactions, start the next one, and stall while L0 is past its bound."""
        self._apply_finished(wait=False)
        if self._running is None and self._start() and not self.background:
            self._apply_finished(wait=True)  # inline mode: one compaction round per commit
        while self._l0_depth() >= self.policy.l0_stall and self._running is not None:
            self.stats["stalls"] += 1
            log.warning("state store: L0 holds %d runs (bound %d); waiting for compaction",
                        self._l0_depth(), self.policy.l0_stall)
            self._apply_finished(wait=True)
            self._start()

    def compact(self) -> None:
        """Compact until every state table is within the policy (synchronously)."""
        self._apply_finished(wait=True)
        while self._start(force_wait=True):
            self._apply_finished(wait=True)

    def _l0_depth(self) -> int:
        return max((compaction.l0_runs(lv.l0) for lv in self.manifest.states.values()), default=0)

    def safe_epoch(self) -> int:
        pinned = [p["epoch"] for p in self.pins()]
        return max(self.manifest.safe_epoch, min([self.manifest.epoch - self.retention_epochs, *pinned]))

    def _start(self, force_wait: bool = False) -> bool:
        safe = self.safe_epoch()
        prefix = paths.sst_compaction_prefix(self.manifest.version, self.ids()[:12])
        tasks = [t for sid, lv in sorted(self.manifest.states.items())
                 if (t := compaction.pick(sid, lv, self.policy, safe, prefix, self.manifest.expiry.get(sid),
                                          self.manifest.defaults.get(sid)))
                 is not None]
        if not tasks:
            return False
        tasks = self._batch(tasks)
        self._running_prefix, self._running_safe = prefix, safe
        if self.background and not force_wait:
            self._running = self._pool.submit(self._run, tasks)
        else:
            done: Future = Future()
            done.set_result(self._run(tasks))
            self._running = done
        return True

    def _batch(self, tasks: list[compaction.Task]) -> list[compaction.Task]:
        """The tasks of one round: the states with the most L0 runs first (of equal depth, the
        smaller merges: the most runs gone for the bytes), up to :data:`BATCH_BYTES` of input
        (moves cost nothing: all of them). A round's results are applied together when its last
        task ends, so a round of every state's merges kept each one waiting for all (after TPC-H
        SF 1's backfill: 43 merges of 5.7 GB, not one applied through 20 refreshes at the
        compactor's lower priority)."""
        def cost(task: compaction.Task) -> int:
            return 0 if task.move else sum(ref.size for ref in task.inputs)

        depth = {sid: compaction.l0_runs(lv.l0) for sid, lv in self.manifest.states.items()}
        batch, size = [], 0
        for task in sorted(tasks, key=lambda t: (not t.move, -depth.get(t.state, 0), cost(t), t.state)):
            if cost(task) and size and size + cost(task) > BATCH_BYTES:  # the first merge always goes
                continue
            batch.append(task)
            size += cost(task)
        return batch

    def _run(self, tasks: list[compaction.Task]):  # noqa: ANN202
        with self.watch(tasks):
            outputs = self.runner(self.store, tasks)
        faults.point("compaction.after_outputs")
        return tasks, outputs

    def _apply_finished(self, wait: bool) -> None:
        running = self._running
        if running is None or (not wait and not running.done()):
            return
        self._running = self._running_prefix = None
        try:
            tasks, outputs = running.result()
        except Exception as exc:  # a failed compaction loses nothing: its inputs are still live
            self.stats["compaction_failures"] += 1
            log.warning("state store: compaction failed and will be retried: %s", exc)
            return
        states = dict(self.manifest.states)
        applied = 0
        for task, outs in zip(tasks, outputs):
            levels = states.get(task.state)
            merged = compaction.apply(levels, task, outs) if levels is not None else None
            if merged is not None:
                states[task.state] = merged
                applied += 1
                self.stats["compacted_bytes"] += sum(r.size for r in task.inputs)
        if not applied:
            return
        safe = max(self.manifest.safe_epoch, max(t.safe_epoch for t in tasks))
        self._write(Manifest(self.manifest.version + 1, self.manifest.epoch, safe, states, self.manifest.offsets,
                             self.manifest.failed, self.manifest.expiry, self.manifest.defaults,
                             self.manifest.filling))
        self.stats["compactions"] += applied
        faults.point("compaction.after_commit")
        self.collect_garbage()

    # -- pins and garbage collection ----------------------------------------------------------
    @contextmanager
    def pin(self, epoch: int | None = None) -> Iterator[Manifest]:
        """Keep ``epoch`` (default: the current one) readable and the files of the current version
        alive until the block exits, also against other processes' compaction and GC."""
        epoch = self.manifest.epoch if epoch is None else epoch
        floor = max(self.manifest.safe_epoch, self._running_safe if self._running is not None else 0)
        if epoch < floor:
            raise MillpondError(f"epoch {epoch} is no longer readable: state below epoch {floor} is "
                                "compacted (raise the retention to keep it)")
        key = paths.pin_key(self.ids())
        self.store.put(key, json.dumps({"epoch": epoch, "version": self.manifest.version,
                                        "since": self.clock()}).encode())
        try:
            yield self.manifest
        finally:
            self.store.delete(key)

    @contextmanager
    def hold(self) -> Iterator[Manifest]:
        """The current version, its files kept from garbage collection until the block exits: a
        reader of this process reads it while epochs and compactions commit newer ones. Costs no
        I/O (unlike :meth:`pin`, which other processes see and which keeps old epochs readable)."""
        with self._lock:
            manifest = self.manifest
            self._held[manifest.version] += 1
        try:
            yield manifest
        finally:
            with self._lock:
                self._held[manifest.version] -= 1
                if not self._held[manifest.version]:
                    del self._held[manifest.version]

    def pins(self) -> list[dict]:
        out = []
        for key in self.store.list(paths.PIN_PREFIX):
            try:
                out.append(json.loads(self.store.get(key)))
            except StorageError:
                continue  # released while we listed
        return out

    def collect_garbage(self) -> int:
        """Delete unreferenced files and old versions; returns the number of files deleted."""
        with self._lock:  # a reader holds the current version, or one it took before it: counted here
            current, held = self.manifest, list(self._held)
        pinned = [p["version"] for p in self.pins()] + held
        oldest = min([current.version, *pinned])
        keep = set(current.files())
        versions = [v for v in self.manifests.versions() if v < current.version]
        for v in versions:
            if v >= oldest:
                keep |= self.manifests.load(v).files()
        running = self._running_prefix
        deleted = 0
        for key in self.store.list(paths.SST_PREFIX):
            if key in keep or (running and key.startswith(running)):
                continue
            if paths.parse_sst_version(key) < current.version:  # never another writer's in-flight files
                self.store.delete(key)
                deleted += 1
                faults.point("gc.after_delete")
        for v in versions:
            if v < oldest:
                self.store.delete(paths.manifest_key(v))
        self.stats["gc_deleted"] += deleted
        return deleted

    def close(self) -> None:
        """Stop: a compaction under way in a runner that can stop (a child process) is dropped,
        not waited for (its inputs are still live); one that ran to its end is kept."""
        self._uploader.shutdown(wait=True)
        running, stop = self._running, getattr(self.runner, "stop", None)
        if running is not None and not running.cancel() and not running.done() and stop is not None:
            stop()
        self._pool.shutdown(wait=True)
        if running is not None and not running.cancelled() and running.exception() is None:
            try:  # a compaction that ran to its end is kept, not redone by the next open
                self._apply_finished(wait=True)
            except Exception as exc:  # noqa: BLE001 - its inputs are still live: nothing is lost
                log.debug("state store: a finished compaction was not applied at close: %s", exc)
        if stop is not None:
            stop()

    # -- reads --------------------------------------------------------------------------------
    def follow(self) -> Manifest:
        """Adopt the newest manifest version another writer committed (a read-only follower; a
        writer never calls this: it holds its own version). A version may be collected between
        listing and reading it: then a newer one exists, and that one is read."""
        for _ in range(8):
            try:
                latest = self.manifests.latest()
            except StorageError:
                continue
            with self._lock:
                if latest.version >= self.manifest.version:
                    self.manifest = latest
            return self.manifest
        raise StorageError(f"cannot read the newest manifest version under {self.store.root!r}")

    def table(self, state: str, keys: tuple[str, ...] = (), *, additive: bool = False,
              epoch: int | None = None) -> StateTable:
        """A state table as of ``epoch`` (default: latest), including this writer's shared buffer."""
        if epoch is not None and epoch < self.manifest.safe_epoch:
            raise MillpondError(f"epoch {epoch} of {state!r} is no longer readable: state below epoch "
                                f"{self.manifest.safe_epoch} was compacted (raise the retention to keep it)")
        with self._lock:
            buffered = tuple(by_state[state] for e, by_state in sorted(self._buffer.items())
                             if (epoch is None or e <= epoch) and state in by_state)
            levels = self.manifest.state(state)
        return StateTable(self.store, levels, keys, additive=additive, epoch=epoch, name=state, buffered=buffered)

    # -- the plain key-value API: shared buffer and async upload ------------------------------
    def ingest(self, state: str, rows: pa.Table | pl.DataFrame, epoch: int, *, keys: tuple[str, ...] = (),
               additive: bool = False) -> None:
        """Stage sorted puts and deletes (``_kh`` + value columns + ``_del``) of ``epoch``; readable
        by this writer at once, durable when :meth:`seal` of ``epoch`` completes."""
        df = rows if isinstance(rows, pl.DataFrame) else pl.from_arrow(rows)
        if epoch <= self.manifest.epoch:
            raise MillpondError(f"cannot ingest into epoch {epoch}: epoch {self.manifest.epoch} is committed")
        missing = {KH, DEL} - set(df.columns)
        if missing:
            raise MillpondError(f"ingest into {state!r} needs columns {sorted(missing)}")
        if self._specs.setdefault(state, (tuple(keys), additive)) != (tuple(keys), additive):
            raise MillpondError(f"state {state!r} was ingested with other keys or additivity")
        staged = df.with_columns(pl.lit(epoch, dtype=pl.Int64).alias(EP))
        ident = [KH, *keys]
        with self._lock:  # a later write of a key in the same epoch replaces an earlier one
            by_state = self._buffer.setdefault(epoch, {})
            if state in by_state:
                staged = pl.concat([pl.from_arrow(by_state[state]), staged], how="vertical_relaxed")
            if additive:
                staged = staged.group_by(ident, maintain_order=True).agg(
                    pl.col(COUNT).sum(), pl.col(DEL).first(), pl.col(EP).first())
            else:
                staged = staged.unique(ident, keep="last", maintain_order=True)
            by_state[state] = staged.sort(KH).to_arrow()

    def seal(self, epoch: int, metadata: dict | None = None) -> Future:
        """Upload ``epoch``'s buffer off the caller's thread and commit it; the future completes
        when the version is written. Later epochs may be ingested meanwhile."""
        return self._uploader.submit(self._upload_and_commit, epoch, metadata or {})

    def _upload_and_commit(self, epoch: int, metadata: dict) -> Manifest:
        with self._lock:
            staged = self._buffer.get(epoch, {})
        tag = self.ids()[:12]
        new = {}
        for state, table in sorted(staged.items()):
            keys, additive = self._specs[state]
            new[state] = [write_sst(self.store, paths.sst_key(self.manifest.version, epoch, tag, state, 0),
                                    pl.from_arrow(table), keys=keys, additive=additive)]
        return self.commit(epoch, new, metadata)  # the buffer of ``epoch`` goes with the new version
