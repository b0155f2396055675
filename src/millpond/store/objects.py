"""One small interface over object storage (obstore): a local folder or ``s3://...``.

Every write of a manifest, catalog version or log segment uses :meth:`ObjectStore.put_if_absent`:
the conditional create is what fences a second writer on the same root. On a local folder a
put is followed by an fsync of the file and its directory, so a returned put is durable.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import obstore
from obstore.exceptions import AlreadyExistsError
from obstore.store import from_url

from millpond.errors import StorageError

__all__ = ["ObjectStore", "open_store", "AlreadyExists"]


class AlreadyExists(Exception):
    """``put_if_absent`` found the key taken."""


class ObjectStore:
    """Keys are relative to the root URL. Objects are immutable once written.

    ``options`` configure remote stores explicitly (e.g. ``endpoint``, ``access_key_id``,
    ``secret_access_key``, ``region``, ``allow_http``); they travel with every Spark task, so
    workers never depend on their own environment for credentials.
    """

    def __init__(self, root: str, options: dict[str, str] | None = None):
        self.root = root
        self.options = dict(options or {})
        self._local_dir: Path | None = None
        if "://" not in root:
            self._local_dir = Path(root).expanduser().resolve()
            self._local_dir.mkdir(parents=True, exist_ok=True)
            url = self._local_dir.as_uri()
        elif root.startswith("file://"):
            self._local_dir = Path(root[len("file://"):])
            self._local_dir.mkdir(parents=True, exist_ok=True)
            url = root
        else:
            url = root
        try:
            if self._local_dir:
                self._store = from_url(url, mkdir=True)
            else:
                client = {k: v for k, v in self.options.items() if k in _CLIENT_KEYS}
                config = {k: v for k, v in self.options.items() if k not in _CLIENT_KEYS}
                self._store = from_url(url, config=config or None, client_options=client or None)
        except Exception as exc:  # obstore raises several types for bad URLs/config
            raise StorageError(f"cannot open object storage at {root!r}: {exc}") from exc

    # -- writes -----------------------------------------------------------------------------
    def put(self, key: str, data: bytes) -> None:
        self._call("put", key, lambda: obstore.put(self._store, key, data))
        self._fsync(key)

    def put_if_absent(self, key: str, data: bytes) -> None:
        """Create ``key``; raise :class:`AlreadyExists` if it is there (atomic, conditional)."""
        try:
            obstore.put(self._store, key, data, mode="create")
        except AlreadyExistsError as exc:
            raise AlreadyExists(key) from exc
        except Exception as exc:
            if "PreconditionFailed" in type(exc).__name__ or "412" in str(exc):
                raise AlreadyExists(key) from exc
            raise StorageError(f"cannot write {key!r} under {self.root!r}: {exc}") from exc
        self._fsync(key)

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: obstore.delete(self._store, key))

    # -- reads ------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        try:
            return bytes(obstore.get(self._store, key).bytes())
        except FileNotFoundError as exc:
            raise StorageError(f"object {key!r} is missing under {self.root!r}") from exc
        except Exception as exc:
            raise StorageError(f"cannot read {key!r} under {self.root!r}: {exc}") from exc

    def list(self, prefix: str) -> list[str]:
        """Keys under ``prefix``, sorted."""
        def run() -> list[str]:
            out: list[str] = []
            for chunk in obstore.list(self._store, prefix):
                out.extend(meta["path"] for meta in chunk)
            return sorted(out)
        return self._call("list", prefix, run)

    def local_path(self, key: str) -> Path | None:
        return self._local_dir / key if self._local_dir else None

    # -- helpers ----------------------------------------------------------------------------
    def _call(self, what: str, key: str, fn):  # noqa: ANN001
        try:
            return fn()
        except FileNotFoundError:
            if what == "list":
                return []
            raise StorageError(f"object {key!r} is missing under {self.root!r}")
        except Exception as exc:
            raise StorageError(f"cannot {what} {key!r} under {self.root!r}: {exc}") from exc

    def _fsync(self, key: str) -> None:
        if self._local_dir is None:
            return  # a completed PUT to S3 is durable
        path = self._local_dir / key
        for target in (path, path.parent):
            fd = os.open(target, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


_CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "timeout", "connect_timeout"}
_OPEN: dict[tuple, ObjectStore] = {}
_LOCK = threading.Lock()


def open_store(root: str, options: dict[str, str] | None = None) -> ObjectStore:
    """A process-wide store per (root, options) (Spark workers reuse it across tasks)."""
    key = (root, tuple(sorted((options or {}).items())))
    with _LOCK:
        store = _OPEN.get(key)
        if store is None:
            store = _OPEN[key] = ObjectStore(root, options)
        return store
