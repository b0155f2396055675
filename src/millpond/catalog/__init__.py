"""Table and view definitions, persisted on the root."""

from millpond.catalog.catalog import Catalog, CatalogStore, Column, TableDef, ViewDef

__all__ = ["Catalog", "CatalogStore", "Column", "TableDef", "ViewDef"]
