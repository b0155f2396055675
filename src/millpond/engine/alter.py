"""Views altered in place (``ALTER MATERIALIZED VIEW v AS ...``, ``CREATE OR REPLACE MATERIALIZED
VIEW``; planned by :mod:`millpond.sql.alter`).

A view's new definition is a consumer of its own (``Catalog.replacing``, under the name
:func:`~millpond.catalog.replacement` gives it) that backfills beside the definition in force,
whose readers, subscribers and sinks go on reading the old rows. Views over it get new definitions
too, planned over the new one's rows (their plans read it under its backfilling name). Once every
new definition's backfill is committed — both definitions are then current at the last committed
epoch ``e`` — :func:`swap` writes one catalog version that puts them all in force: a reader sees
the old views or the new ones, never a mix. The change from each view's old rows to its new ones
is kept with epoch ``e`` first (:meth:`~millpond.engine.changefeed.ChangeFeed.swap`), so a
subscriber or a sink that read the old definition's changes up to ``e`` receives it as ``e``'s
(when the columns are the same); each new definition records the old one's key and ``e``
(``ViewDef.replaced``) to read the old changes by. The swap is tried before every epoch, so one a
crash interrupted is done before the next epoch runs, at the same ``e``, and after each commit
(:class:`Swaps`, a step whose ``after`` runs before the sinks write the epoch, so they write it
with the change to the new rows). A new definition
whose backfill fails on a data error is dropped with the others of its ALTER; the old ones stay.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np
import pyarrow as pa

from millpond import faults
from millpond.catalog import Catalog, ViewDef, replacement
from millpond.columns import W
from millpond.engine.changefeed import net
from millpond.engine.epoch import EpochPlan, EpochReport, EpochStep
from millpond.engine.failures import describe_failure
from millpond.engine.reads import expand_rows

if TYPE_CHECKING:
    from millpond.engine.runtime import Runtime

__all__ = ["swap", "renamed_sources", "Swaps", "cancelled"]

log = logging.getLogger("millpond")


def renamed_sources(plan: dict, names: Mapping[str, str]) -> dict:
    """An encoded plan (:func:`millpond.engine.plan.encode`) whose sources named a key of ``names``
    read the relation it maps to."""
    def walk(value):  # noqa: ANN001, ANN202
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            if value.get("node") == "Source" and value.get("table") in names:
                return {**value, "table": names[value["table"]]}
            return {k: walk(v) for k, v in value.items()}
        return value
    return walk(plan)


def swap(rt: Runtime) -> list[str]:
    """Put every new view definition in force once all of them are backfilled (module docstring);
    drop them all if one failed. Returns the views swapped."""
    catalog, manifest = rt.catalog, rt.manifest
    pending = catalog.replacing
    if not pending:
        return []
    failed = {name: f for name, v in pending.items() if (f := manifest.failed.get(f"o{v.id}")) is not None}
    if failed:
        for name, f in failed.items():
            log.warning("ALTER MATERIALIZED VIEW %s failed, the definitions in force stay (%s): %s", name,
                        ", ".join(sorted(pending)), describe_failure(f, pending[name].sql))
        rt.commit_catalog(catalog.without_replacements(list(pending)))
        return []
    if any(f"o{v.id}" not in manifest.offsets or f"o{v.id}" in manifest.filling for v in pending.values()):
        return []  # a backfill to run (or to finish: engine/filling.py)
    back = {replacement(name): name for name in pending}
    for name in pending:
        old, fresh = rt._by_name[name], rt._by_name[replacement(name)]  # noqa: SLF001 - the runtime's consumers
        if old.schema == fresh.schema:  # the change from the old rows to the new
            rows = []
            for c, w in ((old, -1), (fresh, 1)):
                t = expand_rows(rt.coordinator.rows(c, manifest, columns=c.columns).scan_arrow(), c.columns, c.schema)
                rows.append(t.append_column(W, pa.array(np.full(t.num_rows, w, dtype=np.int64))))
            rt.coordinator.changes.swap(old.key, manifest.epoch, net(pa.concat_tables(rows)))
    faults.point("alter.before_swap")
    new: dict[str, ViewDef] = {name: replace(v, plan=renamed_sources(v.plan, back) if v.plan else v.plan)
                               for name, v in pending.items()}
    rt.commit_catalog(catalog.swapped(new, manifest.epoch))
    return sorted(pending)


class Swaps(EpochStep):
    """The swap after an epoch's commit (step 7), before the sinks write it (``swap``: the runtime's)."""

    def __init__(self, swap: Callable[[], list[str]]):
        self.swap = swap

    def after(self, plan: EpochPlan, report: EpochReport) -> EpochReport:
        self.swap()
        return report


def cancelled(catalog: Catalog, jobs: list[dict]) -> Catalog:
    """``catalog`` without what cancelled ``jobs`` (``CANCEL JOB``) were filling: an altered view's
    new definitions (the old ones stay), new views (those that read others first), indexes, flows."""
    if any(j["kind"] == "alter" for j in jobs):
        catalog = catalog.without_replacements(list(catalog.replacing))  # one ALTER's definitions go together
    names = {j["relation"] for j in jobs if j["kind"] == "backfill"}
    while names:
        free = sorted(n for n in names if not any(n in v.depends_on for v in catalog.views.values() if v.name in names))
        for name in free or sorted(names):
            if name in catalog.views:
                catalog = catalog.without(name)
            elif name in catalog.indexes:
                catalog = catalog.without_index(name)
            elif name in catalog.flows:
                catalog = catalog.without_flow(name)
        names -= set(free or names)
    return catalog
