"""A dashboard a person reads in ten seconds: ``millpond serve ROOT --http PORT`` (or
``millpond ui ROOT``, a read-only open; ``db.serve_dashboard(port=...)`` from Python).

One page (``dashboard_static/``) over a small JSON API, served from a background thread of the
process that has the Database open (Starlette on uvicorn), read-only:

- ``/api/state``: the dataflow graph — sources → tables → views → sinks — with each node's rows
  (counted up to :data:`EXACT_ROWS`, else as stored),
  state bytes and freshness (a view's status, the epoch its rows are as of, the records it has
  still to read, and its error when it failed), and the epochs of the last hour (their duration,
  records in and changes out, read from the changes the root keeps, so a read-only open plots them
  too);
- ``/api/jobs``: the jobs under way (``SHOW JOBS``: it takes no lock, so progress moves while an
  epoch runs);
- ``/api/views/<name>``: a view's SQL and ``EXPLAIN``.

The page's JavaScript libraries (Cytoscape.js with dagre for the graph, uPlot for the plots) are
npm packages unpacked into ``dashboard_static/vendor`` when millpond is set up
(``tools/vendor_dashboard.py``, run by ``make setup``): nothing is fetched when the page loads.
With a password (``--password``, ``--password-file``: the wire server's users), every request
needs HTTP Basic authentication as one of those users.
"""

from __future__ import annotations

import base64
import binascii
import math
import socket
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from millpond.catalog import TableDef

if TYPE_CHECKING:
    from millpond.api import Database
    from millpond.serve.auth import Access

__all__ = ["Dashboard", "serve_dashboard", "state", "STATIC"]

STATIC = Path(__file__).resolve().parent / "dashboard_static"
HOUR = 3600.0
MAX_EPOCHS = 600  # the plots' epochs at most (each read once from the root: one object each)


def state(db: Database, epochs: "_Epochs") -> dict[str, Any]:
    """What ``/api/state`` answers (module docstring)."""
    rt = db.runtime
    catalog, manifest = rt.catalog, rt.coordinator.manifest  # taken once: one version throughout
    sizes = {name: _rows(rt, name, n) for name, n in rt.table_sizes().items()}
    history = epochs.last_hour(rt)
    at = {e["epoch"]: e["at"] for e in history}
    now = time.time()
    nodes, edges = [], []
    sources = getattr(rt, "sources", None)
    splits = sources.status(catalog).to_pylist() if sources is not None else []
    for t in catalog.tables.values():
        nodes.append({"id": f"table:{t.name}", "kind": "table", "name": t.name, "rows": sizes.get(t.name),
                      "columns": [c.name for c in t.columns], "key": list(t.primary_key)})
        if t.source:
            options = dict(t.source)
            mine = [s for s in splits if s["table_name"] == t.name]
            lag = [s["lag"] for s in mine if s["lag"] is not None]
            nodes.append({"id": f"source:{t.name}", "kind": "source", "name": _source_name(options),
                          "connector": options.get("connector"), "splits": len(mine),
                          "lag": sum(lag) if lag else None, "rows": sum(s["rows"] or 0 for s in mine)})
            edges.append((f"source:{t.name}", f"table:{t.name}"))
    status = {v["name"]: v for v in rt.views_status().to_pylist()}
    for v in catalog.views.values():
        s = status.get(v.name, {})
        epoch = s.get("epoch")
        current = s.get("status") == "running" and not s.get("lag")
        nodes.append({"id": f"view:{v.name}", "kind": "view", "name": v.name, "rows": sizes.get(v.name),
                      "status": s.get("status"), "epoch": epoch, "lag": s.get("lag"),
                      "state_bytes": s.get("state_bytes"), "error": s.get("error"),
                      "behind_epochs": manifest.epoch - epoch if epoch is not None else None,
                      "freshness_seconds": 0.0 if current else _since(now, at.get(epoch)),
                      "altering": v.name in catalog.replacing})
        for d in v.depends_on:
            kind = "table" if d in catalog.tables else "view" if d in catalog.views else None
            if kind is not None:
                edges.append((f"{kind}:{d}", f"view:{v.name}"))
    for f in catalog.flows.values():
        nodes.append({"id": f"flow:{f.name}", "kind": "flow", "name": f.name,
                      "status": "failed" if f"o{f.id}" in manifest.failed else "running"})
        edges += [(f"table:{d}", f"flow:{f.name}") for d in f.depends_on if d in catalog.tables]
        edges.append((f"flow:{f.name}", f"table:{f.sink}"))
    for k in catalog.sinks.values():
        written, error = None, None
        try:
            written = rt.sinks.progress(k) if getattr(rt, "sinks", None) is not None else None
        except Exception as exc:  # noqa: BLE001 - a target out of reach: shown, in its words
            error = str(exc)
        nodes.append({"id": f"sink:{k.name}", "kind": "sink", "name": k.name, "connector": k.connector,
                      "type": k.kind, "epoch": written, "error": error,
                      "behind_epochs": manifest.epoch - written if written is not None else None})
        src = catalog.tables.get(k.source) or catalog.views.get(k.source)
        if src is not None:
            edges.append((f"{'table' if isinstance(src, TableDef) else 'view'}:{k.source}", f"sink:{k.name}"))
    return {"root": db.root, "epoch": manifest.epoch, "read_only": bool(getattr(rt, "read_only", False)),
            "now": now, "nodes": nodes, "edges": [{"source": a, "target": b} for a, b in edges],
            "epochs": history}


EXACT_ROWS = 50_000  # a relation's rows are counted when its state holds at most this many (else: stored rows)


def _rows(rt, name: str, stored: int) -> int:  # noqa: ANN001
    """``name``'s rows: counted when few are stored, else the stored rows (which count versions an
    update left uncompacted too; ``Reads.table_sizes``)."""
    if stored > EXACT_ROWS:
        return stored
    try:
        return rt.snapshot(name).num_rows
    except Exception:  # noqa: BLE001 - a failed view: its rows cannot be read; its stored ones say enough
        return stored


def _source_name(options: dict[str, str]) -> str:
    where = options.get("topic") or options.get("table.name") or options.get("location") or options.get("path")
    return f"{options.get('connector', 'source')}: {where}" if where else options.get("connector", "source")


def _since(now: float, at: float | None) -> float | None:
    return None if at is None else max(0.0, now - at)


class _Epochs:
    """The epochs of the last hour (at most :data:`MAX_EPOCHS`) as the root keeps them (``ChangeFeed``
    entries), each read once."""

    def __init__(self) -> None:
        self._seen: dict[int, dict] = {}
        self._lock = threading.Lock()

    def last_hour(self, rt) -> list[dict]:  # noqa: ANN001
        feed, last = rt.coordinator.changes, rt.coordinator.manifest.epoch
        oldest = feed.oldest()
        if oldest is None:
            return []
        with self._lock:
            self._seen = {e: v for e, v in self._seen.items() if e >= oldest}
            cutoff = time.time() - HOUR
            for e in range(last, max(oldest, last - MAX_EPOCHS + 1) - 1, -1):
                if e in self._seen:
                    if self._seen[e]["at"] < cutoff:
                        break
                    continue
                entry = feed.entry(e)
                if entry is None:
                    continue
                self._seen[e] = {"epoch": e, "at": entry.at, "seconds": entry.seconds,
                                 "rows_in": sum(b - a for a, b in entry.tables.values()),
                                 "rows_out": sum(entry.views.values())}
                if entry.at < cutoff:
                    break
            return [self._seen[e] for e in sorted(self._seen) if self._seen[e]["at"] >= cutoff]


def _clean(value: Any) -> Any:
    """JSON without NaN (a browser's JSON.parse refuses it), times as ISO 8601 text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def app(db: Database, access: Access | None = None) -> Starlette:
    """The dashboard's web application over ``db`` (``access``: the users a request must be one of)."""
    epochs = _Epochs()

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    def api_state(request: Request) -> Response:
        return JSONResponse(_clean(db.observe(lambda rt: state(db, epochs))))

    def api_jobs(request: Request) -> Response:
        return JSONResponse(_clean(db.sql("SHOW JOBS").to_pylist()))

    def api_view(request: Request) -> Response:
        name = request.path_params["name"]
        view = db.catalog.views.get(name)
        if view is None:
            return JSONResponse({"error": f'materialized view "{name}" does not exist'}, status_code=404)
        try:
            plan = "\n".join(db.sql(f'EXPLAIN MATERIALIZED VIEW "{name}"').column("plan").to_pylist())
        except Exception as exc:  # noqa: BLE001 - shown on the page, in its words
            plan = f"EXPLAIN failed: {exc}"
        return JSONResponse({"name": name, "sql": view.sql, "explain": plan, "columns": view.schema.names})

    routes = [Route("/", index), Route("/api/state", api_state), Route("/api/jobs", api_jobs),
              Route("/api/views/{name:path}", api_view), Mount("/static", StaticFiles(directory=STATIC))]
    middleware = [Middleware(_Basic, access=access)] if access is not None and access.users else []
    return Starlette(routes=routes, middleware=middleware)


class _Basic:
    """HTTP Basic authentication against the wire server's users (``Access``)."""

    def __init__(self, app, access: Access):  # noqa: ANN001
        self.app, self.access = app, access

    async def __call__(self, scope, receive, send):  # noqa: ANN001
        if scope["type"] == "http" and not self._allowed(dict(scope["headers"]).get(b"authorization", b"")):
            response = Response("authentication required", status_code=401,
                                headers={"WWW-Authenticate": 'Basic realm="millpond"'})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _allowed(self, header: bytes) -> bool:
        kind, _, encoded = header.decode("latin-1").partition(" ")
        if kind.lower() != "basic":
            return False
        try:
            name, _, password = base64.b64decode(encoded).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user = self.access.user(name)
        return user is not None and user.check(password)


class Dashboard:
    """The dashboard's HTTP server (``.url``, ``.port``, ``.close()``), in a background thread."""

    def __init__(self, db: Database, host: str, port: int, access: Access | None = None):
        import uvicorn

        if not (STATIC / "vendor").is_dir():
            raise FileNotFoundError(f"the dashboard's JavaScript is not unpacked under {STATIC / 'vendor'}: run "
                                    "`make setup` (tools/vendor_dashboard.py) once")
        self._socket = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = host, self._socket.getsockname()[1]
        config = uvicorn.Config(app(db, access), log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="millpond-dashboard", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()

    def __enter__(self) -> "Dashboard":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_dashboard(db: Database, host: str = "127.0.0.1", port: int = 8080, access: Access | None = None) -> Dashboard:
    return Dashboard(db, host, port, access)

