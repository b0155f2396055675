"""SIGKILL the process at seeded crash points (during schema creation, during ingest, inside
Spark tasks before and after they write state, after an epoch's SSTs are written but before the
manifest commit, between epochs); after every kill the state is exact and no source row is
applied twice (COUNT and SUM views would show a doubled row).

A *chain* runs on one root: each cycle draws a crash point ``point:nth`` from the chain's seed,
starts ``tests.crash_worker`` (which finishes the schema, recovers, checks the recovered state
against the oracle and continues the seeded workload) and waits for the kill. The harness then
checks, in this process, that the catalog holds a prefix of the schema and that the committed
state is the oracle after exactly ``acked`` or ``acked + 1`` steps (the step in flight at the
kill is applied entirely or not at all). Every few cycles the harness itself recovers (flushes)
and checks the result; otherwise the next worker recovers. The chain ends with a flush and a
final check. Only real kills count as crash points: a drawn point that the worker never reached
is not counted.
"""

from __future__ import annotations

import getpass
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import crash_worker, workload

REPO = Path(__file__).resolve().parent.parent
WORKER_PATH = os.pathsep.join([str(REPO / "src"), str(REPO)])  # workers import this checkout's millpond

# The largest n drawn for each point's n-th pass: small enough that a worker reaches it within BUDGET
# steps (a step is one log append and one epoch; an epoch runs several stateful tasks per worker).
NTH = {
    "log.before_put": 3,
    "log.after_put": 3,
    "epoch.before_job": 3,
    "task.before_state": 8,
    "task.after_state": 8,
    "epoch.after_job": 3,
    "changes.before_entry": 3,      # views' changes kept, the epoch's entry not yet (nothing readable)
    "epoch.before_commit": 3,       # the epoch's changes kept, its manifest not committed
    "epoch.after_commit": 3,
    "flow.before_merge": 3,         # a flow's partial aggregates computed, not yet merged into its state
    "flow.before_sink": 3,          # a flow's epoch committed, its changes not yet in its sink's log
    "compaction.after_outputs": 2,  # merged files written, their version not yet (background thread)
    "compaction.after_commit": 2,   # compaction's version written, GC not yet run
    "gc.after_delete": 2,           # in the middle of deleting replaced files
    "log.truncate.after_start": 1,  # a keyed table's log start moved, the records below not yet deleted
    "log.after_truncate": 1,        # a keyed table's log truncated, before the next table's pass
    "log.compact.after_put": 1,     # a key-less table's compacted file written, the files it replaces not yet
    "sink.before_commit": 4,        # an epoch committed, its changes not yet in a sink's Delta table
    "sink.after_commit": 4,         # a sink's Delta commit done (the first two: inside CREATE SINK)
    "files.after_record": 1,        # a file of the arrivals folder recorded as taken, its rows not yet appended
    "delta.before_append": 1,       # a Delta version read, not yet appended to the delivered table's log
    "delta.after_append": 1,        # a Delta version appended, the next not yet
    "pg.before_append": 1,          # PostgreSQL's changes read, not yet appended to the shipped table's log
    "pg.after_append": 1,           # PostgreSQL's changes appended, the slot not yet advanced
    "kafka.before_append": 2,       # a partition's messages read, not yet appended to the streamed table's log
    "kafka.after_append": 2,        # a partition's messages appended, the next partition's not yet
}
CATALOG = "catalog.after_put"  # only passed while the schema is created: drawn while it is incomplete
BUDGET = 6  # steps a worker runs past the recovered state before it stops uncrashed
HARNESS_RECOVERS = 0.5  # share of cycles where this process (not the next worker) recovers


@dataclass
class Chain:
    root: str
    seed: int
    open_db: object
    rng: random.Random = field(init=False)
    lo: int = 0  # the root holds the first lo or hi steps (hi - lo <= 1)
    hi: int = 0
    created: int = 0  # schema objects (tables, views) committed so far
    schedule: list[tuple[str, int]] | None = None  # fixed crash points instead of seeded draws
    env: dict[str, str] = field(default_factory=dict)  # for the workers
    kills: list[str] = field(default_factory=list)
    cycle: int = 0
    steps_at: dict[int, int] = field(default_factory=lambda: {0: 0})  # epoch -> the steps its state holds
    based: int = 0  # checks of the views' kept changes from an epoch after the first
    truncated: bool = False  # the keyed table's log was truncated (by the workers)
    _bag: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"crash-chain-{self.seed}")
        self.schema = [name for _, name, _ in crash_worker.setup_statements()]

    # -- drawing crash points ------------------------------------------------------------------
    def draw(self) -> tuple[str, int]:
        if self.schedule is not None:
            return self.schedule[self.cycle % len(self.schedule)]
        left = len(self.schema) - self.created
        if left and self.rng.random() < 0.5:
            return CATALOG, self.rng.randint(1, min(3, left))  # always reached: the worker creates `left`
        if not self._bag:  # every point once per round, in a seeded order
            self._bag = sorted(NTH)
            self.rng.shuffle(self._bag)
        point = self._bag.pop()
        return point, 1 + int(NTH[point] * self.rng.random() ** 2)  # mostly early passes: a cold epoch is dear

    # -- one cycle -----------------------------------------------------------------------------
    def run_cycle(self) -> None:
        point, nth = self.draw()
        started = time.monotonic()
        where = f"seed {self.seed}, cycle {self.cycle}, crash point {point}:{nth} (root {self.root})"
        stop = self.hi + BUDGET
        hold = f"{self.root}.hold"  # a step's upstream writes are not cut by a kill (faults.py)
        Path(hold).unlink(missing_ok=True)
        env = {**os.environ, **self.env, "MILLPOND_CRASH_AT": f"{point}:{nth}", "PYTHONPATH": WORKER_PATH,
               "MILLPOND_CRASH_HOLD": hold}
        env.pop("MILLPOND_CRASH_PID", None)
        cmd = [sys.executable, "-m", "tests.crash_worker", self.root, str(self.seed), str(self.lo), str(self.hi),
               str(stop), ",".join(f"{e}:{k}" for e, k in sorted(self.steps_at.items())[-20:])]
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"{where}: the worker hung for 15 minutes\n{out[-2000:]}\n{err[-3000:]}")
        lines = out.splitlines()
        tail = f"\n--- worker stdout ---\n{out[-2000:]}\n--- worker stderr ---\n{err[-3000:]}"
        killed = proc.returncode == -signal.SIGKILL
        bad = [ln for ln in lines if ln.startswith("MISMATCH")]
        assert not bad, f"{where}: the state recovered by the worker is wrong: {bad[0]}{tail}"
        assert killed or proc.returncode == 0, f"{where}: the worker failed (exit {proc.returncode}){tail}"
        resumed = [int(ln.split()[1]) for ln in lines if ln.startswith("RESUME")]
        acks = [int(ln.split()[1]) for ln in lines if ln.startswith("ACK")]
        for ln in lines:
            if ln.startswith(("RESUME", "ACK")):
                self.steps_at[int(ln.split()[2].lstrip("@"))] = int(ln.split()[1])
        ready = any(ln.startswith("READY") for ln in lines)
        assert ready or not resumed, f"{where}: resumed before the schema was complete{tail}"
        if resumed:
            assert resumed[0] in (self.lo, self.hi), f"{where}: resumed at {resumed[0]}, not {self.lo}/{self.hi}{tail}"
            assert acks == list(range(resumed[0] + 1, resumed[0] + 1 + len(acks))), f"{where}: ACKs out of order{tail}"
            done = acks[-1] if acks else resumed[0]
            self.lo, self.hi = (done, done + 1) if killed else (done, done)
        assert killed or (resumed and self.lo == stop and lines[-1].startswith("DONE")), \
            f"{where}: the worker stopped early{tail}"

        worker_time = time.monotonic() - started
        with failures_named(where):
            self.verify(point, nth, killed, ready, where)
        if killed:
            self.kills.append(f"{point}:{nth}")
        print(f"seed {self.seed} cycle {self.cycle}: {point}:{nth} {'killed' if killed else 'NOT REACHED'}, "
              f"steps {self.lo}/{self.hi}, schema {self.created}/{len(self.schema)}; worker {worker_time:.1f}s "
              f"({' '.join(lines)}), check {time.monotonic() - started - worker_time:.1f}s", flush=True)
        self.cycle += 1

    def verify(self, point: str, nth: int, killed: bool, ready: bool, where: str) -> None:
        """Check the root in this process: a prefix of the schema, a prefix of the steps."""
        db = self.open_db()
        try:
            made = crash_worker.created(db)
            assert made == self.schema[:len(made)], f"{where}: the catalog holds {made}, not a prefix of the schema"
            if ready:
                assert made == self.schema, f"{where}: the worker reported the schema ready, yet it holds {made}"
            else:  # nothing but catalog writes (and CREATE SINK's first writes) happens before the schema is complete
                assert killed and (point == CATALOG or point.startswith("sink.")), \
                    f"{where}: the worker stopped before the schema was ready"
            if killed and point == CATALOG:
                assert len(made) == self.created + nth, \
                    f"{where}: killed after the {nth}-th catalog write, yet {len(made) - self.created} objects were added"
            self.created = len(made)
            if self.created == len(self.schema):
                self.check(db, where, "committed state after the kill", sinks=False)  # sinks settle in a FLUSH
                if self.rng.random() < HARNESS_RECOVERS:
                    db.flush()
                    self.lo = self.hi = self.check(db, where, "state recovered by the test process")
                    self.steps_at[db.epoch] = self.lo
        finally:
            db.close()

    def check(self, db, where: str, what: str, *, sinks: bool = True) -> int:  # noqa: ANN001
        """The number of steps (lo or hi) the state of ``db`` equals; fail if neither."""
        found = {}
        for k in range(self.lo, self.hi + 1):  # (a partial view's read may run an epoch: base anew)
            base = crash_worker.base(db, self.steps_at, self.seed)
            self.based += base is not None and base[0] > 0
            ref = crash_worker.reference(self.seed, k)
            found[k] = workload.mismatches(db, ref, sinks=sinks, base=base)
            if not found[k]:
                return k
        pytest.fail(f"{where}: the {what} equals the oracle after neither {self.lo} nor {self.hi} steps; "
                    f"differing tables/views: {found}")

    def finish(self) -> None:
        where = f"seed {self.seed}, after the last cycle ({self.cycle}: {self.kills[-1:]})"
        with failures_named(where):
            db = self.open_db()
            try:
                assert crash_worker.created(db) == self.schema, f"{where}: the schema is incomplete"
                db.flush()
                self.check(db, where, "final recovered state")
                self.truncated = db.runtime.channel(db.catalog.tables["info"]).start > 0
            finally:
                db.close()


@contextmanager
def failures_named(where: str) -> Iterator[None]:
    """Errors (not failed checks, which name it already) say which chain, cycle and point."""
    try:
        yield
    except AssertionError:
        raise
    except Exception as exc:
        pytest.fail(f"{where}: {type(exc).__name__}: {exc}")


@pytest.fixture(autouse=True)
def interpreted_plans(spark):  # noqa: ANN001
    """This process's epochs (recovery checks) skip whole-stage code generation, as the workers do:
    each epoch plans anew, and compiling its code costs more than the tiny data it runs on."""
    key = "spark.sql.codegen.wholeStage"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    yield
    spark.conf.set(key, before)


def run_chain(open_db, root: str, seed: int, kills: int, schedule=None, env=None) -> Chain:  # noqa: ANN001
    chain = Chain(root, seed, open_db, schedule=schedule, env=env or {})
    limit = kills + kills // 2 + 3  # a drawn point may be missed (e.g. the steps changed nothing)
    while len(chain.kills) < kills and chain.cycle < limit:
        chain.run_cycle()
    chain.finish()
    assert len(chain.kills) == kills, f"seed {seed}: only {len(chain.kills)} of {kills} drawn crash points " \
                                      f"were reached in {chain.cycle} cycles: {chain.kills}"
    if kills >= 10:  # a long chain: its workers truncated the logs, and its checks went past the retention
        assert chain.truncated, f"seed {seed}: the keyed table's log was never truncated"
        assert chain.based > 0, f"seed {seed}: the views' changes were never checked past the retention"
    return chain


QUICK = [  # the first five in make test, the rest in make chaos
    ("log.after_put", 1),         # during ingest: the batch is durable but unacknowledged
    ("task.before_state", 2),     # inside a stateful task, before it writes state
    ("epoch.after_job", 1),       # SSTs (and views' changes files) written, manifest not committed
    ("changes.before_entry", 1),  # an epoch's changes half kept, not committed: replayed, read once
    ("files.after_record", 1),    # a file taken (recorded), its rows not appended: appended once
    (CATALOG, 2),                 # schema half created: the next worker finishes it
    ("flow.before_merge", 1),     # a flow's partials computed on Spark, its merge on the driver not yet
    ("log.before_put", 2),        # during ingest: the batch never made it
    ("task.after_state", 3),      # inside a stateful task, after it wrote state
    ("epoch.before_job", 1),      # input ranges fixed, no job yet
    ("epoch.after_commit", 2),    # between epochs
    ("compaction.after_outputs", 1),  # merged files written, the compaction's version not
    ("log.truncate.after_start", 1),  # a log truncation half done
    ("log.compact.after_put", 1),     # a log compaction half done
    ("delta.before_append", 1),   # a Delta version read, its rows not appended: read again
    ("delta.after_append", 1),    # a Delta version appended: not read again
    ("pg.before_append", 2),      # PostgreSQL's transactions read, not appended: read again from the slot
    ("pg.after_append", 2),       # appended, the slot not advanced: the transactions skipped by their LSN
    ("kafka.before_append", 2),   # a partition's messages read, not appended: read again from its offset
    ("kafka.after_append", 2),    # one partition appended, the other not: each goes on from its own
]


@pytest.fixture(autouse=True)
def pg_chain(request, monkeypatch):  # noqa: ANN001
    """The chains' PostgreSQL server and Kafka broker (the session's): the tables ``shipped`` and
    ``streamed`` and the sinks ``per_user_pg`` and ``per_user_kafka`` (workload.SHIPPED, STREAMED,
    PG_SINKS, KAFKA_SINKS) are in the schema of every chain, harness and workers."""
    server = request.getfixturevalue("postgres_cdc")
    monkeypatch.setenv("MILLPOND_TEST_PG", f"{server.port} {server.user or getpass.getuser()}")
    monkeypatch.setenv("MILLPOND_TEST_KAFKA", request.getfixturevalue("kafka").bootstrap)


@pytest.mark.slow
def test_sigkill_chain_recovers_exactly_once(open_db, root):
    """Quick: a kill during ingest, inside a task, before the commit, while an epoch's changes are
    half kept and between a file's record and its append, and recovery after each (every other
    kind of point: ``make chaos``)."""
    run_chain(open_db, root, seed=11, kills=len(QUICK[:5]), schedule=QUICK[:5])


@pytest.mark.chaos
def test_sigkill_chain_at_every_other_kind_of_point(open_db, root):
    run_chain(open_db, root, seed=11, kills=len(QUICK[5:]), schedule=QUICK[5:])


@pytest.mark.chaos
def test_sigkill_chain_around_the_sinks_commits(open_db, root):
    """Kills inside CREATE SINK (its first writes) and around later Delta commits: after each, the
    sinks' Delta tables equal their views over the oracle once a FLUSH ran (workload.SINKS)."""
    schedule = [("sink.after_commit", 1), ("sink.before_commit", 2), ("sink.before_commit", 3),
                ("sink.after_commit", 4)]
    run_chain(open_db, root, seed=12, kills=len(schedule), schedule=schedule)


CHAOS_SEEDS = [3, 5, 8, 13, 21, 34, 55, 89]  # 8 chains x 26 kills = 208 crash points


@pytest.fixture(scope="session")
def class_archive(tmp_path_factory) -> dict[str, str]:  # noqa: ANN001
    """Workers' environment with a JVM class-data archive, written by one uncrashed worker's JVM on
    exit: every later worker starts seconds sooner. Without an archive (the JVM wrote none), none."""
    folder = tmp_path_factory.mktemp("jvm")
    archive = folder / "worker.jsa"
    env = {**os.environ, "MILLPOND_TEST_CDS_DUMP": str(archive), "PYTHONPATH": WORKER_PATH}
    for name in ("MILLPOND_CRASH_AT", "MILLPOND_CRASH_PID", "PYSPARK_SUBMIT_ARGS"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "tests.crash_worker", str(folder / "root"), "1", "0", "0", "1"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"an uncrashed worker failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return {"MILLPOND_TEST_CDS": str(archive)} if archive.exists() else {}


@pytest.mark.chaos
@pytest.mark.parametrize("seed", CHAOS_SEEDS)
def test_chaos_sigkill_chain(open_db, root, class_archive, seed):
    run_chain(open_db, root, seed=seed, kills=26, env=class_archive)
