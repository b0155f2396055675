"""Two writers on one root: the second to commit is fenced with a clear error; the first's
committed state is intact. A failing epoch commits nothing."""

from pathlib import Path

import pyarrow as pa
import pytest

from millpond import FencedError, MillpondError
from millpond.log import writer
from tests.conftest import rows
from tests.test_seed import seed


def test_second_coordinator_is_fenced(open_db, monkeypatch):
    # A lock file that does not say a Database holds the root (an older millpond's: a pid alone) does
    # not refuse the second Database at connect (tests/first_hour/test_writer.py): the manifest's
    # put-if-absent fences it at its commit.
    monkeypatch.setattr(writer, "_holder", lambda data: {})
    first = open_db()
    seed(first)
    second = open_db()  # opened before the first commits anything
    first.flush()
    with pytest.raises(FencedError, match=r"version \d+ \(epoch \d+\) .* another writer"):
        second.flush()
    with pytest.raises(FencedError):
        second.insert("visit", pa.table({"product": ["x"], "user": ["y"], "length": [1]}))
    assert rows(first.sql("SELECT * FROM result")) == [("Fruit", 40), ("Vegetable", 60)]
    first.insert("visit", pa.table({"product": ["Apple"], "user": ["Zed"], "length": [45]}))
    first.flush()
    assert rows(first.sql("SELECT * FROM result")) == [("Fruit", 45), ("Vegetable", 60)]


def test_failed_epoch_is_a_clear_error_and_commits_nothing(open_db, root):
    db = open_db()
    seed(db)
    db.flush()
    epoch = db.epoch
    db.insert("visit", pa.table({"product": ["Apple"], "user": ["Zed"], "length": [45]}))
    # Lose the view's committed state files: the next epoch's tasks must fail, not guess.
    view = db.catalog.views["result"]
    lost = [p for p in Path(root, "sst").rglob("*.sst") if f"/o{view.id}." in str(p)]
    assert lost
    for p in lost:
        p.unlink()
    with pytest.raises(MillpondError, match=r"epoch \d+ failed and was not committed: .*missing"):
        db.flush()
    assert db.epoch == epoch  # nothing committed; the table's own epoch work is not visible either
