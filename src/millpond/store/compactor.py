"""Compaction in a process of its own (``connect(compaction="local")``, the default).

Compaction is CPU work in Python and Arrow; run in a thread of the user's process it holds the
interpreter's lock against the epochs it runs beside (TPC-H SF 0.1, 22 views: a refresh round
3.2 s alone, 6.3 s with a compaction under way). Here one child process, started at the first
compaction and kept, runs :func:`millpond.store.compaction.run_task` on the same root; the
parent sends it tasks and gets back the outputs' manifest entries, as from a Spark task
(``spark/compact.py``). The child is ``python -m millpond.store.compactor``, not a
``multiprocessing`` child: that would import the user's main script again in the child.
:meth:`CompactionProcess.stop` kills it (``Database.close`` does not wait for a merge to end;
its files, never in a manifest, are garbage collected), and a child that died is started again
at the next compaction, which fails as any failed compaction does: its inputs stay live.

Frames on the pipes: an 8-byte length, then a pickle. The child answers a batch with one
``(None, i)`` as each task ``i`` ends (the round's progress in ``SHOW JOBS``), then ``(True,
outputs)`` or ``(False, error)``.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
from typing import IO, Any


from millpond.errors import StorageError
from millpond.store import compaction
from millpond.store.objects import ObjectStore, open_store
from millpond.store.sst import SstRef
from millpond.work import current_work

__all__ = ["CompactionProcess"]

_LEN = struct.Struct("<Q")
NICE = 10  # the child's scheduling priority below its parent's


def _send(out: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LEN.pack(len(data)) + data)
    out.flush()


def _receive(source: IO[bytes]) -> Any:
    head = source.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    size = _LEN.unpack(head)[0]
    data = source.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


class CompactionProcess:
    """A runner (:data:`millpond.store.store.Runner`) whose tasks run in a child process."""

    def __init__(self) -> None:
        self._child: subprocess.Popen | None = None
        self._lock = threading.Lock()  # one batch of tasks at a time

    def __call__(self, store: ObjectStore, tasks: list[compaction.Task]) -> list[tuple[SstRef, ...]]:
        with self._lock:
            child = self._child
            if child is None or child.poll() is not None:
                child = self._child = subprocess.Popen(
                    [sys.executable, "-m", "millpond.store.compactor", str(os.getpid())], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            work = current_work()  # the round's progress (SHOW JOBS): the rows of its merges done
            work.to_do(sum(ref.rows for t in tasks for ref in t.inputs))
            try:
                _send(child.stdin, (store.root, store.options, tasks))
                while (reply := _receive(child.stdout))[0] is None:  # a task done: its index
                    work.did(sum(ref.rows for ref in tasks[reply[1]].inputs))
                ok, result = reply
            except (EOFError, OSError):
                raise StorageError(f"the compaction process of {store.root!r} exited "
                                   f"(code {child.poll()}): this compaction is retried") from None
        if not ok:
            raise StorageError(f"compaction of {store.root!r} failed: {result}")
        return result

    def stop(self) -> None:
        """Kill the child, at once: a merge under way is dropped (``close``)."""
        child, self._child = self._child, None
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        if child is not None:
            for pipe in (child.stdin, child.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass


def _serve() -> None:
    """The child: run each batch of tasks it is sent, until its input ends (the parent went)."""
    _die_with_parent()
    os.nice(NICE)  # the epochs beside it come first; it takes the CPU they leave
    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # nothing else may write into the replies
    while True:
        try:
            root, options, tasks = _receive(requests)
        except EOFError:
            return
        try:
            store = open_store(root, options)
            outputs = []
            for i, t in enumerate(tasks):
                outputs.append(compaction.run_task(store, t))
                _send(replies, (None, i))
            _send(replies, (True, outputs))
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which retries later
            _send(replies, (False, f"{type(exc).__name__}: {exc}"))


def _die_with_parent() -> None:
    """On Linux, the kernel kills this process when its parent dies (a crashed Database leaves no
    merge writing on); elsewhere it ends at its next read of the closed pipe."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if sys.argv[1:] and os.getppid() != int(sys.argv[1]):  # the parent died before the call
        os._exit(0)


if __name__ == "__main__":
    _serve()
