"""Everything that imports pyspark lives in this package."""
