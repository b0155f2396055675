"""One link of a crash chain: open a root, finish the schema, recover, then run the seeded
workload from where the last link stopped until a crash point (``MILLPOND_CRASH_AT``) SIGKILLs
the process, or ``STOP`` steps are done.

    python -m tests.crash_worker ROOT SEED LO HI STOP [KNOWN]

``LO``/``HI``: the root holds the first ``LO`` or ``HI`` (= ``LO`` or ``LO + 1``) workload steps,
committed or not (the step in flight at the last kill is applied entirely or not at all). After
the recovery flush the worker checks which one against the oracle and continues from there.
``KNOWN``: epochs whose state was a number of steps, ``e:k,e:k...``; the views' kept changes are
checked from the earliest of them still kept (the root keeps only ``RETENTION`` of them).

The root keeps the changes of its last ``RETENTION`` epochs (``SET retention``, the first schema
statement) and a worker truncates and compacts the tables' logs every ``TRUNCATE_EVERY`` epochs,
whatever they hold, so kills land in truncations and compactions too.

Lines on stdout, for the harness:

* ``READY``: every table and view of the workload exists.
* ``RESUME <k> @<e>``: recovered; the state is exactly the first ``k`` steps (at epoch ``e``).
* ``ACK <i> @<e>``: step ``i`` (1-based, absolute) is applied and flushed (the last epoch ``e``).
* ``MISMATCH <detail>`` (exit 3): the recovered state matches neither ``LO`` nor ``HI`` steps.
* ``DONE``: ``STOP`` reached without a crash.

Each line ends with the seconds since the worker started.

Points inside Spark tasks run in Python worker processes; they kill this process by the pid in
``MILLPOND_CRASH_PID``, which must be in the environment before Spark starts (the workers
inherit it).
"""

from __future__ import annotations

import os
import shlex
import sys
import time

from tests import workload, workload_upstream


RETENTION = "3 epochs"
TRUNCATE_EVERY = 2


def setup_statements(root: str = "<root>") -> list[tuple[str, str, str]]:
    """The retention, then the workload's DDL as (kind, name, statement), in the order
    ``workload.setup`` runs it."""
    from millpond.sql.statements import parse

    out = [("setting", "retention", f"SET retention = '{RETENTION}'")]
    for text in (s.strip() for s in workload.TABLES.split(";")):
        if text:
            out.append(("table", parse(text)[0].this.this.name, text))
    out.append(("table", "arrivals", workload.files_statement(root)))
    out.append(("table", "delivered", workload.delta_statement(root)))
    if workload.pg_server():
        out.append(("table", workload.SHIPPED, workload_upstream.pg_statement(root)))
    if workload.kafka_server():
        out.append(("table", workload.STREAMED, workload_upstream.kafka_statement(root)))
    out += [("index", name, sql) for name, sql in workload.INDEXES.items()]
    out += [("view", name, f"CREATE MATERIALIZED VIEW {name} AS {sql}") for name, sql in workload.VIEWS.items()]
    out.append(("view", workload.ARRIVALS_VIEW[0], f"CREATE MATERIALIZED VIEW {workload.ARRIVALS_VIEW[0]} AS "
                                                   f"{workload.ARRIVALS_VIEW[1]}"))
    out.append(("view", workload.DELIVERED_VIEW[0], f"CREATE MATERIALIZED VIEW {workload.DELIVERED_VIEW[0]} AS "
                                                    f"{workload.DELIVERED_VIEW[1]}"))
    for server, (name, sql) in ((workload.pg_server, workload.SHIPPED_VIEW),
                                (workload.kafka_server, workload.STREAMED_VIEW)):
        if server():
            out.append(("view", name, f"CREATE MATERIALIZED VIEW {name} AS {sql}"))
    out += [("view", name, sql) for name, sql in workload.partial_views().items()]
    out += [("flow", name, f"CREATE FLOW {name} SINK TO {sink} AS {sql}")
            for name, (sink, sql) in workload.FLOWS.items()]
    out += [("sink", name, sql) for name, sql in workload.sink_statements(root).items()]
    return out


def _made(db, kind: str):  # noqa: ANN001, ANN202
    return {"table": db.catalog.tables, "index": db.catalog.indexes, "view": db.catalog.views,
            "flow": db.catalog.flows, "sink": db.catalog.sinks,
            "setting": {"retention"} if db.catalog.retention is not None else ()}[kind]


def created(db) -> list[str]:  # noqa: ANN001
    """Names of the workload's tables, indexes, views and flows that exist on the root, in setup order."""
    return [name for kind, name, _ in setup_statements() if name in _made(db, kind)]


def finish_setup(db) -> None:  # noqa: ANN001
    """Create what a crash during setup left out (each statement commits one catalog version)."""
    workload.ensure_delta(db.root)
    if workload.pg_server():
        workload_upstream.ensure_pg(db.root)
    if workload.kafka_server():
        workload_upstream.ensure_kafka(db.root)
    for kind, name, statement in setup_statements(db.root):
        if name not in _made(db, kind):
            db.sql(statement)


def submit_args() -> str:
    """Spark options for a process that lives for a few epochs: it starts faster with the JVM's
    quick compiler tier and without whole-stage code generation (results are the same).

    ``MILLPOND_TEST_CDS_DUMP=<file>`` writes the JVM classes loaded by this process to a
    class-data archive when the JVM exits; ``MILLPOND_TEST_CDS=<file>`` maps such an archive,
    which saves seconds of class loading (an unusable archive is ignored). JVM log lines go to
    stderr, away from this worker's protocol on stdout.
    """
    java = ["-XX:TieredStopAtLevel=1", "-Xlog:disable", "-Xlog:all=warning:stderr"]
    if os.environ.get("MILLPOND_TEST_CDS_DUMP"):
        java.append(f"-XX:ArchiveClassesAtExit={os.environ['MILLPOND_TEST_CDS_DUMP']}")
    elif os.environ.get("MILLPOND_TEST_CDS"):
        java.append(f"-XX:SharedArchiveFile={os.environ['MILLPOND_TEST_CDS']}")
    return (f"--driver-java-options {shlex.quote(' '.join(java))} "
            "--conf spark.sql.codegen.wholeStage=false pyspark-shell")


def reference(seed: int, count: int) -> workload.Reference:
    ref = workload.Reference()
    for step in workload.steps(seed, count, files=True, alter=True):
        ref.apply(step)
    return ref


def base(db, known: dict[int, int], seed: int) -> tuple[int, workload.Reference] | None:  # noqa: ANN001
    """What :func:`workload.mismatches` checks the views' changes from: the earliest ``known``
    epoch (epoch -> the steps its state holds) whose changes since are kept, and the oracle then;
    None: no such epoch."""
    oldest = db.runtime.coordinator.changes.oldest()
    kept = [e for e in known if e >= (oldest or 1) - 1]
    return (min(kept), reference(seed, known[min(kept)])) if kept else None


def main(root: str, seed: int, lo: int, hi: int, stop: int, known: dict[int, int]) -> int:
    started = time.monotonic()

    def say(line: str) -> None:  # seconds since start last, for the harness's timing log
        print(f"{line} {time.monotonic() - started:.1f}s", flush=True)

    os.environ["MILLPOND_CRASH_PID"] = str(os.getpid())  # before Spark starts: its workers inherit it
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", submit_args())
    import millpond
    from millpond.engine import upkeep
    from millpond.spark.session import local_session

    upkeep.TRUNCATE_EVERY, upkeep.TRUNCATE_FLUSH_RECORDS = TRUNCATE_EVERY, 1  # every pass truncates what it can

    spark = local_session(cores="2", shuffle_partitions=2)
    say("SPARK")
    db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    finish_setup(db)
    say("READY")
    db.flush()  # recovery: replays the range logged but not committed before the last kill
    found, resume = {}, None
    for k in range(lo, hi + 1):
        found[k] = workload.mismatches(db, reference(seed, k), base=base(db, known, seed))
        if not found[k]:
            resume = k
            break
    if resume is None:
        print(f"MISMATCH after recovery, differing from the oracle: {found}", flush=True)
        return 3
    say(f"RESUME {resume} @{db.epoch}")
    plan = workload.steps(seed, stop, files=True, alter=True)
    for i in range(resume, stop):
        workload.apply(db, plan[i])
        db.flush()
        workload.read_partial(db, i)  # upqueries: fill and evict epochs, under the same crash points
        say(f"ACK {i + 1} @{db.epoch}")
    db.close()
    say("DONE")
    return 0


if __name__ == "__main__":
    pairs = (p.split(":") for p in (sys.argv[6] if len(sys.argv) > 6 else "0:0").split(","))
    sys.exit(main(sys.argv[1], *map(int, sys.argv[2:6]), {int(e): int(k) for e, k in pairs}))
