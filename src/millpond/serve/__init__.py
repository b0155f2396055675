"""Serving: answering queries over committed snapshots."""

from millpond.serve.query import answer

__all__ = ["answer"]
