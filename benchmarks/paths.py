"""The two paths an epoch takes, for the benchmarks that print a figure on each (``per_row.py``,
``nexmark.py``, ``tpch.py``: ``--paths default,cluster``).

- ``default``: as millpond runs on this session — on a ``local[...]`` master an epoch of up to
  ``MILLPOND_DRIVER_RECORDS`` records (2,000,000) runs its tasks in the driver's process.
- ``cluster``: every epoch a Spark job, its tasks in Spark's Python workers, as on a cluster
  (what ``MILLPOND_DRIVER_RECORDS=0`` does for a whole process).

The switch is the executor's own threshold, changed for the length of a ``with`` block in this
process: both paths run on one session, against the same baseline, in one run.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Iterator

from millpond.spark import executor

PATHS = ("default", "cluster")


def parse(text: str, ap: argparse.ArgumentParser) -> list[str]:
    """``--paths``' value as a list (an unknown path is the parser's error)."""
    paths = [p for p in text.split(",") if p]
    if not paths or any(p not in PATHS for p in paths):
        ap.error(f"--paths: a comma-separated list of {', '.join(PATHS)}")
    return paths


@contextlib.contextmanager
def on(path: str) -> Iterator[None]:
    """Epochs run in the block take ``path``."""
    saved = dict(executor.DRIVER_RECORDS)
    if path == "cluster":
        executor.DRIVER_RECORDS.update(dict.fromkeys(saved, 0))
    try:
        yield
    finally:
        executor.DRIVER_RECORDS.update(saved)
