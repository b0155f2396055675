import json

import pytest

from millpond import paths
from millpond.errors import StorageError
from millpond.store.manifest import FORMAT_VERSION, Manifest, ManifestStore
from millpond.store.objects import ObjectStore


def test_a_manifest_of_another_state_format_is_refused_by_name(tmp_path):
    store = ObjectStore(str(tmp_path))
    manifests = ManifestStore(store)
    manifests.commit(Manifest(version=1, epoch=1))
    assert manifests.latest().epoch == 1
    old = json.loads(Manifest(version=2, epoch=2).to_json()) | {"format": FORMAT_VERSION - 1}
    store.put_if_absent(paths.manifest_key(2), json.dumps(old).encode())
    with pytest.raises(StorageError, match=rf"manifest '.*{paths.manifest_key(2)}' under .* has state format "
                                           rf"{FORMAT_VERSION - 1}; this millpond reads format {FORMAT_VERSION}"):
        manifests.latest()


def test_an_expiry_floor_survives_the_manifest_and_compaction_drops_older_keys():
    from datetime import datetime

    import polars as pl

    from millpond.columns import DEL, EP, KH
    from millpond.store.compaction import merge_rows

    m = Manifest(version=3, epoch=3, expiry={"o1.n2.groups": ["minute", 120_000_000]})
    assert Manifest.from_json(m.to_json()).expiry == m.expiry
    assert "expiry" not in json.loads(Manifest(version=1, epoch=1).to_json())  # old manifests read the same
    minutes = [datetime(1970, 1, 1, 0, i) for i in (0, 1, 2, 3)] + [None]
    rows = pl.DataFrame({KH: [1, 2, 3, 4, 5], "minute": minutes, EP: [1, 2, 3, 3, 3], DEL: [False] * 5})
    kept = merge_rows(rows, ("minute",), additive=False, safe_epoch=3, bottom=True)
    assert kept[KH].to_list() == [1, 2, 3, 4, 5]
    expired = merge_rows(rows, ("minute",), additive=False, safe_epoch=3, bottom=True,
                         expiry=("minute", 120_000_000))
    assert expired[KH].to_list() == [3, 4, 5]  # minutes 0 and 1 are below the floor; a NULL window stays
