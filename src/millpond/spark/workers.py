"""Spark's Python workers run millpond's code (each epoch's tasks): they must import it and what it
imports. A session millpond starts runs its workers with this process's Python; a session the user
brings (a notebook's, a cluster's) runs them with ``PYSPARK_PYTHON`` as it was when the session
started, else ``python3`` from PATH — often not the Python millpond is installed in.

:func:`ensure_importable` asks the workers once per session, with a one-task job, whether they find
millpond and its runtime dependencies (:data:`RUNTIME_MODULES`) and can import the modules of its
tasks (:data:`TASK_MODULES`):

1. ``ship``: first add millpond itself to the session (a zip of the package, as ``--py-files``
   would; removed when this process exits), so a cluster needs no install of millpond;
2. a local session whose workers cannot run millpond and whose Python nobody chose
   (``PYSPARK_PYTHON`` unset) runs its Python functions from now on with this process's Python,
   which has everything (PySpark's ``SparkContext.pythonExec``, which every Python function takes
   when it is created: millpond's are all created after this);
3. otherwise the workers' lack is refused before any epoch runs, naming the Python, what it lacks
   and the fixes that apply (dependencies with native code cannot be shipped).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shutil
import sys
import tempfile
import weakref
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millpond.errors import MillpondError

__all__ = ["ensure_importable", "package_zip", "RUNTIME_MODULES", "TASK_MODULES"]

log = logging.getLogger(__name__)

# what millpond's tasks import on the workers: millpond and its runtime dependencies (PySpark itself is there)
RUNTIME_MODULES = ("millpond", "pyarrow", "polars", "duckdb", "sqlglot", "numpy", "pandas", "obstore")
# the modules whose functions and classes the tasks unpickle (importing them finds anything else missing)
TASK_MODULES = ("millpond.spark.task", "millpond.spark.log_source", "millpond.spark.inputs",
                "millpond.spark.source_tasks", "millpond.store.compaction")

_checked: "weakref.WeakSet[Any]" = weakref.WeakSet()  # sessions whose workers run millpond
_shipped: "weakref.WeakSet[Any]" = weakref.WeakSet()


@functools.cache
def package_zip() -> str:
    """A zip of the millpond package as this process imports it, made once per process in a folder
    of its own that is removed when the process exits."""
    import millpond

    package = Path(millpond.__file__).parent
    folder = tempfile.mkdtemp(prefix="millpond-ship-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = Path(folder) / f"millpond-{os.getpid()}.zip"  # a name no other session file takes
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(package.rglob("*.py")):
            z.write(f, Path("millpond") / f.relative_to(package))
    return str(path)


@dataclass(frozen=True)
class Probe:
    """What the workers answered: the modules they lack, an import that failed, their Python."""

    missing: tuple[str, ...]
    failed: str | None  # an import of TASK_MODULES that failed though every module was found
    python: str
    version: str
    error: str | None = None  # the probe task itself failed (the Python would not even start)

    @property
    def ok(self) -> bool:
        return not self.missing and self.failed is None and self.error is None


def _probe(args: tuple[tuple[str, ...], tuple[str, ...]]) -> tuple[list[str], str | None, str, str]:
    import importlib
    import importlib.util
    import sys

    modules, imports = args
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    failed = None
    if not missing:
        for m in imports:
            try:
                importlib.import_module(m)
            except Exception as exc:  # noqa: BLE001 - reported as it is
                failed = f"import {m}: {type(exc).__name__}: {exc}"
                break
    return missing, failed, sys.executable, sys.version.split()[0]


def _ask(sc: Any) -> Probe:
    """Run the probe as one task with the session's current worker Python."""
    probe = _probe  # a module function is pickled by reference: the workers would import millpond for it
    code = probe.__code__
    by_value = type(probe)(code, {"__builtins__": __builtins__}, code.co_name)
    try:
        missing, failed, python, version = sc.parallelize([(RUNTIME_MODULES, TASK_MODULES)], 1).map(by_value) \
            .collect()[0]
    except Exception as exc:  # noqa: BLE001 - the workers did not even start
        return Probe((), None, sc.pythonExec, "?", error=str(exc).strip().splitlines()[0][:300])
    return Probe(tuple(missing), failed, python, version)


def _local(sc: Any) -> bool:
    """The workers run on this machine (``local``, ``local[n]``, ``local-cluster[...]``)."""
    return str(sc.master).startswith("local")


def ensure_importable(spark: Any, *, ship: bool = False) -> None:
    """Make sure ``spark``'s Python workers can run millpond's tasks (steps 1-3 of the module
    docstring), or raise a MillpondError naming what they lack and how to fix it."""
    if ship and spark not in _shipped:  # 1.
        path = package_zip()
        if hasattr(spark, "sparkContext"):
            spark.sparkContext.addPyFile(path)
        else:  # Spark Connect
            spark.addArtifacts(path, pyfile=True)
        _shipped.add(spark)
        _checked.discard(spark)
    if spark in _checked or not hasattr(spark, "sparkContext"):
        return
    sc = spark.sparkContext
    found = _ask(sc)
    chosen = os.environ.get("PYSPARK_PYTHON")
    unchosen = not chosen and sc.pythonExec == "python3"  # PySpark's default: PATH's python3
    if not found.ok and _local(sc) and unchosen and sys.executable:  # 2.
        log.info("a local session's Python workers (%s) %s: its Python functions now run with this process's "
                 "Python, %s", sc.pythonExec, _lack(found), sys.executable)
        before, sc.pythonExec = sc.pythonExec, sys.executable
        found = _ask(sc)
        if not found.ok:  # this Python lacks it too: the session is left as it was
            sc.pythonExec = before
            raise MillpondError(_advice(found, runs=sys.executable, local=True, chosen=chosen, ship=ship))
    if not found.ok:  # 3.
        raise MillpondError(_advice(found, runs=sc.pythonExec, local=_local(sc), chosen=chosen, ship=ship))
    _checked.add(spark)


def _lack(found: Probe) -> str:
    if found.error is not None:
        return f"could not run a task ({found.error})"
    if found.missing:
        return f"lack {', '.join(found.missing)}"
    return f"fail to {found.failed}"


def _advice(found: Probe, *, runs: str, local: bool, chosen: str | None, ship: bool) -> str:
    """The refusal: the workers' Python (``runs``: the command they run), what it lacks, and each
    fix that applies to the case."""
    python = found.python if runs == found.python else f"{runs} -> {found.python}"
    who = f"Spark's Python workers ({python}, Python {found.version})"
    if found.error is not None:
        what = f"{who} could not run a probe task: {found.error}."
    elif found.missing:
        what = f"{who} cannot import {', '.join(found.missing)}, which millpond's tasks import at every epoch."
    else:
        what = f"{who} find millpond's modules but fail to {found.failed}."
    deps = [m for m in found.missing if m != "millpond"]
    fixes, note = [], ""
    if local and runs != sys.executable:
        unset = f"unset PYSPARK_PYTHON (now {chosen!r}) or " if chosen else ""
        fixes.append(f"run them with this process's Python, which has everything: {unset}set "
                     f"PYSPARK_PYTHON={sys.executable} before the session starts")
    elif local:
        fixes.append(f"install {', '.join(found.missing) or 'what fails'} into {found.python}")
    else:
        fixes.append("point PYSPARK_PYTHON (set before the session starts; with spark-submit, spark.pyspark.python) at "
                     "a Python on every worker where the driver's millpond is installed with its dependencies")
    if found.missing == ("millpond",) and not ship:
        fixes.append("connect(..., ship=True) to add millpond to this session (its dependencies are there)")
    elif deps:
        note = (f" ship=True {'added' if ship else 'adds'} millpond only, not {', '.join(deps)}: they must be "
                "installed in the workers' Python.")
    return f"{what} {'Fix one of' if len(fixes) > 1 else 'Fix'}: {'; '.join(fixes)}.{note} See docs/cluster.md"
