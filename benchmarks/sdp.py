"""millpond against Spark Declarative Pipelines: the same two views over a growing history.

A Parquet history of ``ev(k BIGINT, p BIGINT, v BIGINT)`` (k in 10,000 keys, p in 10,000 products)
grows by rounds of R rows, up to ``--history`` rows, next to a 10,000-row dimension
``dim(p BIGINT, name VARCHAR)`` (500 names). Two views:

- ``agg``:  SELECT k, count(*) AS n, sum(v) AS s, max(v) AS m FROM ev GROUP BY k
- ``join``: SELECT d.name, count(*) AS n, sum(e.v) AS s FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name

Per round, the round's rows are written as one new Parquet file of the history (untimed), then:

- **SDP** runs one pipeline update of a project (``spark-pipeline.yml`` + one SQL file: temporary
  views ``ev`` and ``dim`` over the Parquet folders, ``CREATE MATERIALIZED VIEW`` for each view):
  in Spark 4.3 every update recomputes every materialized view from all the history. Timed: what
  ``spark-pipelines run`` does once its session is up — create the dataflow graph, register the
  SQL file, start the run and read its events until the run completes (``pyspark.pipelines``' own
  functions, as its ``cli.py`` calls them).
- **millpond** (``connect(root, spark=local_session(cores="2"), interval=None)``, tables ``ev``
  — ordinary, or ``APPEND ONLY`` with ``--append-only`` — and ``dim (p BIGINT PRIMARY KEY, name
  VARCHAR)``): ``db.insert`` of the round's rows (untimed: the log append, as the Parquet file is
  for SDP), then ``db.flush()`` (timed: the epoch maintaining both views).

SDP runs against Spark Connect, and a Spark Connect client cannot share a Python process with
millpond's classic session (``SparkSession.builder.remote`` makes every later PySpark call in the
process take the Connect path). So SDP runs in a **second process**, started once: it starts its
own local Spark Connect server (``SparkSession.builder.remote("local[2]")``: a JVM with the Connect
plugin, in that process) and runs one update per round when asked; its JVM start is not timed.
Both sides get the same Spark settings (``local[2]``, 2 shuffle partitions, 4 GB driver, UI off;
SDP keeps Spark's adaptive execution on, its default). The two JVMs take turns: while one side
runs, the other is idle; millpond's background compaction is waited for before SDP runs (its
time printed apart), so it never runs during SDP's update.

Printed per round: the history's rows; SDP's and millpond's seconds and their ratio (SDP /
millpond: higher is better for millpond); the same in CPU seconds of each side's process tree (its
JVM and Python workers included: less sensitive than wall time to other runs on a shared machine,
whose load average is printed last); where millpond's epoch went: ``build`` (the driver building
the DataFrames), ``job`` (the Spark job), ``post`` (the rest of ``flush``: the changelog, the
commit), the stateful tasks' summed ``input`` / ``apply`` / ``write`` seconds; the compaction the
epoch started, off the epoch's path (its wait, CPU seconds and the MB of SSTs it merged); the SST
files and MB under the root and the log's MB. At the end: the ratio at the last round; millpond's
last round / its second round (flatness: the first round warms up); CPU seconds per round over the
two halves of the later rounds (SDP, millpond's epochs, millpond's compaction: how each grows with
the history); the tasks' time per operator in the second and last rounds; millpond's state tables
(L0 files, MB per level); and both systems' views checked equal to DuckDB over all the history
(SDP's materialized views read from its warehouse folder as Parquet, millpond's with ``db.sql``).
The targets set for it are printed beside the figures, not enforced.

    .venv/bin/python benchmarks/sdp.py [--history 4000000] [--round 500000] [--append-only]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from ev_data import delta, dimension

CORES = "2"
QUERIES = {
    "agg": "SELECT k, count(*) AS n, sum(v) AS s, max(v) AS m FROM ev GROUP BY k",
    "join": "SELECT d.name, count(*) AS n, sum(e.v) AS s FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name",
}
SPARK_CONF = {  # SDP's server: as millpond's local_session, less its Python-worker settings
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": CORES,
    "spark.default.parallelism": CORES,
    "spark.driver.memory": "4g",
    "spark.sql.session.timeZone": "UTC",
}


def du(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path``."""
    sizes = [os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs]
    return len(sizes), sum(sizes)


def cpu_seconds(root: int, *, skip: int | None = None) -> float:
    """CPU seconds (user + system) used so far by process ``root`` and its descendants (less the
    subtree of ``skip``): the JVM and the Python workers of a side included. Children that ended
    count once reaped (in their parent's ``cutime``). Linux only (``/proc``); NaN elsewhere."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    procs: dict[int, tuple[int, float]] = {}  # pid -> (parent, seconds)
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
        procs[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    if root not in procs:
        return float("nan")
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid != skip:
            total += procs[pid][1]
            todo += children.get(pid, [])
    return total


def rows_of(t: pa.Table, cols: list[str]) -> list[tuple]:
    return sorted(zip(*(t.column(c).to_pylist() for c in cols)))


# -- SDP: a project on disk, and a second process that runs its updates ----------------------------

def write_project(project: Path, history: Path, dim: Path) -> Path:
    """``spark-pipeline.yml`` and its one SQL file; returns the spec's path."""
    (project / "transformations").mkdir(parents=True)
    sql = [f"CREATE TEMPORARY VIEW ev AS SELECT * FROM parquet.`{history}`;",
           f"CREATE TEMPORARY VIEW dim AS SELECT * FROM parquet.`{dim}`;"]
    sql += [f"CREATE MATERIALIZED VIEW `{name}` AS {q};" for name, q in QUERIES.items()]
    (project / "transformations" / "views.sql").write_text("\n".join(sql) + "\n")
    spec = project / "spark-pipeline.yml"
    spec.write_text(f"name: millpond_bench\nstorage: file://{project / 'storage'}\n"
                    "libraries:\n  - glob:\n      include: transformations/**\n")
    return spec


def sdp_server(conn, spec_path: str, warehouse: str, log_path: str) -> None:  # noqa: ANN001 - a Connection
    """The second process: a local Spark Connect server, then one pipeline update per ``"run"``
    received, answering its seconds (``"stop"`` ends it). Its JVM's and Python's output go to
    ``log_path``; ``conn`` carries only the requests and answers."""
    out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    from millpond.spark.session import ensure_java

    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.pipelines.cli import load_pipeline_spec, register_definitions
    from pyspark.pipelines.spark_connect_graph_element_registry import SparkConnectGraphElementRegistry
    from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote(f"local[{CORES}]").config("spark.sql.warehouse.dir", warehouse)
    for k, v in SPARK_CONF.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spec = load_pipeline_spec(Path(spec_path))
    conn.send("ready")
    while conn.recv() == "run":
        t0 = time.perf_counter()
        graph = create_dataflow_graph(spark, default_catalog=spec.catalog, default_database=spec.database,
                                      sql_conf=spec.configuration)
        register_definitions(Path(spec_path), SparkConnectGraphElementRegistry(spark, graph), spec, spark, graph)
        events = [r["pipeline_event_result"].event.message
                  for r in start_run(spark, graph, full_refresh=[], full_refresh_all=False, refresh=[], dry=False,
                                     storage=spec.storage)
                  if "pipeline_event_result" in r]
        elapsed = time.perf_counter() - t0
        print("\n".join(events), flush=True)
        conn.send({"seconds": elapsed, "completed": any(e == "Run is COMPLETED." for e in events),
                   "last": events[-1] if events else ""})
    spark.stop()


class SDP:
    """The SDP process, seen from the benchmark: :meth:`update` runs one pipeline update."""

    def __init__(self, spec: Path, warehouse: Path, log_path: Path):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=sdp_server, args=(child, str(spec), str(warehouse), str(log_path)))
        self.proc.start()
        self.log_path = log_path
        if not self.conn.poll(300) or self.conn.recv() != "ready":
            raise SystemExit(f"the SDP server did not start; its output is in {log_path}")

    def update(self) -> tuple[float, float]:
        """One pipeline update: (its seconds, the CPU seconds of the SDP process and its JVM)."""
        cpu = cpu_seconds(self.proc.pid)
        self.conn.send("run")
        answer = self.conn.recv()
        cpu = cpu_seconds(self.proc.pid) - cpu
        if not answer["completed"]:
            raise SystemExit(f"the SDP update did not complete ({answer['last']}); see {self.log_path}")
        return answer["seconds"], cpu

    def close(self) -> None:
        self.conn.send("stop")
        self.proc.join(60)


class Millpond:
    """millpond's side: the database with both views; :meth:`epoch` inserts a round and flushes it."""

    def __init__(self, root: Path, dim: pa.Table, *, append_only: bool, profile: Path, sdp_pid: int):
        import millpond
        from millpond.spark.session import local_session

        self.profile, self.sdp_pid = profile, sdp_pid
        self.db = millpond.connect(str(root), spark=local_session(cores=CORES), interval=None)
        self.root = root
        self.db.sql(f"CREATE TABLE ev (k BIGINT, p BIGINT, v BIGINT){' APPEND ONLY' if append_only else ''}; "
                    "CREATE TABLE dim (p BIGINT PRIMARY KEY, name VARCHAR)")
        self.db.insert("dim", dim)
        for name, q in QUERIES.items():
            self.db.sql(f'CREATE MATERIALIZED VIEW "{name}" AS {q}')
        self.db.flush()  # dim's rows reach the join's state before the first round
        self.state = self.db.runtime.coordinator.state
        self.stats = self.db.runtime.coordinator.executor.stats

    def _cpu(self) -> float:
        return cpu_seconds(os.getpid(), skip=self.sdp_pid)

    def epoch(self, batch: pa.Table) -> dict:
        """Insert ``batch`` (untimed), flush (timed); then wait for the compaction the epoch may
        have started (timed apart: it runs off the epoch's path, and must not run during SDP's)."""
        self.db.insert("ev", batch)
        before = dict(self.stats)
        self.profile.write_text("")
        cpu = self._cpu()
        t0 = time.perf_counter()
        self.db.flush()
        seconds = time.perf_counter() - t0
        epoch_cpu = self._cpu() - cpu
        build, job = (self.stats[k] - before[k] for k in ("build_s", "job_s"))
        tasks = [json.loads(line) for line in self.profile.read_text().splitlines()]
        t1 = time.perf_counter()
        running = self.state._running  # the compaction in flight, if any (StateStore keeps no public handle)
        merged = running.result()[0] if running is not None else []  # its tasks (inputs: the files it rewrites)
        compact = time.perf_counter() - t1
        ssts, sst_bytes = du(self.root / "sst")
        return {"millpond": seconds, "mp_cpu": epoch_cpu, "build": build, "job": job,
                "post": seconds - build - job, "tasks": tasks,
                **{k: sum(t.get(k, 0) for t in tasks) for k in ("input", "apply", "write")},
                "compact": compact, "compact_cpu": self._cpu() - cpu - epoch_cpu,
                "compact_mb": sum(ref.size for task in merged for ref in task.inputs) / 2**20,
                "ssts": ssts, "sst_mb": sst_bytes / 2**20, "log_mb": du(self.root / "log")[1] / 2**20}

    def levels(self) -> list[str]:
        """Each state table's shape now: its view, operator node and part; L0 files; MB per level."""
        catalog = self.db.runtime.catalog
        names = {f"o{o.id}": name for name, o in (*catalog.tables.items(), *catalog.views.items())}
        out = []
        for sid, lv in sorted(self.state.manifest.states.items()):
            obj, node, part = sid.split(".", 2)
            mb = [sum(r.size for r in level) / 2**20 for level in lv.levels]
            out.append(f"{names.get(obj, obj)}#{node[1:]} {part}: L0 {len(lv.l0)} files "
                       f"{sum(r.size for r in lv.l0) / 2**20:.1f} MB" + "".join(
                           f", L{i} {m:.1f} MB" for i, m in enumerate(mb, start=1)))
        return out

    def views(self) -> dict[str, pa.Table]:
        return {name: self.db.sql(f'SELECT * FROM "{name}"') for name in QUERIES}

    def close(self) -> None:
        self.db.close()


# -- the rounds -------------------------------------------------------------------------------------

HEADER = (f"{'history':>10} {'SDP s':>6} {'mp s':>6} {'ratio':>5} | {'SDP cpu':>7} {'mp cpu':>6} {'ratio':>5} | "
          f"{'build':>5} {'job':>5} {'post':>5} | tasks: {'input':>5} {'apply':>5} {'write':>5} | "
          f"compact: {'s':>5} {'cpu':>5} {'MB in':>5} | {'SSTs':>4} {'SST MB':>6} {'log MB':>6} | load")


def line(r: dict) -> str:
    return (f"{r['history']:>10,} {r['sdp']:>6.2f} {r['millpond']:>6.2f} {r['sdp'] / r['millpond']:>5.2f} | "
            f"{r['sdp_cpu']:>7.2f} {r['mp_cpu']:>6.2f} {r['sdp_cpu'] / r['mp_cpu']:>5.2f} | "
            f"{r['build']:>5.2f} {r['job']:>5.2f} {r['post']:>5.2f} | tasks: {r['input']:>5.2f} {r['apply']:>5.2f} "
            f"{r['write']:>5.2f} | compact: {r['compact']:>5.2f} {r['compact_cpu']:>5.2f} {r['compact_mb']:>5.1f} | "
            f"{r['ssts']:>4} {r['sst_mb']:>6.1f} {r['log_mb']:>6.1f} | {r['load']:.1f}")


def summary(results: list[dict], round_rows: int) -> None:
    last = results[-1]
    target = 20 if round_rows <= 50_000 else 4
    print(f"ratio SDP / millpond at {last['history']:,} rows of history: {last['sdp'] / last['millpond']:.2f}x "
          f"(CPU seconds: {last['sdp_cpu'] / last['mp_cpu']:.2f}x; target at 4,000,000 rows with "
          f"{round_rows:,}-row rounds: >= {target}x)")
    if len(results) < 2:
        return
    second = results[1]
    print(f"flatness, last round / second round: millpond {last['millpond'] / second['millpond']:.2f} "
          f"(CPU {last['mp_cpu'] / second['mp_cpu']:.2f}; target <= 1.2), SDP {last['sdp'] / second['sdp']:.2f} "
          f"(CPU {last['sdp_cpu'] / second['sdp_cpu']:.2f})")
    # Growth with the history, less noisy than two rounds: means per round over the two halves of
    # the rounds after the second (compaction runs every few rounds: its mean is its amortized cost)
    steady = results[2:]
    if len(steady) >= 2:
        halves = steady[:len(steady) // 2], steady[len(steady) // 2:]
        print(f"CPU seconds per round, rounds 3-{2 + len(halves[0])} -> the last {len(halves[1])} (history "
              f"{halves[0][0]['history']:,}-{halves[0][-1]['history']:,} -> "
              f"{halves[1][0]['history']:,}-{halves[1][-1]['history']:,}):")
        for label, key in (("SDP update", "sdp_cpu"), ("millpond epoch", "mp_cpu"),
                           ("millpond compaction", "compact_cpu")):
            a, b = (sum(r[key] for r in h) / len(h) for h in halves)
            print(f"  {label:<20} {a:6.2f} -> {b:6.2f}")
        a, b = (sum(r["sdp_cpu"] for r in h) / sum(r["mp_cpu"] + r["compact_cpu"] for r in h) for h in halves)
        print(f"  SDP / millpond with its compaction: {a:.2f}x -> {b:.2f}x")
    print("millpond's stateful tasks per operator, second round -> last round (seconds summed over tasks):")
    for op in sorted({t["op"] for t in second["tasks"] + last["tasks"]}):
        parts = []
        for k in ("input", "apply", "write"):
            a, b = (sum(t.get(k, 0) for t in r["tasks"] if t["op"] == op) for r in (second, last))
            parts.append(f"{k} {a:.2f} -> {b:.2f}")
        print(f"  {op:<12} " + ", ".join(parts))


def check(history: Path, dim_dir: Path, warehouse: Path, got: dict[str, pa.Table], rows: int) -> None:
    """Both systems' views equal DuckDB's over all the history (SDP's read from its warehouse)."""
    con = duckdb.connect()
    con.sql(f"CREATE VIEW ev AS SELECT * FROM read_parquet('{history}/*.parquet')")
    con.sql(f"CREATE VIEW dim AS SELECT * FROM read_parquet('{dim_dir}/*.parquet')")
    for name, q in QUERIES.items():
        want = con.sql(q).to_arrow_table()
        cols = want.column_names
        sdp_rows = con.sql(f"SELECT * FROM read_parquet('{warehouse / name}/*.parquet')").to_arrow_table()
        for system, t in (("SDP", sdp_rows), ("millpond", got[name])):
            if rows_of(t, cols) != rows_of(want, cols):
                raise SystemExit(f"{name}: {system}'s view differs from DuckDB's")
    print(f"both views of both systems equal DuckDB's over all {rows:,} rows")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--history", type=int, default=4_000_000, help="rows of history at the last round")
    ap.add_argument("--round", type=int, default=500_000, help="rows appended per round")
    ap.add_argument("--append-only", action="store_true", help="millpond's ev is APPEND ONLY")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="sdp-bench-") as tmp:
        tmp = Path(tmp)
        history, dim_dir, warehouse = tmp / "ev", tmp / "dim", tmp / "warehouse"
        history.mkdir()
        dim_dir.mkdir()
        dim = dimension()
        pq.write_table(dim, dim_dir / "dim.parquet")
        sdp = SDP(write_project(tmp / "project", history, dim_dir), warehouse, tmp / "sdp-server.log")
        os.environ["MILLPOND_PROFILE"] = str(tmp / "tasks.jsonl")  # before millpond's Spark starts its workers
        mp = None
        try:
            mp = Millpond(tmp / "millpond", dim, append_only=args.append_only, profile=tmp / "tasks.jsonl",
                          sdp_pid=sdp.proc.pid)
            print(f"ev {'APPEND ONLY' if args.append_only else 'ordinary'} (millpond), rounds of {args.round:,} "
                  f"rows up to {args.history:,}; ratio = SDP / millpond; load = 1-minute load average (2 cores)")
            print(HEADER, flush=True)
            results = []
            for i in range(args.history // args.round):
                batch = delta(args.round, seed=i)
                pq.write_table(batch, history / f"ev-{i:05d}.parquet")
                sdp_s, sdp_cpu = sdp.update()
                r = {"history": (i + 1) * args.round, "sdp": sdp_s, "sdp_cpu": sdp_cpu, **mp.epoch(batch),
                     "load": os.getloadavg()[0]}
                results.append(r)
                print(line(r), flush=True)
            got, levels = mp.views(), mp.levels()
        finally:
            if mp is not None:
                mp.close()
            sdp.close()
        summary(results, args.round)
        print("millpond's state tables at the end:\n  " + "\n  ".join(levels))
        check(history, dim_dir, warehouse, got, results[-1]["history"])


if __name__ == "__main__":
    main()
