"""The stored plans of a catalog, checked when a root opens.

Every view (and flow) runs the plan stored with it at CREATE (its node ids are its state ids). On open, each
view's plan is derived again from its stored SQL with this version's planner and compared with
the stored one, node numbering aside (:func:`millpond.engine.plan.canonical`):

- equal: the stored plan runs — a planner that merely numbers nodes differently changes nothing
  (the derived plan reads the indexes the stored one reads: :mod:`millpond.sql.indexes`);
- different: the root is refused with a :class:`~millpond.errors.CatalogError` naming the view and
  the first difference, unless the caller asks to run the stored plans as they are
  (``connect(..., plans="stored")``); dropping and recreating the view adopts the new plan;
- missing (a catalog written before plans were stored): the derived plan is used, and stored
  with the next catalog version.

A view's joins are ordered by the sizes of its tables at CREATE (:mod:`millpond.sql.planner.order`),
stored with its plan and used again here; a plan stored without them (before 2026-12-01) is derived
in FROM order, as it was made.

A plan stored before 2026-11-30 — every column of every table through joins (before
:mod:`millpond.sql.planner.prune`), eager partials by any group — is compared with the plan derived as
then (``plan_view(..., legacy=True)``): its state was built by it, and it runs as stored.
"""

from __future__ import annotations

from dataclasses import replace

from millpond.catalog import Catalog, FlowDef
from millpond.engine import plan as P
from millpond.errors import CatalogError, MillpondError
from millpond.sql.flows import flow_plan, parse_flow
from millpond.sql.indexes import share
from millpond.sql.planner import plan_view
from millpond.sql.planner.eager import has_eager
from millpond.sql.statements import view_query

__all__ = ["bind_plans", "MODES"]

MODES = ("verify", "stored")


def bind_plans(catalog: Catalog, *, mode: str = "verify") -> Catalog:
    """``catalog`` with every view's plan present, checked against its SQL (``mode="verify"``) or
    taken as stored (``"stored"``)."""
    if mode not in MODES:
        raise MillpondError(f"plans={mode!r}: use 'verify' (check stored plans against their SQL) or 'stored'")
    views, flows = dict(catalog.views), dict(catalog.flows)
    for v in [*catalog.views.values(), *catalog.flows.values()]:
        if v.plan is not None and mode == "stored":
            continue
        found, kind = (flows, "flow") if isinstance(v, FlowDef) else (views, "view")
        try:  # a catalog without plans was written by a millpond that planned as before 2026-11-30
            derived = _derive(v, catalog, legacy=v.plan is None)
        except MillpondError as exc:
            if v.plan is None:
                raise CatalogError(f"{kind} {v.name!r} cannot be planned by this millpond ({exc}); open the root "
                                   "with the version that created it") from None
            raise CatalogError(f"{kind} {v.name!r}: this millpond cannot plan its SQL any more ({exc}); open with "
                               "connect(..., plans='stored') to keep running its stored plan") from None
        if v.plan is None:  # its state was built by a millpond that addressed rows by every column
            found[v.name] = replace(v, plan=P.encode(replace(derived, key=())))
            continue
        try:
            stored = P.decode(v.plan)
        except (ValueError, TypeError, KeyError) as exc:
            raise CatalogError(f"{kind} {v.name!r}: its stored plan cannot be read ({exc}); open the root with "
                               "the millpond version that created it") from None
        diff = _difference(stored, derived, catalog, kind)
        if diff is not None and _difference(stored, _derive(v, catalog, legacy=True), catalog, kind) is None:
            diff = None  # created as planned before 2026-11-30 (every column through joins): it runs as stored
        if diff is not None:
            raise CatalogError(
                f"{kind} {v.name!r}: its stored plan differs from the plan this millpond derives from its SQL "
                f"(at {diff}); its state was built by the stored plan. Open with connect(..., plans='stored') to "
                f"keep running the stored plan, or drop and recreate the {kind} to adopt the new one")
    return catalog.with_views(views, flows)


def _derive(v, catalog: Catalog, *, legacy: bool) -> P.Materialize:  # noqa: ANN001
    """The plan this millpond derives from the SQL of view or flow ``v``; a view pre-aggregates below
    its joins if its stored plan does (a choice made at CREATE). The tables it reads are as it was
    created over them: without the columns added since (a ``*`` of a view means what it meant)."""
    catalog = catalog.as_seen_by(v.id)
    if isinstance(v, FlowDef):
        return flow_plan(parse_flow(v.sql), catalog, legacy=legacy)[0]
    return plan_view(view_query(v.sql), catalog, views=_reads_views(v, catalog), eager=_eager(v), legacy=legacy,
                     sizes=(v.plan or {}).get("sizes"), shares=dict((v.plan or {}).get("shares") or {}))[0]


def _difference(stored: P.Node, derived: P.Materialize, catalog: Catalog, kind: str) -> str | None:
    """Where ``derived`` differs from the ``stored`` plan, node numbering aside (None: nowhere)."""
    if isinstance(stored, P.Materialize) and not stored.key:  # made before rows were addressed by key
        derived = replace(derived, key=())
    if kind == "view":  # the indexes it was created reading (a choice made at CREATE: sql/indexes.py)
        derived, _ = share(derived, catalog, only=P.indexes_read(stored))
    return P.first_difference(P.canonical(stored), P.canonical(derived))


def _eager(v) -> bool:  # noqa: ANN001
    try:
        return v.plan is not None and has_eager(P.decode(v.plan))
    except (ValueError, TypeError, KeyError):
        return False


def _reads_views(v, catalog: Catalog) -> bool:  # noqa: ANN001
    """Whether ``v``'s stored plan reads views as sources (a view created since views read views'
    changes); with no stored plan (a catalog of format 1), the inner views' queries are inlined."""
    if v.plan is None:
        return False
    try:
        return any(s.table in catalog.views for s in P.sources(P.decode(v.plan)))
    except (ValueError, TypeError, KeyError):
        return False
