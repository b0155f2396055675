"""Spark's Python workers run millpond's code (each epoch's tasks): they must import it. A session
millpond starts runs its workers with this process's Python; a session the user brings (a notebook,
a cluster) may not. :func:`ensure_importable` asks the workers once per session with a one-task job
and says what to do before any epoch runs; ``ship`` first adds millpond itself to the session (a
zip of the package, as ``--py-files`` would), so a cluster needs no install of millpond — its
dependencies (pyarrow, polars, duckdb, sqlglot, ...) still must be there.
"""

from __future__ import annotations

import os
import tempfile
import weakref
import zipfile
from pathlib import Path
from typing import Any

from millpond.errors import MillpondError

__all__ = ["ensure_importable", "package_zip"]

_checked: "weakref.WeakSet[Any]" = weakref.WeakSet()  # sessions whose workers import millpond
_shipped: "weakref.WeakSet[Any]" = weakref.WeakSet()


def package_zip() -> str:
    """A zip of the millpond package as this process imports it (made once per process)."""
    import millpond

    package = Path(millpond.__file__).parent
    path = Path(tempfile.gettempdir()) / f"millpond-{os.getpid()}.zip"
    if not path.exists():
        partial = path.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(package.rglob("*.py")):
                z.write(f, Path("millpond") / f.relative_to(package))
        partial.replace(path)
    return str(path)


def _probe(name: str) -> tuple[bool, str, str]:
    import importlib.util
    import sys

    return importlib.util.find_spec(name) is not None, sys.executable, sys.version.split()[0]


def ensure_importable(spark: Any, *, ship: bool = False) -> None:
    """Raise a MillpondError saying how to fix it when ``spark``'s Python workers cannot import
    millpond; ``ship``: add millpond to the session first."""
    if ship and spark not in _shipped:
        path = package_zip()
        if hasattr(spark, "sparkContext"):
            spark.sparkContext.addPyFile(path)
        else:  # Spark Connect
            spark.addArtifacts(path, pyfile=True)
        _shipped.add(spark)
        _checked.discard(spark)
    if spark in _checked or not hasattr(spark, "sparkContext"):
        return
    probe = _probe  # a module function is pickled by reference: the workers would import millpond for it
    code = probe.__code__
    by_value = type(probe)(code, {"__builtins__": __builtins__}, code.co_name)
    try:
        found, python, version = spark.sparkContext.parallelize(["millpond"], 1).map(by_value).collect()[0]
    except Exception as exc:  # noqa: BLE001 - the workers did not even start
        raise MillpondError(f"Spark's Python workers could not run a probe task: {str(exc).splitlines()[0][:300]}. "
                            "Check PYSPARK_PYTHON (the workers' Python) and the cluster's Python setup") from None
    if not found:
        raise MillpondError(
            f"Spark's Python workers ({python}, Python {version}) cannot import millpond, which runs in them at every "
            "epoch. Fix one of: run the workers with a Python that has millpond (PYSPARK_PYTHON, or "
            "spark.pyspark.python), install millpond on the workers (pip install millpond), pass it with "
            "--py-files, or connect(..., ship=True) to add it to this session (its dependencies must be on the "
            "workers)")
    _checked.add(spark)
