"""How long a root keeps what its epochs changed (``SET retention``): the views' changelogs and the
epochs time travel can read (:mod:`millpond.engine.changefeed`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Retention", "DEFAULT_RETENTION"]

_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600,
          "d": 86_400, "day": 86_400, "w": 604_800, "week": 604_800}


@dataclass(frozen=True)
class Retention:
    """How much of the changes is kept: the last ``epochs`` committed epochs, or those committed in
    the last ``seconds``."""

    epochs: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, text: str) -> "Retention":
        """``100`` or ``100 epochs``; ``'1 day'``, ``'2 hours 30 minutes'``, ``'90s'``."""
        words = text.strip().lower()
        if m := re.fullmatch(r"(\d+)(?:\s*epochs?)?", words):
            n = int(m.group(1))
            if n < 1:
                raise ValueError("retention keeps at least 1 epoch")
            return cls(epochs=n)
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+?)s?\b", words)
        if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*([a-z]+?)s?\b", "", words).strip() or \
                any(unit not in _UNITS for _, unit in parts):
            raise ValueError(f"retention is a number of epochs (100) or a span ('1 day', '2 hours'), got {text!r}")
        seconds = sum(float(n) * _UNITS[unit] for n, unit in parts)
        if seconds <= 0:
            raise ValueError(f"retention must be positive, got {text!r}")
        return cls(seconds=seconds)

    def describe(self) -> str:
        if self.epochs is not None:
            return f"{self.epochs} epoch{'s' if self.epochs != 1 else ''}"
        s = self.seconds or 0
        for unit, size in (("day", 86_400), ("hour", 3600), ("minute", 60)):
            if s >= size and s % size == 0:
                return f"{int(s // size)} {unit}{'s' if s != size else ''}"
        return f"{s:g} seconds"

    def to_json(self) -> dict:
        return {"epochs": self.epochs} if self.epochs is not None else {"seconds": self.seconds}

    @classmethod
    def from_json(cls, body: dict) -> "Retention":
        return cls(epochs=body.get("epochs"), seconds=body.get("seconds"))


DEFAULT_RETENTION = Retention(seconds=3600.0)  # an hour of changes: a subscriber may be away that long
