"""Helpers of the log's tests."""

from __future__ import annotations

import time
from pathlib import Path


def inbox_empty(root, seconds: float = 10.0) -> bool:  # noqa: ANN001
    """Whether every forwarded request and answer under ``root`` is cleaned up, waiting up to
    ``seconds``: a writer deletes a request just after answering it (``log/forward.py``, steps
    5-6), so the request may outlive the forwarder's acknowledgement by a moment."""
    deadline = time.monotonic() + seconds
    while list(Path(root, "log").glob("p*/inbox/*")):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
