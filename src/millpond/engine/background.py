"""Epochs in the background: a daemon thread that runs one epoch every period."""

from __future__ import annotations

import logging
import threading
from typing import Callable

__all__ = ["EpochLoop"]

log = logging.getLogger("millpond")


class EpochLoop:
    """Calls ``run`` every ``period`` seconds while holding ``lock``. The first failure stops the
    loop and is kept in :attr:`error` (the API raises it at the next call)."""

    def __init__(self, run: Callable[[], object], period: float, lock: threading.RLock):
        self.run, self.period, self.lock = run, period, lock
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="millpond-epochs", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                with self.lock:
                    self.run()
            except BaseException as exc:  # surfaced to the next API call
                log.exception("background epoch failed")
                self.error = exc
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
