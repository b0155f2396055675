"""Table, view and SQL function definitions, persisted on the root."""

from millpond.catalog.catalog import Catalog, CatalogStore, Column, FunctionDef, TableDef, ViewDef, dependency

__all__ = ["Catalog", "CatalogStore", "Column", "FunctionDef", "TableDef", "ViewDef", "dependency"]
