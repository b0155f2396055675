"""One small interface over object storage (obstore): a local folder or ``s3://...``.

Every write of a manifest, catalog version or log segment uses :meth:`ObjectStore.put_if_absent`:
the conditional create is what fences a second writer on the same root. On a local folder a
put is followed by an fsync of the file and its directory, so a returned put is durable.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

import obstore
from obstore.exceptions import (AlreadyExistsError, InvalidPathError, NotFoundError, NotSupportedError,
                                PermissionDeniedError, PreconditionError, UnauthenticatedError,
                                UnknownConfigurationKeyError)
from obstore.store import from_url

from millpond.errors import MissingError, StorageError

__all__ = ["ObjectStore", "open_store", "AlreadyExists"]


class AlreadyExists(Exception):
    """``put_if_absent`` found the key taken."""


class ObjectStore:
    """Keys are relative to the root URL. Objects are immutable once written.

    ``options`` configure remote stores explicitly (e.g. ``endpoint``, ``access_key_id``,
    ``secret_access_key``, ``region``, ``allow_http``); they travel with every Spark task, so
    workers never depend on their own environment for credentials.
    """

    def __init__(self, root: str, options: dict[str, str] | None = None, *, create: bool = True):
        """``create=False`` opens a local root only if its folder exists (a reader creates nothing)."""
        self.root = root
        self.options = dict(options or {})
        self.retries = 0  # transient failures retried so far (a metric)
        self.sleep = time.sleep
        self._local_dir: Path | None = None
        if "://" not in root:
            self._local_dir = Path(root).expanduser().resolve()
            _make_folder(root, self._local_dir, create)
            url = self._local_dir.as_uri()
            # Spark tasks reopen the store by this root, in their own working directory (an executor's
            # work dir, or where the JVM started): a relative root would be a different folder there.
            self.root = str(self._local_dir)
        elif root.startswith("file://"):
            self._local_dir = Path(root[len("file://"):])
            _make_folder(root, self._local_dir, create)
            url = root
        else:
            url = root
        try:
            if self._local_dir:
                self._store = from_url(url, mkdir=True)
            else:
                client = {k: v for k, v in self.options.items() if k in _CLIENT_KEYS}
                config = {k: v for k, v in self.options.items() if k not in _CLIENT_KEYS}
                self._store = from_url(url, config=config or None, client_options=client or None,
                                       retry_config=CLIENT_RETRIES)
        except Exception as exc:  # obstore raises several types for bad URLs/config
            raise StorageError(f"cannot open object storage at {root!r}: {exc}") from exc

    def check_writable(self) -> None:
        """A :class:`StorageError` now, rather than at the first write, if a local root cannot be
        written (a read-only folder or filesystem). Remote roots are checked by their first write."""
        if self._local_dir is None:
            return
        try:
            with tempfile.TemporaryFile(dir=self._local_dir):
                pass
        except OSError as exc:
            raise StorageError(f"cannot write under {self.root!r}: {exc.strerror or exc}") from None

    # -- writes -----------------------------------------------------------------------------
    def put(self, key: str, data: bytes, *, durable: bool = True) -> None:
        """Write ``key`` whole (atomically: a reader sees the old object or the new). ``durable=False``:
        not synced on a local root, for an object rewritten before anything reads it after a crash."""
        self._retry("write", key, lambda: self._put(key, data, None))
        if durable:
            self._fsync(key)

    def put_if_absent(self, key: str, data: bytes) -> None:
        """Create ``key``; raise :class:`AlreadyExists` if it is there (atomic, conditional).

        A retried create that finds the key holding exactly ``data`` succeeded the first time
        (its reply was lost), so it returns normally."""
        first = [True]

        def attempt() -> None:
            try:
                self._put(key, data, "create")
            except Exception as exc:
                taken = isinstance(exc, (AlreadyExistsError, PreconditionError)) or (
                    "PreconditionFailed" in str(exc) or " 412 " in f" {exc} ")
                if not taken:
                    raise
                if not first[0] and self._get(key) == data:
                    return
                raise AlreadyExists(key) from exc
            finally:
                first[0] = False
        self._retry("write", key, attempt)
        self._fsync(key)

    def delete(self, key: str) -> None:
        self._retry("delete", key, lambda: self._delete(key))

    # -- reads ------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        return self._retry("read", key, lambda: self._get(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._retry("read", key, lambda: self._get_ranges(key, [start], [end])[0])

    def get_ranges(self, key: str, starts: list[int], ends: list[int]) -> list[bytes]:
        return self._retry("read", key, lambda: self._get_ranges(key, starts, ends))

    def get_ranges_mapped(self, key: str, starts: list[int], ends: list[int]) -> list[bytes | memoryview]:
        """:meth:`get_ranges`, as read-only views of the file mapped into memory where the root is a
        local folder and the ranges span :data:`MAPPED_BYTES` or more: the pages come from the page
        cache as they are touched, never copied (a log frame of 1M rows read by an epoch: 100 MB
        copied and checksummed in 60-76 ms, mapped and checksummed in 4 ms). The views keep the
        mapping; only ranges a reader knows whole (a log frame) may be read so: a file cut
        shorter under a mapped page would fault."""
        return self._retry("read", key, lambda: self._get_mapped(key, starts, ends))

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes of ``key`` (fewer if it is shorter) and its size."""
        return self._retry("read", key, lambda: self._get_suffix(key, length))

    def list(self, prefix: str) -> list[str]:
        """Keys under ``prefix``, sorted."""
        return sorted(self._retry("list", prefix, lambda: self._list(prefix)))

    def list_files(self, prefix: str) -> list[tuple[str, int, int]]:
        """The objects under ``prefix`` as (key, size, modification time in ns)."""
        def listing() -> list[tuple[str, int, int]]:
            return [(m["path"], int(m["size"]), int(m["last_modified"].timestamp() * 1e9))
                    for chunk in obstore.list(self._store, prefix) for m in chunk]
        return self._retry("list", prefix, listing)

    def local_path(self, key: str) -> Path | None:
        return self._local_dir / key if self._local_dir else None

    # -- the raw operations (a test wrapper overrides these to inject faults) ---------------
    def _put(self, key: str, data: bytes, mode: str | None) -> None:
        if mode:
            obstore.put(self._store, key, data, mode=mode)
        else:
            obstore.put(self._store, key, data)

    def _get(self, key: str) -> bytes:
        return bytes(obstore.get(self._store, key).bytes())

    def _get_ranges(self, key: str, starts: list[int], ends: list[int]) -> list[bytes]:
        if self._local_dir is not None:  # exact reads: obstore would coalesce nearby ranges into big ones
            fd = os.open(self._local_dir / key, os.O_RDONLY)
            try:
                return [os.pread(fd, e - s, s) for s, e in zip(starts, ends)]
            finally:
                os.close(fd)
        return [bytes(b) for b in obstore.get_ranges(self._store, key, starts=starts, ends=ends)]

    def _get_mapped(self, key: str, starts: list[int], ends: list[int]) -> list[bytes | memoryview]:
        lo, hi = min(starts, default=0), max(ends, default=0)
        if self._local_dir is None or hi - lo < MAPPED_BYTES:  # (the raw read itself: a fault wrapper counts one)
            return ObjectStore._get_ranges(self, key, starts, ends)
        base = lo - lo % mmap.ALLOCATIONGRANULARITY
        with open(self._local_dir / key, "rb") as f:
            if os.fstat(f.fileno()).st_size < hi:  # shorter than asked: read as it is (the reader finds the cut)
                return ObjectStore._get_ranges(self, key, starts, ends)
            mapped = memoryview(mmap.mmap(f.fileno(), hi - base, access=mmap.ACCESS_READ, offset=base))
        return [mapped[s - base:e - base] for s, e in zip(starts, ends)]

    def _get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        result = obstore.get(self._store, key, options={"range": {"suffix": length}})
        return bytes(result.bytes()), int(result.meta["size"])

    def _delete(self, key: str) -> None:
        obstore.delete(self._store, key)

    def _list(self, prefix: str) -> list[str]:
        out: list[str] = []
        for chunk in obstore.list(self._store, prefix):
            out.extend(meta["path"] for meta in chunk)
        return out

    # -- helpers ----------------------------------------------------------------------------
    def _retry(self, what: str, key: str, fn):  # noqa: ANN001
        """Run ``fn``, retrying transient failures with backoff; errors name the key and root."""
        delay = RETRY_BASE_SECONDS
        for attempt in range(RETRY_ATTEMPTS):
            try:
                return fn()
            except AlreadyExists:
                raise
            except (FileNotFoundError, NotFoundError):
                if what == "list":
                    return []
                if what == "delete":
                    return None
                raise MissingError(f"object {key!r} is missing under {self.root!r}") from None
            except _PERMANENT as exc:
                raise StorageError(f"cannot {what} {key!r} under {self.root!r}: {exc}") from exc
            except Exception as exc:  # network, throttling, 5xx, injected faults: retried
                if attempt + 1 == RETRY_ATTEMPTS:
                    raise StorageError(f"cannot {what} {key!r} under {self.root!r} after {RETRY_ATTEMPTS} "
                                       f"attempts: {exc}") from exc
                self.retries += 1
                self.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _fsync(self, key: str) -> None:
        if self._local_dir is None:
            return  # a completed PUT to S3 is durable
        path = self._local_dir / key
        for target in (path, path.parent):
            try:
                fd = os.open(target, os.O_RDONLY)
            except FileNotFoundError:
                if target is path:  # already read and deleted by its reader (a forwarded request answered
                    continue        # in that moment): what it held no longer needs to be durable here
                raise
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _make_folder(root: str, folder: Path, create: bool) -> None:
    """The root's folder, created if missing (``create``); an unusable path is a StorageError."""
    if folder.is_dir():
        return
    if folder.exists():
        raise StorageError(f"root {root!r} is a file, not a folder")
    if not create:
        raise StorageError(f"no database at {root!r}: the folder does not exist")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create the root folder {root!r}: {exc.strerror or exc}") from None


RETRY_ATTEMPTS = 6
RETRY_BASE_SECONDS = 0.05
MAPPED_BYTES = 1 << 20  # get_ranges_mapped maps spans of at least this many bytes (smaller: copied)
# obstore's own retries inside each of ours (connection errors, 5xx, timeouts of safe requests):
# few and short, so an unreachable store is reported in seconds (with obstore's defaults, 10 retries
# backing off to 15 s, inside our 6 attempts, it took 29 s to say "cannot")
CLIENT_RETRIES = {"max_retries": 2, "retry_timeout": timedelta(seconds=10),
                  "backoff": {"init_backoff": timedelta(milliseconds=50), "max_backoff": timedelta(seconds=1), "base": 2}}
_PERMANENT = (PermissionDeniedError, UnauthenticatedError, InvalidPathError, NotSupportedError,
              UnknownConfigurationKeyError, PermissionError, IsADirectoryError, ValueError, TypeError)
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
