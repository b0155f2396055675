"""Table, view, flow, index, sink and SQL function definitions, persisted on the root."""

from millpond.catalog.retention import DEFAULT_RETENTION, Retention
from millpond.catalog.tables import Column, TableDef
from millpond.catalog.catalog import (Catalog, CatalogStore, FlowDef, FunctionDef, IndexDef, SinkDef,
                                      ViewDef, dependency, index_dependency, replacement)

__all__ = ["Catalog", "CatalogStore", "Column", "FlowDef", "FunctionDef", "IndexDef", "SinkDef", "TableDef", "ViewDef",
           "dependency", "index_dependency", "replacement", "Retention", "DEFAULT_RETENTION"]
