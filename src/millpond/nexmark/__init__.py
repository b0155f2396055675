"""Nexmark for millpond: the auction event generator, the three tables and the queries.

>>> import millpond
>>> from millpond import nexmark
>>> db = millpond.connect("./nexmark-data")                                  # doctest: +SKIP
>>> db.sql(";".join(nexmark.DDL))                                            # doctest: +SKIP
>>> db.sql(f"CREATE MATERIALIZED VIEW q5 AS {nexmark.QUERIES['q5']}")        # doctest: +SKIP
>>> for name, rows in nexmark.generate(0, 1_000_000).items():                # doctest: +SKIP
...     db.insert(name, rows)
>>> db.flush()                                                               # doctest: +SKIP

``generate(first_event, count, *, seed=0)`` returns the person, auction and bid tables of event
ids ``[first_event, first_event + count)`` (see :mod:`millpond.nexmark.generator`); ``DDL`` and
``QUERIES`` are in :mod:`millpond.nexmark.queries`, with the queries left out and why.
``benchmarks/nexmark.py`` runs them against Spark Structured Streaming.
"""

from millpond.nexmark.generator import BASE_TIME, EVENTS_PER_SECOND, PROPORTIONS, SCHEMAS, generate
from millpond.nexmark.queries import DDL, QUERIES, duckdb_sql

__all__ = ["generate", "DDL", "QUERIES", "SCHEMAS", "duckdb_sql", "BASE_TIME", "EVENTS_PER_SECOND", "PROPORTIONS"]
