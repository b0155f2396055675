"""A second writer of a root is refused at connect, not at its first INSERT: while ``millpond serve
ROOT`` runs in another process, ``connect(root)`` (and ``millpond sql ROOT``) raise a
:class:`millpond.HeldError` naming the holder and what to do instead — and both suggestions work."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import millpond
from millpond.api import Database
from millpond.cli import main


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_second_writer_is_refused_at_connect_naming_the_holder(tmp_path, capsys):
    root = str(tmp_path / "root")
    assert _cli(capsys, "sql", root, "-c", "CREATE TABLE t (k INT); INSERT INTO t VALUES (1); FLUSH")[0] == 0
    millpond_cmd = str(Path(sys.executable).parent / "millpond")
    env = {k: v for k, v in os.environ.items() if k not in ("MILLPOND_LOG_LEVEL", "MILLPOND_CRASH_AT")}
    server = subprocess.Popen([millpond_cmd, "serve", root, "--port", "0", "--readers", "0", "--interval", "none"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = server.stderr.readline()
        assert "millpond: serving" in line, line + server.stderr.read()
        holder = f"process {server.pid} on host {socket.gethostname()}: millpond serve"

        with pytest.raises(millpond.HeldError) as refused:
            millpond.connect(root, interval=None)
        message = str(refused.value)
        assert isinstance(refused.value, millpond.MillpondError)
        assert message.startswith(f"{root!r} is open for writing by another Database ({holder})"), message
        assert "millpond.connect(root, read_only=True)" in message and "close that one first" in message
        assert refused.value.holder["pid"] == server.pid and refused.value.holder["role"] == "database"

        code, _, err = _cli(capsys, "sql", root, "-c", "INSERT INTO t VALUES (2)")
        assert code == 1 and err.startswith(f"millpond: {root!r} is open for writing by another Database ({holder})")
        assert err.count("\n") == 1

        with millpond.connect(root, read_only=True) as reader:  # suggestion 1: read beside it
            assert reader.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 1}]
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)

    # suggestion 2: once that one is closed, this one writes
    code, out, err = _cli(capsys, "sql", root, "--format", "csv", "-c",
                          "INSERT INTO t VALUES (2); FLUSH; SELECT count(*) AS n FROM t")
    assert (code, out) == (0, "\"n\"\n2\n"), err
    first = Database(root, interval=None, lazy_spark=True)
    try:  # and a second Database of one process is refused the same way
        this = rf"another Database \(process {os.getpid()} on host .* \(this process\)"
        with pytest.raises(millpond.HeldError, match=this):
            Database(root, interval=None, lazy_spark=True)
        first.sql("INSERT INTO t VALUES (3)")
    finally:
        first.close()
