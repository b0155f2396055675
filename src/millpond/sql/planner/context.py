"""What one planning run shares: the catalog, the node-id counter, the views and tables it read."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Callable

from sqlglot import exp

from millpond.catalog import Catalog
from millpond.errors import SqlError
from millpond.sql.statements import position

if TYPE_CHECKING:
    from millpond.engine import plan as P

__all__ = ["Context", "err", "FIRST_NODE_ID", "DEFAULT_ROWS"]

DEFAULT_ROWS = 1000.0  # an empty table's, a subquery's or a view's rows, for ordering joins
FIRST_NODE_ID = 1  # node ids, and so state ids, of a new plan count from here


class Context:
    def __init__(self, catalog: Catalog, *, views: bool = False, fixed_outputs: bool = False,
                 sizes: dict[str, int] | None = None, shares: dict[str, float] | None = None,
                 sample: Callable[[str, dict[str, str], exp.Expression], float | None] | None = None):
        self.catalog = catalog
        # tables' rows at CREATE, which order joins (planner.order); None: FROM order (a plan derived as
        # before sizes were kept)
        self.sizes = sizes
        # the share of a table's rows its filters keep, by "<table> WHERE <condition>": sampled at CREATE
        # (``sample``, filling ``shares``, which are stored with the plan), read from them on open
        self.shares, self.sample = shares if shares is not None else {}, sample
        self.views = views  # a view read is a source of its changes (else its query is inlined)
        # the planned query's quotient columns as numeric(38,16) (a flow's sink); its own only, not
        # an inlined view's: the first binding takes it
        self.fixed_outputs = fixed_outputs
        self._ids = itertools.count(FIRST_NODE_ID)
        self.depends: set[str] = set()  # tables and views the query reads directly
        self.windows: dict[str, tuple[int, int]] = {}  # TUMBLE/HOP id -> (size_us, slide_us)

    def next_id(self) -> int:
        return next(self._ids)

    def size(self, table: str) -> float:
        """A table's or view's rows at CREATE, for ordering joins (an empty or unknown one: ``DEFAULT_ROWS``)."""
        rows = (self.sizes or {}).get(table, 0)
        return float(rows) if rows > 0 else DEFAULT_ROWS

    def share(self, source: "P.Source", condition: exp.Expression) -> float | None:
        """The share of ``source``'s table's rows ``condition`` keeps, sampled (None: unknown)."""
        key = f"{source.table} WHERE {condition.sql()}"
        if key not in self.shares and self.sample is not None:
            found = self.sample(source.table, dict(source.columns), condition)
            if found is not None:
                self.shares[key] = round(found, 6)
        return self.shares.get(key)


def err(message: str, node: exp.Expression | None = None, *, sqlstate: str | None = None) -> SqlError:
    """A SqlError at ``node``'s position in the statement (where it starts)."""
    line, col = position(node)
    return SqlError(message, line=line, col=col, sqlstate=sqlstate)
