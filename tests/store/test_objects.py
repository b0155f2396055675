"""The object-store interface on a local folder and on an S3-protocol server (moto, loopback)."""

import pytest

from millpond.errors import StorageError
from millpond.store import objects
from millpond.store.objects import AlreadyExists, ObjectStore


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return ObjectStore(str(tmp_path / "root"))
    return ObjectStore(request.getfixturevalue("s3_url") + f"/{tmp_path.name}", request.getfixturevalue("s3_options"))


def test_put_get_list(store):
    store.put("a/1", b"one")
    store.put("a/2", b"two")
    store.put("b/1", b"other")
    assert store.get("a/2") == b"two"
    assert store.list("a/") == ["a/1", "a/2"]
    assert store.list("missing/") == []


def test_put_if_absent_fences_the_second_writer(store):
    store.put_if_absent("manifest/1", b"first")
    with pytest.raises(AlreadyExists):
        store.put_if_absent("manifest/1", b"second")
    assert store.get("manifest/1") == b"first"


def test_an_object_deleted_by_its_reader_right_after_it_was_put_is_no_error(tmp_path, monkeypatch):
    """A forwarded append's request may be answered and deleted by the log's writer before the
    forwarder's put has synced it: the put succeeded, and says so."""
    store = ObjectStore(str(tmp_path / "root"))
    real_put = store._put

    def put_then_consumed(key, data, mode):  # noqa: ANN001
        real_put(key, data, mode)
        store.delete(key)

    monkeypatch.setattr(store, "_put", put_then_consumed)
    store.put_if_absent("log/p0/inbox/request.json", b"{}")
    assert store.list("log/p0/inbox/") == []


def test_missing_object_is_a_named_storage_error(store):
    with pytest.raises(StorageError, match="'nope' is missing"):
        store.get("nope")


def test_unreachable_storage_is_a_clear_error():
    # port 9 on loopback: nothing listens, the connection is refused at once
    store = ObjectStore("s3://nowhere/x", {"endpoint": "http://127.0.0.1:9", "access_key_id": "k",
                                           "secret_access_key": "s", "region": "us-east-1", "allow_http": "true"})
    with pytest.raises(StorageError, match="cannot"):
        store.list("manifest/")


def test_a_relative_local_root_is_made_absolute(tmp_path, monkeypatch):
    # Spark tasks reopen the store by its root in their own working directory (an executor's work dir)
    monkeypatch.chdir(tmp_path)
    store = ObjectStore("data")
    assert store.root == str(tmp_path.resolve() / "data")
    store.put("k", b"v")
    monkeypatch.chdir("/")
    assert ObjectStore(store.root).get("k") == b"v"


def test_large_ranges_of_a_local_file_are_mapped_not_copied(store, monkeypatch):
    """``get_ranges_mapped``: the same bytes as ``get_ranges``; on a local folder spans of
    ``MAPPED_BYTES`` or more are views of the mapped file (they outlive its deletion), smaller ones
    and a file shorter than asked are read as ``get_ranges`` reads them (on S3 every one is); a
    missing object is the same named error."""
    monkeypatch.setattr(objects, "MAPPED_BYTES", 1 << 16)
    data = bytes(range(256)) * 1024  # 256 KiB
    store.put("seg/a", data)
    starts, ends = [5, 70_000, 200_000], [60_000, 70_100, 262_144]
    mapped = store.get_ranges_mapped("seg/a", starts, ends)
    assert [bytes(m) for m in mapped] == store.get_ranges("seg/a", starts, ends) == [data[s:e] for s, e in zip(starts, ends)]
    assert all(isinstance(m, memoryview if store.local_path("seg/a") else bytes) for m in mapped)
    small = store.get_ranges_mapped("seg/a", [10], [1000])
    assert small == [data[10:1000]] and isinstance(small[0], bytes)
    assert store.get_ranges_mapped("seg/a", [0], [300_000]) == store.get_ranges("seg/a", [0], [300_000])  # past its end
    store.delete("seg/a")
    assert bytes(mapped[2]) == data[200_000:]  # the mapping holds the pages of a deleted file
    with pytest.raises(StorageError, match="seg/a"):
        store.get_ranges_mapped("seg/a", [0], [100_000])
