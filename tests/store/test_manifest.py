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
