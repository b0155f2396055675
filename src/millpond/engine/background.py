"""Epochs in the background: a daemon thread that runs one epoch every period."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from millpond.errors import FencedError

__all__ = ["EpochLoop", "MAX_BACKOFF"]

log = logging.getLogger("millpond")

MAX_BACKOFF = 60.0  # seconds between retries of a failing epoch, at most


class EpochLoop:
    """Calls ``run`` every ``period`` seconds while holding ``lock``.

    A view's data error never reaches here (the coordinator isolates the view). Any other failure
    (storage unreachable, a lost executor) commits nothing; the loop logs it, keeps it in
    :attr:`error` until an epoch succeeds, and retries with exponential backoff (up to
    :data:`MAX_BACKOFF`), so a transient outage heals by itself. Only a :class:`FencedError`
    (another writer took the root) stops the loop; the API then raises it at the next call."""

    def __init__(self, run: Callable[[], object], period: float, lock: threading.RLock):
        self.run, self.period, self.lock = run, period, lock
        self.error: BaseException | None = None
        self.fenced: FencedError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="millpond-epochs", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        wait = self.period
        while not self._stop.wait(wait):
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

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
