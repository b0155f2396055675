"""Compaction in a child process (store/compactor.py): the same outputs as in-process, a dead
child restarted at the next compaction, stopped at once, and gone with its parent."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import polars as pl
import pytest

from millpond.errors import StorageError
from millpond.store import compaction
from millpond.store.compactor import CompactionProcess
from millpond.store.manifest import Levels
from millpond.store.objects import ObjectStore
from millpond.store.sst import open_sst, read_all, write_sst
from millpond.store.state_table import StateTable


def _runs(store: ObjectStore, n: int = 400) -> Levels:
    refs = []
    for e in range(4):  # four overlapping runs of one newest-wins table, a tombstone among them
        keys = list(range(e, n, 3))
        refs.append(write_sst(store, f"sst/e{e}.sst", pl.DataFrame(
            {"_kh": keys, "v": [e * 1000 + k for k in keys], "_del": [k == 7 for k in keys], "_ep": [e + 1] * len(keys)},
            schema={"_kh": pl.Int64, "v": pl.Int64, "_del": pl.Boolean, "_ep": pl.Int64})))
    return Levels(tuple(reversed(refs)), ())


def test_the_child_merges_as_the_process_does_and_is_restarted_after_it_dies(tmp_path):
    store = ObjectStore(str(tmp_path))
    levels = _runs(store)
    task = compaction.pick("kv", levels, compaction.Policy(), 4, "c/a/")
    runner = CompactionProcess()
    try:
        outputs = runner(store, [task])[0]
        assert outputs and all(open_sst(store, r).ref == r for r in outputs)
        merged = compaction.apply(levels, task, outputs)
        want = StateTable(store, levels, ()).scan().sort("_kh")
        assert StateTable(store, merged, ()).scan().sort("_kh").equals(want)
        assert 7 not in want["_kh"].to_list()
        first = runner._child.pid
        runner._child.kill()
        runner._child.wait()
        again = runner(store, [compaction.pick("kv", levels, compaction.Policy(), 4, "c/b/")])[0]
        assert runner._child.pid != first
        assert read_all(store, again[0]).equals(read_all(store, outputs[0]))
    finally:
        runner.stop()
    assert runner._child is None


def test_a_failed_task_is_a_storage_error_naming_the_root(tmp_path):
    store = ObjectStore(str(tmp_path))
    levels = _runs(store)
    task = compaction.pick("kv", levels, compaction.Policy(), 4, "c/a/")
    store.delete(levels.l0[0].key)  # an input gone: the child reports, the parent raises
    runner = CompactionProcess()
    try:
        with pytest.raises(StorageError, match="compaction of .* failed"):
            runner(store, [task])
        assert runner._child.poll() is None  # the child lives on for the next compaction
    finally:
        runner.stop()


def test_a_busy_child_dies_with_its_parent(tmp_path):
    """The parent dies in the middle of a merge (a crash): the child is killed with it, and the
    merge never writes its outputs."""
    script = ("import os, sys, threading, time\n"
              "from millpond.store import compaction\n"
              "from millpond.store.compactor import CompactionProcess\n"
              "from millpond.store.objects import ObjectStore\n"
              "from tests.store.test_compactor import _runs\n"
              "store = ObjectStore(sys.argv[1])\n"
              "task = compaction.pick('kv', _runs(store, 400_000), compaction.Policy(), 4, 'c/x/')\n"
              "runner = CompactionProcess()\n"
              "threading.Thread(target=runner, args=(store, [task]), daemon=True).start()\n"
              "while runner._child is None: time.sleep(0.01)\n"
              "time.sleep(0.3)\n"
              "print(runner._child.pid, flush=True)\n"
              "os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr
    child = int(out.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)
    assert ObjectStore(str(tmp_path)).list("c/x/") == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
