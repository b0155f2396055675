"""SSTs and state-table reads: newest version wins, tombstones hide, vnodes prune files."""

import numpy as np
import polars as pl
import pytest

from millpond import paths
from millpond.store.manifest import Manifest, ManifestStore
from millpond.errors import FencedError, StorageError
from millpond.store.objects import ObjectStore
from millpond.store.sst import SstRef, read_sst
from millpond.store.state_table import StateTable, write_state


def _write(store, epoch, rows):
    key = write_state(store, lambda h: paths.sst_key(epoch, "ab", "s", 0, h), pl.DataFrame(rows))
    return SstRef(key, epoch, paths.parse_sst_key(key)[2])


def test_lookup_merges_newest_first_and_hides_tombstones(tmp_path):
    store = ObjectStore(str(tmp_path))
    e1 = _write(store, 1, {"_kh": [1, 2, 3, 257], "k": ["a", "b", "c", "d"], "v": [10, 20, 30, 40],
                           "_del": [False] * 4})
    e2 = _write(store, 2, {"_kh": [2, 3], "k": ["b", "c"], "v": [21, 0], "_del": [False, True]})
    at1 = StateTable(store, (e1,), ("k",))
    at2 = StateTable(store, (e2, e1), ("k",))
    assert sorted(at1.lookup(np.array([2, 3])).rows()) == [(2, "b", 20), (3, "c", 30)]
    assert sorted(at2.lookup(np.array([2, 3])).rows()) == [(2, "b", 21)]  # time travel: e1 still readable
    assert sorted(at2.lookup(np.array([1, 257, 99])).rows()) == [(1, "a", 10), (257, "d", 40)]
    assert sorted(at2.scan()["k"].to_list()) == ["a", "b", "d"]
    assert at2.lookup(np.array([], dtype=np.int64)) is None


def test_vnode_bitmap_skips_files_of_other_vnodes(tmp_path):
    store = ObjectStore(str(tmp_path))
    ref = _write(store, 1, {"_kh": [5], "k": ["x"], "_del": [False]})
    assert ref.mask().sum() == 1 and ref.mask()[5]
    store.delete(ref.key)  # a read that touched the file would now fail
    assert StateTable(store, (ref,), ("k",)).lookup(np.array([6])) is None


def test_corrupt_sst_is_an_error_naming_the_file(tmp_path):
    store = ObjectStore(str(tmp_path))
    store.put("sst/bad.arrow", b"not arrow at all")
    with pytest.raises(StorageError, match="sst/bad.arrow"):
        read_sst(store, "sst/bad.arrow")


def test_manifest_commit_is_put_if_absent(tmp_path):
    store = ObjectStore(str(tmp_path))
    manifests = ManifestStore(store)
    assert manifests.latest().epoch == 0
    m = Manifest(epoch=1, ssts={"s": (SstRef("k", 1, "00" * 32),)}, offsets={"o1": {"t@1": 5}})
    manifests.commit(m)
    assert manifests.latest() == m
    with pytest.raises(FencedError, match="epoch 1"):
        manifests.commit(Manifest(epoch=1))


def test_additive_table_sums_counts_across_files(tmp_path):
    from millpond.errors import InvariantError

    store = ObjectStore(str(tmp_path))
    e1 = _write(store, 1, {"_kh": [1, 1, 2], "k": ["a", "b", "c"], "_count": [2, 1, 1], "_del": [False] * 3})
    e2 = _write(store, 2, {"_kh": [1, 2], "k": ["a", "c"], "_count": [-1, -1], "_del": [False] * 2})
    table = StateTable(store, (e2, e1), ("k",), additive=True)
    assert sorted(table.lookup(np.array([1, 2])).rows()) == [(1, "a", 1), (1, "b", 1)]
    e3 = _write(store, 3, {"_kh": [2], "k": ["c"], "_count": [-1], "_del": [False]})
    with pytest.raises(InvariantError, match="negative"):
        StateTable(store, (e3, e2, e1), ("k",), additive=True).lookup(np.array([2]))
