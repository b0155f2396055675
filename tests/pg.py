"""A throwaway PostgreSQL server for the tests that check millpond against PostgreSQL itself.

PostgreSQL is the meaning of millpond's SQL, so where a server binary is installed (``make setup``
installs Debian's where ``apt-get`` works) tests start one on a Unix socket in a temporary folder
and ask it. Where none is installed, :func:`unavailable` says why and each test decides what that
means (the semantics corpus skips its PostgreSQL check; sqllogictest runs the millpond side only).

    >>> reason = unavailable()                                # doctest: +SKIP
    >>> with server() as pg:                                  # doctest: +SKIP
    ...     subprocess.run(pg.psql(), input="SELECT 1;", text=True)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tests.conftest import _free_port

__all__ = ["Server", "StartError", "server", "unavailable"]


class StartError(RuntimeError):
    """The server binaries are there but the server did not start (the message has its output)."""


@dataclass(frozen=True)
class Server:
    """A running server: its socket folder, port and superuser (None: the current user)."""

    psql_path: str
    socket_dir: str
    port: int
    user: str | None
    ctl: tuple[str, ...] = ()  # pg_ctl's command line up to its action (with -D, -o, -l)

    def restart(self) -> None:
        """Stop the server (``-m fast``: its sessions cut) and start it again on the same port."""
        done = subprocess.run([*self.ctl, "-m", "fast", "-w", "restart"], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise StartError(f"pg_ctl restart failed: {done.stderr or done.stdout}")

    def psql(self, database: str = "postgres") -> list[str]:
        """``psql`` arguments for ``database``: unaligned, tuples only, quiet, stop on the first error."""
        return [self.psql_path, "-h", self.socket_dir, "-p", str(self.port), *(["-U", self.user] if self.user else []),
                "-d", database, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1"]


def _postgres_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for d in candidates:
        if (d / "initdb").exists() and (d / "pg_ctl").exists() and (d / "postgres").exists():
            return d
    return None


def _psql(bindir: Path) -> str | None:
    return shutil.which("psql") or (str(bindir / "psql") if (bindir / "psql").exists() else None)


def _runuser() -> str | None:
    """``runuser``, when it and a ``postgres`` user exist (PostgreSQL refuses to run as root)."""
    runuser = shutil.which("runuser")
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return None
    return runuser


def unavailable() -> str | None:
    """Why no server can be started here, or None when :func:`server` can start one."""
    bindir = _postgres_bin()
    if bindir is None or _psql(bindir) is None:
        return "no PostgreSQL server binary (initdb, pg_ctl, postgres) is installed"
    if os.geteuid() == 0 and _runuser() is None:
        return "running as root with no 'postgres' user (or runuser) to start PostgreSQL as"
    return None


@contextmanager
def server(logical: bool = False) -> Iterator[Server]:
    """Start a server (initdb, pg_ctl start; as the ``postgres`` user when root), stop it after;
    ``logical``: with ``wal_level = logical`` (replication slots), listening on loopback TCP too.

    Raises :class:`StartError` when it does not start; check :func:`unavailable` first."""
    reason = unavailable()
    if reason:
        raise StartError(reason)
    bindir = _postgres_bin()
    psql = _psql(bindir)
    home = Path(tempfile.mkdtemp(prefix="millpond-pg-"))  # not under pytest's folder: the server's user reads it
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(home, user="postgres")
        home.chmod(0o755)
        as_user = [_runuser(), "-u", "postgres", "--"]
    data, port = home / "data", _free_port()
    user = "postgres" if as_user else None
    initdb = [*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "--no-sync", "-E", "UTF8",
              "--locale=C.UTF-8", *(["-U", user] if user else [])]
    options = f"-k {home} -c listen_addresses='' -p {port} -c fsync=off -c TimeZone=UTC"
    if logical:
        options = options.replace("listen_addresses=''", "listen_addresses=127.0.0.1") + \
            " -c wal_level=logical -c max_replication_slots=40 -c max_wal_senders=40 -c max_connections=200"
    ctl = (*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(home / "log"))
    start = [*ctl, "-w", "start"]
    for command in (initdb, start):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode:
            shutil.rmtree(home, ignore_errors=True)
            raise StartError(f"{' '.join(command)} failed: {done.stderr or done.stdout}")
    try:
        yield Server(psql, str(home), port, user, ctl)
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


def check_expressions(db, columns: str, row: str, expressions: list[str]) -> None:  # noqa: ANN001
    """Each expression over the one-row table ``one (k INT, <columns>)`` holding ``(1, <row>)``,
    evaluated in a view (Spark) and in a query (DuckDB): the two must give the same wire text, and
    (where a PostgreSQL server can start) PostgreSQL's own; else the test is skipped after the
    first check, saying so."""
    import pytest

    from millpond.serve import pgtext

    db.sql(f"CREATE TABLE one (k INT PRIMARY KEY{', ' + columns if columns else ''})")
    db.sql(f"INSERT INTO one VALUES (1{', ' + row if row else ''})")
    for i, e in enumerate(expressions):
        db.sql(f"CREATE MATERIALIZED VIEW e{i} AS SELECT {e} AS v FROM one")
    db.flush()
    mine = []
    for i, e in enumerate(expressions):
        query = list(pgtext.rows(db.sql(f"SELECT {e} AS v FROM one")))[0][0]
        view = list(pgtext.rows(db.sql(f"SELECT v FROM e{i}")))[0][0]
        assert query == view, e
        mine.append("" if query is None else query.decode())
    reason = unavailable()
    if reason:
        pytest.skip(f"{reason}: millpond's view and query agree; PostgreSQL's answers were not checked")
    setup = f"CREATE TABLE one (k INT{', ' + columns if columns else ''}); INSERT INTO one VALUES (1{', ' + row if row else ''});\n"
    with server() as pg:
        out = subprocess.run(pg.psql(), input=setup + "".join(f"SELECT {e} FROM one;\n" for e in expressions),
                             capture_output=True, text=True, check=True).stdout
    assert mine == out.splitlines()
