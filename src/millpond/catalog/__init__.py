"""Table and view definitions, persisted on the root."""

from millpond.catalog.catalog import ROW_ID, WEIGHT, Catalog, CatalogStore, Column, TableDef, ViewDef

__all__ = ["Catalog", "CatalogStore", "Column", "TableDef", "ViewDef", "ROW_ID", "WEIGHT"]
