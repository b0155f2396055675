"""TPC-H for millpond: its tables, its 22 queries as views, its data and refresh functions.

>>> import millpond
>>> from millpond import tpch
>>> folder = tpch.generate(0.01, "./tpch-sf0.01")                            # doctest: +SKIP
>>> db = millpond.connect("./tpch-data")                                     # doctest: +SKIP
>>> db.sql(";".join(tpch.DDL))                                               # doctest: +SKIP
>>> for name in tpch.TABLES: db.insert(name, tpch.read(folder, name))        # doctest: +SKIP
>>> for name, sql in tpch.queries(0.01).items():                             # doctest: +SKIP
...     db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
>>> db.flush()                                                               # doctest: +SKIP

``benchmarks/tpch.py`` measures backfills and refreshes against Spark; ``tests/test_tpch.py``
checks every view against DuckDB through refreshes.
"""

from millpond.tpch.data import Refresh, generate, read
from millpond.tpch.queries import DDL, KEYS, TABLES, queries

__all__ = ["DDL", "KEYS", "TABLES", "queries", "generate", "read", "Refresh"]
