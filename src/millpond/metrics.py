"""Prometheus metrics of a Database, where monitoring looks: ``millpond serve --metrics-port N`` (or
``db.serve_metrics(port)``) serves Prometheus' text format at ``/metrics``; ``db.metrics()`` returns
the same text.

Totals since the process started come from the runtime's :class:`~millpond.engine.tally.Tally`
(epochs committed and failed, epoch and statement durations, rows in and out per relation); the
rest is read from the runtime at each scrape (the last epoch, each view's lag, freshness, failure
and state, each source split's lag, compaction's work and debt, connections). A read-only
Database has no epochs of its own: its epoch series stay at zero. docs/operations.md lists every
series.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

if TYPE_CHECKING:
    from millpond.api import Database

__all__ = ["MetricsServer", "registry", "serve_metrics", "text"]

JOB_KINDS = ("backfill", "alter", "source", "sink", "compaction")  # millpond.engine.jobs


def registry(db: Database) -> CollectorRegistry:
    """A registry of ``db``'s series alone (not the process's default one)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(db))
    return reg


def text(db: Database) -> str:
    """``db``'s series in Prometheus' text format."""
    return generate_latest(registry(db)).decode()


class MetricsServer:
    """The HTTP server of ``/metrics`` (``.port``, ``.close()``), in a background thread."""

    def __init__(self, db: Database, host: str, port: int):
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry(db))
        self.host, self.port = host, self._httpd.server_address[1]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(db: Database, host: str = "127.0.0.1", port: int = 9464) -> MetricsServer:
    return MetricsServer(db, host, port)


class _Collector:
    def __init__(self, db: Database):
        self.db = db

    def collect(self) -> Iterator[Metric]:
        rt = self.db.runtime
        tally = getattr(rt, "tally", None)
        if tally is not None:
            yield CounterMetricFamily("millpond_epochs_committed", "Epochs this process committed",
                                      value=tally.committed)
            yield CounterMetricFamily("millpond_epochs_failed", "Epochs that failed (each retried by the next)",
                                      value=tally.failed)
            yield _histogram("millpond_epoch_duration_seconds", "Seconds from an epoch's start to its commit",
                             tally.epoch_seconds)
            yield _by("millpond_rows_in", "Records each table's, view's or flow's epochs read", tally.rows_in,
                      CounterMetricFamily)
            yield _by("millpond_rows_out", "Changes each table's, view's or flow's epochs wrote", tally.rows_out,
                      CounterMetricFamily)
            yield _histogram("millpond_statement_duration_seconds", "Seconds each SQL statement (or script) took",
                             tally.statement_seconds)
            yield CounterMetricFamily("millpond_statement_errors", "SQL statements that failed",
                                      value=tally.statement_errors)
        yield GaugeMetricFamily("millpond_epoch", "The last committed epoch", value=rt.epoch)
        yield from self._jobs(rt)
        yield from self._views(rt, tally)
        yield from self._sources(rt)
        yield from self._compaction(rt)
        server = getattr(self.db, "_pgwire", None)
        yield GaugeMetricFamily("millpond_connections", "Open PostgreSQL-protocol connections (millpond serve)",
                                value=server.access.active if server is not None else 0)

    def _views(self, rt, tally) -> Iterator[Metric]:  # noqa: ANN001
        status = rt.views_status().to_pylist()
        manifest = rt.coordinator.manifest
        now = time.time()
        lag = GaugeMetricFamily("millpond_view_lag_records", "Records of its tables a view has still to read",
                                labels=["view"])
        behind = GaugeMetricFamily("millpond_view_behind_epochs",
                                   "Epochs since a view's rows were last current (a failed view's grows)", labels=["view"])
        fresh = GaugeMetricFamily("millpond_view_freshness_seconds",
                                  "Seconds since a view's rows were current: 0 when it has nothing to read, else "
                                  "since the epoch its rows are as of", labels=["view"])
        failed = GaugeMetricFamily("millpond_view_failed", "1 while a view is failed (millpond_views says why)",
                                   labels=["view"])
        for v in status:
            name, epoch = v["name"], v["epoch"]
            lag.add_metric([name], v["lag"])
            failed.add_metric([name], 1 if v["status"] == "failed" else 0)
            behind.add_metric([name], manifest.epoch - epoch if epoch is not None else manifest.epoch)
            at = tally.committed_at(epoch) if tally is not None and epoch is not None else None
            fresh.add_metric([name], 0.0 if not v["lag"] and v["status"] == "running"
                             else max(0.0, now - at) if at is not None else float("nan"))
        yield from (lag, behind, fresh, failed)
        size = GaugeMetricFamily("millpond_state_bytes", "Bytes of a view's (index's, flow's) state files",
                                 labels=["relation"])
        files = GaugeMetricFamily("millpond_state_files", "State files of a view (index, flow)", labels=["relation"])
        l0 = GaugeMetricFamily("millpond_state_l0_files",
                               "State files not compacted yet (level 0): compaction's debt", labels=["relation"])
        for c in rt.consumers:
            prefix = c.key + "."
            refs = [ref for sid, levels in manifest.states.items() if sid.startswith(prefix) for ref in levels.files()]
            size.add_metric([c.name], sum(r.size for r in refs))
            files.add_metric([c.name], len(refs))
            l0.add_metric([c.name], sum(len(levels.l0) for sid, levels in manifest.states.items()
                                        if sid.startswith(prefix)))
        yield from (size, files, l0)

    def _jobs(self, rt) -> Iterator[Metric]:  # noqa: ANN001
        jobs = rt.jobs_status().to_pylist()
        running = GaugeMetricFamily("millpond_jobs", "Jobs under way (SHOW JOBS), by kind", labels=["kind"])
        for kind in JOB_KINDS:
            running.add_metric([kind], sum(j["kind"] == kind for j in jobs))
        progress = GaugeMetricFamily("millpond_job_progress", "A job's progress, 0 to 1 (where it is known)",
                                     labels=["kind", "relation"])
        for j in jobs:
            if j["progress"] is not None:
                progress.add_metric([j["kind"], j["relation"]], j["progress"])
        yield from (running, progress)

    def _sources(self, rt) -> Iterator[Metric]:  # noqa: ANN001
        lag = GaugeMetricFamily("millpond_source_lag", "How far a source split is behind its upstream's end "
                                "(messages, versions or bytes of WAL, by connector)", labels=["table", "split"])
        taken = CounterMetricFamily("millpond_source_rows", "Rows this process took from a source split",
                                    labels=["table", "split"])
        errors = GaugeMetricFamily("millpond_source_errors", "Errors a source table has now (millpond_source_errors)",
                                   labels=["table"])
        sources = getattr(rt, "sources", None)
        if sources is not None:
            for s in sources.status(rt.catalog).to_pylist():
                if s["lag"] is not None:
                    lag.add_metric([s["table_name"], s["split"]], s["lag"])
                taken.add_metric([s["table_name"], s["split"]], s["rows"] or 0)
            counts: dict[str, int] = {}
            for e in sources.errors.table(rt.catalog).to_pylist():
                counts[e["table_name"]] = counts.get(e["table_name"], 0) + 1
            for table, n in sorted(counts.items()):
                errors.add_metric([table], n)
        yield from (lag, taken, errors)

    def _compaction(self, rt) -> Iterator[Metric]:  # noqa: ANN001
        stats = rt.coordinator.state.stats
        for key, help_ in (("compactions", "State compactions applied"),
                           ("compaction_failures", "State compactions that failed (tried again)"),
                           ("compacted_bytes", "Bytes of state files compacted"),
                           ("stalls", "Epochs that waited for compaction to catch up")):
            yield CounterMetricFamily(f"millpond_{key}", help_, value=stats.get(key, 0))


def _histogram(name: str, help_: str, h) -> HistogramMetricFamily:  # noqa: ANN001
    buckets, total = h.cumulative()
    return HistogramMetricFamily(name, help_, buckets=buckets, sum_value=total)


def _by(name: str, help_: str, values, kind) -> Metric:  # noqa: ANN001
    family = kind(name, help_, labels=["relation"])
    for relation, v in sorted(values.items()):
        family.add_metric([relation], v)
    return family
