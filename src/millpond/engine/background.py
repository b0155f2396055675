"""Epochs in the background: a daemon thread that runs one epoch every period, or sooner when a
flow's row threshold is reached (``TRIGGER AFTER n ROWS``: checked every :data:`POLL` seconds)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from millpond.errors import FencedError

__all__ = ["EpochLoop", "MAX_BACKOFF", "POLL"]

log = logging.getLogger("millpond")

MAX_BACKOFF = 60.0  # seconds between retries of a failing epoch, at most
POLL = 0.05  # seconds between checks of ``due`` (an in-memory comparison of log ends and offsets)


class EpochLoop:
    """Calls ``run`` every ``period`` seconds while holding ``lock``, and as soon as ``due()`` says
    so (a flow's unread rows passed its threshold; not while epochs are failing).

    A view's data error never reaches here (the coordinator isolates the view). Any other failure
    (storage unreachable, a lost executor) commits nothing; the loop logs it, keeps it in
    :attr:`error` until an epoch succeeds, and retries with exponential backoff (up to
    :data:`MAX_BACKOFF`), so a transient outage heals by itself. Only a :class:`FencedError`
    (another writer took the root) stops the loop; the API then raises it at the next call."""

    def __init__(self, run: Callable[[], object], period: float, lock: threading.RLock,
                 due: Callable[[], bool] | None = None):
        self.run, self.period, self.lock, self.due = run, period, lock, due
        self.error: BaseException | None = None
        self.fenced: FencedError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="millpond-epochs", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        wait = self.period
        while self._sleep(wait):
            try:
                with self.lock:
                    self.run()
                self.error, wait = None, self.period
            except FencedError as exc:
                log.error("background epochs stopped: %s", exc)
                self.fenced = self.error = exc
                return
            except Exception as exc:  # noqa: BLE001 - retried; surfaced by flush() and in self.error
                wait = min(MAX_BACKOFF, max(wait, self.period) * 2)
                log.warning("background epoch failed (retrying in %.1f s): %s", wait, exc)
                self.error = exc

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds``, or until ``due()``; False once closed."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self._stop.wait(left if self.due is None else min(left, POLL)):
                return False
            try:
                if self.due is not None and self.error is None and self.due():
                    return True
            except Exception as exc:  # noqa: BLE001 - a check that fails (a catalog being replaced) waits it out
                log.debug("background epochs: trigger check failed: %s", exc)
        return not self._stop.is_set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
