"""``millpond log append/tail/info`` as a script would use them."""

import json
import subprocess
import sys

import pytest

from millpond.cli import main


def _run(capsys, *argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        import io
        monkeypatch.setattr(sys, "stdin", type("S", (), {"buffer": io.BytesIO(stdin.encode())})())
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_append_tail_info(tmp_path, capsys, monkeypatch):
    root = str(tmp_path)
    code, out, _ = _run(capsys, "log", "append", root, "visit", "--schema", "user:string,ms:int64",
                        stdin='{"user": "ann", "ms": 1}\n{"user": "bob", "ms": 2}\n', monkeypatch=monkeypatch)
    assert code == 0 and json.loads(out)["end"] == 2
    code, out, _ = _run(capsys, "log", "append", root, "visit", "--producer", "loader:1",
                        stdin='{"user": "cid", "ms": 3}\n', monkeypatch=monkeypatch)
    assert json.loads(out) | {"tick": 0} == {"channel": "visit", "first": 2, "end": 3, "tick": 0, "duplicate": False}
    code, out, _ = _run(capsys, "log", "append", root, "visit", "--producer", "loader:1",
                        stdin='{"user": "cid", "ms": 3}\n', monkeypatch=monkeypatch)
    assert json.loads(out)["duplicate"]  # a retried script applies once
    code, out, _ = _run(capsys, "log", "tail", root, "visit", "--from", "1")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["user"], r["_seq"]) for r in rows] == [("bob", 1), ("cid", 2)]
    code, out, _ = _run(capsys, "log", "info", root)
    info = json.loads(out)["channels"][0]
    assert info["wal_frames"] + info["parquet_files"] == 2  # each command's writer flushed the one before
    assert info | {"id": "", "physical_channel": 0, "wal_frames": 0, "parquet_files": 0} == {
        "channel": "visit", "id": "", "physical_channel": 0, "start": 0, "end": 3, "wal_frames": 0,
        "parquet_files": 0, "schema": {"user": "string", "ms": "int64"}}


@pytest.mark.parametrize("lines, message", [
    ('{"user": "ann", "ms": 1}\n{"user": "bob", "ms": }\n', "line 2: not valid JSON"),
    ('{"user": "ann", "ms": 1}\n{"user": "bob", "ms": "x"}\n', "line 2: a field does not fit"),
    ('{"user": "ann", "ms": 1, "zzz": 1}\n', "line 1: unknown field 'zzz'"),
])
def test_bad_lines_are_named_and_nothing_is_appended(tmp_path, capsys, monkeypatch, lines, message):
    root = str(tmp_path)
    _run(capsys, "log", "append", root, "visit", "--schema", "user:string,ms:int64", stdin="", monkeypatch=monkeypatch)
    code, _, err = _run(capsys, "log", "append", root, "visit", stdin=lines, monkeypatch=monkeypatch)
    assert code == 1 and message in err
    _, out, _ = _run(capsys, "log", "info", root, "visit")
    assert json.loads(out)["channels"][0]["end"] == 0


def test_the_installed_command_runs(tmp_path):
    out = subprocess.run([sys.executable, "-m", "millpond.cli", "log", "info", str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out)["channels"] == []
