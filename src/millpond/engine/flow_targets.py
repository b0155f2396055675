"""A flow's changes written into its sink table's log (the coordinator's module docstring, "Flows").

After an epoch's commit, each flow that changed appends its changelog to its sink's channel as the
sink's records, by the idempotent producer ``(flow:<key>, e)`` (step 7). Before every epoch
(step 0) what a committed epoch owes a sink and it has not received — a crash or a failed append
between the commit and the append — is settled: the sink's log receives the difference between the
flow's committed rows and what its log adds up to, written once, as above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import polars as pl
import pyarrow as pa

from millpond import faults
from millpond.columns import COUNT, ROW_ID, W
from millpond.engine.changelog import consolidate
from millpond.engine.consumers import Consumer, Flow
from millpond.engine.epoch import EpochPlan, EpochReport, EpochStep
from millpond.engine.flows import SINK_OWED

if TYPE_CHECKING:
    from millpond.catalog import Catalog, TableDef
    from millpond.log import Channel
    from millpond.store.manifest import Manifest
    from millpond.store.state_table import StateTable

__all__ = ["FlowTargets"]


class FlowTargets(EpochStep):
    """Flows' sink tables kept in step with their flows. Ports: ``channel`` (a table's log) and
    ``rows`` (a consumer's committed rows in a version)."""

    def __init__(self, channel: Callable[[TableDef], Channel],
                 rows: Callable[[Consumer, Manifest], StateTable]):
        self.channel, self.rows = channel, rows

    def before(self, catalog: Catalog, consumers: list[Consumer], manifest: Manifest) -> None:
        self.settle(catalog, consumers, manifest)

    def after(self, plan: EpochPlan, report: EpochReport) -> EpochReport:
        for c in plan.consumers:
            if isinstance(c, Flow) and report.changes.rows(c.name):
                faults.point("flow.before_sink")
                self.append(plan.catalog.tables[c.sink], c, report.changes[c.name], report.epoch)
        return report

    def settle(self, catalog: Catalog, consumers: list[Consumer], manifest: Manifest) -> None:
        """Give every flow's sink log the changes a committed epoch owes it and it has not received:
        the difference between the flow's committed rows and what the sink's log adds up to."""
        for c in consumers:
            owed = manifest.offsets.get(c.key, {}).get(SINK_OWED) if isinstance(c, Flow) else None
            if owed is None or self.channel(sink := catalog.tables[c.sink]).producer_seq(_producer(c)) >= owed:
                continue
            rows = self.rows(c, manifest).scan()
            log = self.channel(sink).read(0, None)  # everything the sink's log has received
            have = pl.from_arrow(log.select([*c.columns, W])).with_columns(-pl.col(W))
            want = (rows.select([*c.columns, pl.col(COUNT).alias(W)]) if rows is not None and rows.height
                    else have.clear())
            self.append(sink, c, consolidate(pl.concat([want.cast(have.schema), have])).to_arrow(), owed)

    def append(self, table: TableDef, flow: Consumer, change: pa.Table, epoch: int) -> None:
        """A flow's changelog appended to its sink ``table`` as its changes, at most once per epoch."""
        rows = change.select([c.name for c in table.columns])
        records = rows.append_column(ROW_ID, pa.nulls(rows.num_rows, pa.int64())).append_column(W, change[W])
        self.channel(table).append(records.cast(table.log_schema), producer=(_producer(flow), epoch))


def _producer(flow: Consumer) -> str:
    return f"flow:{flow.key}"
