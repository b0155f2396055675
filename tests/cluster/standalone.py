"""A Spark standalone cluster on loopback, started from the installed PySpark: one master and a
few workers (``spark-class org.apache.spark.deploy.{master.Master,worker.Worker}``), each with
its own temporary work and local directories, on free ports.

Every daemon runs in a session of its own (so its executors, which it forks, can be killed with
its process group) and dies with the process that started it (``PR_SET_PDEATHSIG``), so a test
run that is itself killed leaves no JVM behind. :meth:`Standalone.stop` stops them all.

    with Standalone.start(workers=2) as cluster:          # doctest: +SKIP
        spark = SparkSession.builder.master(cluster.url).getOrCreate()
        cluster.executor_pids(cluster.workers[0])        # the executor JVMs of worker 0
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Daemon", "Standalone"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class Standalone:
    url: str  # spark://127.0.0.1:port
    web: str  # the master's web UI (its /json/ lists the workers)
    home: Path  # temporary directory: logs, work and local dirs
    master: Daemon
    workers: list[Daemon] = field(default_factory=list)
    seen: dict[int, bytes] = field(default_factory=dict)  # processes the daemons started (see track)

    @classmethod
    def start(cls, *, workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 120.0) -> "Standalone":
        home = Path(tempfile.mkdtemp(prefix="millpond-cluster-"))
        env = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
               "SPARK_LOG_DIR": str(home / "logs"), "SPARK_PID_DIR": str(home)}
        env.pop("SPARK_CONF_DIR", None)
        port, web = _free_port(), _free_port()
        cluster = cls(url=f"spark://127.0.0.1:{port}", web=f"http://127.0.0.1:{web}", home=home,
                      master=_spawn(home, "master", env, ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                                           "--port", str(port), "--webui-port", str(web)]))
        try:
            for i in range(workers):
                work, local = home / f"worker{i}" / "work", home / f"worker{i}" / "local"
                work.mkdir(parents=True)
                local.mkdir(parents=True)
                cluster.workers.append(_spawn(
                    home, f"worker{i}", {**env, "SPARK_LOCAL_DIRS": str(local)},
                    ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port", str(_free_port()),
                     "--cores", str(cores), "--memory", memory, "--work-dir", str(work), cluster.url]))
            cluster.wait_alive(workers, timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def __enter__(self) -> "Standalone":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.web}/json/", timeout=5) as reply:
            return json.load(reply)

    def wait_alive(self, workers: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for d in [self.master, *self.workers]:
                if d.proc.poll() is not None:
                    raise RuntimeError(f"the {d.name} exited with {d.proc.returncode}:\n{d.tail()}")
            try:
                if sum(w["state"] == "ALIVE" for w in self.state()["workers"]) >= workers:
                    return
            except (OSError, ValueError):
                pass  # the master's web UI is not up yet (or serves a page, not JSON, while it starts)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{workers} workers did not register within {timeout:.0f} s:\n{self.logs()}")
            time.sleep(0.25)

    def executor_pids(self, worker: Daemon) -> list[int]:
        """The live executor JVMs (``CoarseGrainedExecutorBackend``) that ``worker`` launched."""
        return [pid for pid, (ppid, cmd, state) in _processes().items()
                if ppid == worker.pid and b"CoarseGrainedExecutorBackend" in cmd and state != "Z"]

    def logs(self) -> str:
        return "\n".join(f"--- {d.name} ({d.log}) ---\n{d.tail()}" for d in [self.master, *self.workers])

    def track(self) -> None:
        """Remember every process the daemons have started so far (a killed executor's Python
        workers are reparented away from it, so they are recorded before such a kill)."""
        self.seen.update(_descendants({d.pid for d in [self.master, *self.workers]}))

    def stop(self, timeout: float = 20.0) -> None:
        """Stop workers (and their executors), then the master: SIGTERM, then SIGKILL whatever of
        them and their descendants is left (PySpark's Python daemons leave the process group);
        remove the temporary directory."""
        daemons = [*self.workers, self.master]
        self.track()
        for d in daemons:
            _signal(d, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for d in daemons:
            try:
                d.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal(d, signal.SIGKILL)
            d.proc.wait()
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.home, ignore_errors=True)

    def leftovers(self) -> dict[int, str]:
        """The processes started by the cluster that still run (pid -> command line)."""
        now = _processes()
        return {pid: cmd.replace(b"\0", b" ").decode(errors="replace")[:300] for pid, cmd in self.seen.items()
                if pid in now and now[pid][1] == cmd and now[pid][2] != "Z"}  # the same process, still running


def _spawn(home: Path, name: str, env: dict[str, str], args: list[str]) -> Daemon:
    log = home / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(Path(env["SPARK_HOME"]) / "bin" / "spark-class"), *args], env=env, cwd=home,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_die_with_parent)
    return Daemon(name, proc, log)


def _processes() -> dict[int, tuple[int, bytes, str]]:
    """pid -> (parent pid, command line, state) of every process, from /proc."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(entry.name)] = (int(fields[1]), cmd, fields[0])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return out


def _descendants(pids: set[int]) -> dict[int, bytes]:
    """pid -> command line of every descendant of ``pids``."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, bytes] = {}
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found[child] = procs[child][1]
                todo.append(child)
    return found


def _signal(d: Daemon, sig: int) -> None:
    try:
        os.killpg(d.pid, sig)  # its own session: the daemon, the executors it forked, their Python workers
    except ProcessLookupError:
        pass
