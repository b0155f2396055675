"""Named crash points for recovery tests.

``MILLPOND_CRASH_AT=<point>[:<n>]`` makes the process SIGKILL itself the n-th time (default 1st)
it passes ``point``. Unset (the default), a point costs one dict lookup.

Points inside Spark tasks run in Python worker processes; ``MILLPOND_CRASH_PID`` (set by the
crashing driver before Spark starts, inherited by the workers) names the process to kill, so a
crash "inside a task" takes the whole job down as a machine failure would. Counting is per
process.
"""

from __future__ import annotations

import os
import signal

__all__ = ["point"]

_passes: dict[str, int] = {}


def point(name: str) -> None:
    spec = os.environ.get("MILLPOND_CRASH_AT")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] >= int(nth or 1):
        os.kill(int(os.environ.get("MILLPOND_CRASH_PID") or os.getpid()), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
