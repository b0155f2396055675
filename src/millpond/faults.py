"""Named crash points for recovery tests.

``MILLPOND_CRASH_AT=<point>[:<n>]`` makes the process SIGKILL itself the n-th time (default 1st)
it passes ``point``. Unset (the default), a point costs one dict lookup.

Points inside Spark tasks run in Python worker processes; ``MILLPOND_CRASH_PID`` (set by the
crashing driver before Spark starts, inherited by the workers) names the process to kill, so a
crash "inside a task" takes the whole job down as a machine failure would. Counting is per
process.

``MILLPOND_CRASH_HOLD`` names a file a test creates while it writes a step to several upstream
systems (a folder, Delta, PostgreSQL, Kafka): a point reached meanwhile, in another thread or
process, kills once the file is gone (the test's upstream is never left half written; at most 120 s).
"""

from __future__ import annotations

import os
import signal
import time

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
        hold, deadline = os.environ.get("MILLPOND_CRASH_HOLD"), time.monotonic() + 120
        while hold and os.path.exists(hold) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(int(os.environ.get("MILLPOND_CRASH_PID") or os.getpid()), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
