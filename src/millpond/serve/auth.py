"""Who may connect to ``millpond serve``, and how they prove it: users and passwords, SCRAM-SHA-256
(PostgreSQL's default since 14; the password never crosses the wire), cleartext only on request,
TLS, read-only users, a connection limit and an idle timeout (:class:`Access`).

A password file has one ``user:password`` per line (``user:password:read-only`` for a user who
may only read), ``#`` comments and blank lines; a password may hold ``:`` except as its last
field's separator. Passwords are kept as SCRAM verifiers (salted, 4096 PBKDF2 rounds), as
PostgreSQL keeps them, not as text.

    >>> users = parse_users("# who\\nada:s3cret\\nbob:p:w:read-only\\n", "users.txt")
    >>> sorted(users), users["bob"].read_only, users["ada"].check("s3cret"), users["ada"].check("x")
    (['ada', 'bob'], True, True, False)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from millpond.errors import MillpondError

__all__ = ["Access", "User", "Scram", "parse_users", "read_users", "AUTH_METHODS"]

AUTH_METHODS = ("scram-sha-256", "cleartext")
ITERATIONS = 4096
ANY_USER = "*"  # a single password for every user name (serve(password=...))


@dataclass(frozen=True)
class User:
    """A user's SCRAM-SHA-256 verifier (what PostgreSQL stores in ``pg_authid``)."""

    name: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    read_only: bool = False

    @classmethod
    def with_password(cls, name: str, password: str, *, read_only: bool = False) -> "User":
        salt = os.urandom(16)
        stored, server = _keys(password, salt)
        return cls(name, salt, stored, server, read_only)

    def check(self, password: str) -> bool:
        """``password`` is this user's (a cleartext password message)."""
        return hmac.compare_digest(_keys(password, self.salt)[0], self.stored_key)


def _keys(password: str, salt: bytes) -> tuple[bytes, bytes]:
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, ITERATIONS)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    return hashlib.sha256(client_key).digest(), hmac.new(salted, b"Server Key", "sha256").digest()


def parse_users(text: str, where: str) -> dict[str, User]:
    """The users of a password file's ``text`` (``where`` names it in errors)."""
    users: dict[str, User] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, password = line.partition(":")
        read_only = password.endswith(":read-only")
        password = password[:-len(":read-only")] if read_only else password
        if not sep or not name or not password:
            raise MillpondError(f"{where}, line {n}: expected user:password (or user:password:read-only)")
        if name in users:
            raise MillpondError(f"{where}, line {n}: user {name!r} is given twice")
        users[name] = User.with_password(name, password, read_only=read_only)
    if not users:
        raise MillpondError(f"{where}: no users (one user:password per line)")
    return users


def read_users(path: str | Path) -> dict[str, User]:
    try:
        return parse_users(Path(path).read_text(), str(path))
    except OSError as exc:
        raise MillpondError(f"password file {str(path)!r} cannot be read: {exc.strerror or exc}") from None


@dataclass
class Access:
    """How a server admits connections. ``users`` None: anyone, without a password (localhost)."""

    users: dict[str, User] | None = None
    method: str = "scram-sha-256"
    tls: ssl.SSLContext | None = None  # given: every connection must use TLS
    max_connections: int = 100
    idle_timeout: float | None = None  # seconds a connection may wait between statements
    active: int = field(default=0, repr=False)  # connections now open (the server counts them)

    @classmethod
    def of(cls, *, password: str | None = None, password_file: str | Path | None = None,
           method: str = "scram-sha-256", tls_cert: str | None = None, tls_key: str | None = None,
           max_connections: int = 100, idle_timeout: float | None = None) -> "Access":
        if method not in AUTH_METHODS:
            raise MillpondError(f"auth {method!r}: use one of {', '.join(AUTH_METHODS)}")
        if password is not None and password_file is not None:
            raise MillpondError("give a password or a password file, not both")
        users = read_users(password_file) if password_file is not None else \
            {ANY_USER: User.with_password(ANY_USER, password)} if password is not None else None
        if (tls_cert is None) != (tls_key is None):
            raise MillpondError("TLS needs both a certificate and its key (tls_cert and tls_key)")
        tls = None
        if tls_cert is not None:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                tls.load_cert_chain(tls_cert, tls_key)
            except (OSError, ssl.SSLError) as exc:
                raise MillpondError(f"TLS certificate {tls_cert!r} / key {tls_key!r}: {exc}") from None
        if max_connections < 1:
            raise MillpondError("max_connections must be at least 1")
        return cls(users, method, tls, max_connections, idle_timeout)

    def user(self, name: str) -> User | None:
        if self.users is None:
            return None
        return self.users.get(name) or self.users.get(ANY_USER)

    def read_only(self, name: str) -> bool:
        u = self.user(name)
        return u is not None and u.read_only


class Scram:
    """One SCRAM-SHA-256 exchange (RFC 5802/7677, as PostgreSQL runs it: the user is the startup
    message's; no channel binding is offered)."""

    def __init__(self, user: User):
        self.user = user
        self.nonce = ""
        self.messages: list[str] = []

    def first(self, client_first: bytes) -> bytes:
        """The server-first-message answering the client's."""
        text = client_first.decode()
        gs2, _, bare = text.partition(",")
        _, _, bare = bare.partition(",")  # the authzid (empty)
        if gs2 not in ("n", "y"):
            raise MillpondError("SCRAM: channel binding is not supported")
        attrs = dict(part.split("=", 1) for part in bare.split(",") if "=" in part)
        self.nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
        server_first = f"r={self.nonce},s={base64.b64encode(self.user.salt).decode()},i={ITERATIONS}"
        self.messages = [bare, server_first]
        self.gs2 = text[:len(text) - len(bare)]
        return server_first.encode()

    def final(self, client_final: bytes) -> bytes | None:
        """The server-final-message, or None when the client's proof is wrong."""
        text = client_final.decode()
        without_proof, _, proof = text.rpartition(",p=")
        attrs = dict(part.split("=", 1) for part in without_proof.split(","))
        if attrs.get("r") != self.nonce or base64.b64decode(attrs.get("c", "")) != self.gs2.encode():
            return None
        auth = ",".join([*self.messages, without_proof]).encode()
        signature = hmac.new(self.user.stored_key, auth, "sha256").digest()
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.user.stored_key):
            return None
        return b"v=" + base64.b64encode(hmac.new(self.user.server_key, auth, "sha256").digest())
