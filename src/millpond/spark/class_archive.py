"""A class-data archive for the JVMs millpond starts: each process after the first starts seconds sooner.

A fresh process's JVM spends seconds loading and verifying Spark's classes. The JDK can write the
classes a run loaded to an archive when it exits (``-XX:ArchiveClassesAtExit``, AppCDS) and map
that archive at the next start (``-XX:SharedArchiveFile``). Measured here (a fresh process: a
``local[2]`` session, then one table, one view and an epoch of two rows; three runs each): the
session 6.0–7.0 s → 3.5–3.9 s, the first epoch 7.0–8.3 s → 4.9–5.9 s — about 4.5 s of every
``millpond`` command, script or test process that starts its own Spark.

The archive lives in ``$MILLPOND_JVM_ARCHIVE`` (a folder; ``0`` turns this off), else
``$XDG_CACHE_HOME/millpond/jvm`` or ``~/.cache/millpond/jvm``: one file (~160 MB) per Java, PySpark
and install, named by a hash of them (an archive of another JDK or classpath is never mapped).
It is written by the first JVM started without one, as it exits: that start claims the writing
(a file made exclusively; no other JVM writes one meanwhile — the dump costs ~30 s of CPU after
the process ends — unless the claim is 15 minutes old), and a later start that finds the write
done (untouched for a minute) renames it into place. An archive the JVM cannot use (cut short by
a kill) is ignored by the JVM, which then starts as it would have: the archive only ever saves
time. Sessions millpond does not start, and JVMs given options of their own
(``$PYSPARK_SUBMIT_ARGS``, or ``spark.driver.extraJavaOptions`` in the ``spark-defaults.conf``
Spark reads), are left alone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

__all__ = ["java_options", "ARCHIVE_ENV"]

ARCHIVE_ENV = "MILLPOND_JVM_ARCHIVE"
SETTLED_S = 60  # a written archive untouched this long is complete (its JVM has exited)
CLAIM_S = 15 * 60  # a claim to write the archive older than this is taken over (its JVM lives on, or died)
SMALLEST = 1 << 20  # smaller than this is no archive (a write cut short at its start)
# the JVM says nothing about archives (one it cannot map, one it could not write): either way it runs
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def java_options() -> str:
    """The options for a JVM millpond starts: map the archive, or write one at exit; "" when off."""
    folder = _folder()
    if folder is None or os.environ.get("PYSPARK_SUBMIT_ARGS") or _configured():
        return ""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{_key()}.jsa"
        _settle(final)
        if final.exists():
            return f"-XX:SharedArchiveFile={final} {_QUIET}"
        if not _claim(final.with_suffix(".claim")):  # one JVM writes it: its dump costs ~30 s of CPU at exit
            return ""
        return f"-XX:ArchiveClassesAtExit={final.with_suffix(f'.{os.getpid()}.part')} {_QUIET}"
    except OSError:  # a cache folder we cannot write: start as before
        return ""


def _configured() -> bool:
    """Whether the ``spark-defaults.conf`` Spark reads sets the driver's Java options (the archive's
    would replace them)."""
    import pyspark

    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    folder = os.environ.get("SPARK_CONF_DIR") or os.path.join(home, "conf")
    try:
        return "spark.driver.extraJavaOptions" in Path(folder, "spark-defaults.conf").read_text(errors="replace")
    except OSError:
        return False


def _folder() -> Path | None:
    chosen = os.environ.get(ARCHIVE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "0", "off", "false", "no") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "millpond" / "jvm"


def _key() -> str:
    """What an archive depends on: the java binary (path and build) and PySpark's jars."""
    import pyspark

    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get("JAVA_HOME") \
        else shutil.which("java")
    real = os.path.realpath(java) if java else "java"
    stamp = os.stat(real).st_mtime_ns if java else 0
    parts = (real, str(stamp), pyspark.__version__, os.path.dirname(pyspark.__file__))
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:16]


def _claim(claim: Path) -> bool:
    """Whether this process is the one to write the archive: it made the claim, or took over one
    older than :data:`CLAIM_S` (its JVM still runs, or died without writing)."""
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        if time.time() - claim.stat().st_mtime < CLAIM_S:
            return False
        claim.touch()
        return True


def _settle(final: Path) -> None:
    """Rename a finished write of ``final`` into place; drop writes too small to be an archive."""
    if final.exists() and final.stat().st_size < SMALLEST:
        final.unlink(missing_ok=True)
    now = time.time()
    for part in sorted(final.parent.glob(f"{final.stem}.*.part")):
        try:
            info = part.stat()
            if now - info.st_mtime < SETTLED_S:
                continue  # (its JVM may still be writing it)
            if info.st_size < SMALLEST or final.exists():
                part.unlink(missing_ok=True)
            else:
                os.replace(part, final)
                final.with_suffix(".claim").unlink(missing_ok=True)
        except OSError:  # another process settled it first
            continue
