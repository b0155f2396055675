"""Table, view, flow and SQL function definitions, persisted on the root."""

from millpond.catalog.retention import DEFAULT_RETENTION, Retention
from millpond.catalog.catalog import Catalog, CatalogStore, Column, FlowDef, FunctionDef, TableDef, ViewDef, dependency

__all__ = ["Catalog", "CatalogStore", "Column", "FlowDef", "FunctionDef", "TableDef", "ViewDef", "dependency",
           "Retention", "DEFAULT_RETENTION"]
