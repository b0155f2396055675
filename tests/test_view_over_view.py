"""A view over a view reads the inner view's changes (and, in its first epoch, its rows), not a
copy of its plan: the inner view's state is kept once.

Every view must equal DuckDB's recomputation (DuckDB views with the same SQL) after every epoch,
under random inserts, updates and deletes, three levels of views, views created late over
populated views, and a restart; an outer view keeps no state of the inner view's operators.
"""

from __future__ import annotations

import random

import duckdb
import pytest

from tests.conftest import canonical
from tests.test_indexes import TABLES, _statements, _upsert

VIEWS = {  # in creation order: later ones read earlier ones
    "per_product": "SELECT v.product, i.category, count(*) AS n, sum(v.length) AS total FROM visit v "
                   "JOIN info i ON v.product = i.product GROUP BY v.product, i.category",
    "per_category": "SELECT category, sum(n) AS n, max(total) AS top FROM per_product GROUP BY category",
    "busy": "SELECT p.product, p.n, i.price FROM per_product p JOIN info i ON p.product = i.product WHERE p.n > 1",
    "levels": "SELECT n, count(*) AS categories FROM per_category GROUP BY n",
    "top_busy": "SELECT product, n FROM (SELECT product, n, row_number() OVER (ORDER BY n DESC, product) AS r "
                "FROM busy) s WHERE r <= 3",
}


def _check(db, ref, names, epoch: int) -> None:  # noqa: ANN001
    for name in names:
        assert canonical(db.sql(f"SELECT * FROM {name}")) == canonical(ref.sql(f"SELECT * FROM {name}").to_arrow_table()), \
            f"view {name} differs from DuckDB after epoch {epoch}"


def test_views_over_views_equal_duckdb_and_keep_the_inner_state_once(open_db):
    db, ref, rng, next_id = open_db(), duckdb.connect(), random.Random(8), [0]
    for t in TABLES:
        db.sql(t)
        ref.sql(t)
    first, late = list(VIEWS)[:3], list(VIEWS)[3:]
    for name in first:
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS[name]}")
    for name in VIEWS:
        ref.sql(f"CREATE VIEW {name} AS {VIEWS[name]}")
    plan = "\n".join(db.sql("EXPLAIN MATERIALIZED VIEW busy").column("plan").to_pylist())
    assert "Source per_product" in plan and "Source visit" not in plan, plan
    for epoch in range(9):
        for s in _statements(rng, next_id):
            db.sql(s)
            ref.sql(_upsert(s))
        db.flush()
        _check(db, ref, [n for n in VIEWS if n in db.catalog.views], epoch)
        if epoch == 3:  # created over populated views: their first epoch reads the inner views' rows
            for name in late:
                db.sql(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS[name]}")
        if epoch == 6:
            db.close()
            db = open_db()
    # the outer views keep only their own operators' state: no copy of per_product's join
    states = db.runtime.coordinator.manifest.states
    for name in ("per_category", "busy", "levels"):
        vid = db.catalog.views[name].id
        own = sorted(sid.split(".", 1)[1] for sid in states if sid.startswith(f"o{vid}."))
        sides = sum(s.endswith((".left", ".right")) for s in own)  # inlined, per_product's join would add two
        assert sides <= (2 if name == "busy" else 0), (name, own)


def test_a_view_over_a_failed_view_stays_as_of_its_last_good_epoch(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, a INT)")
    db.sql("CREATE MATERIALIZED VIEW ratio AS SELECT k, 100 / a AS r FROM t")
    db.sql("CREATE MATERIALIZED VIEW total AS SELECT sum(r) AS s, count(*) AS n FROM ratio")
    db.sql("CREATE MATERIALIZED VIEW other AS SELECT count(*) AS n FROM t")
    db.sql("INSERT INTO t VALUES (1, 10), (2, 20)")
    db.flush()
    assert db.sql("SELECT * FROM total").to_pylist() == [{"s": 15, "n": 2}]
    db.sql("INSERT INTO t VALUES (3, 0)")
    db.flush()
    assert db.sql("SELECT * FROM other").to_pylist() == [{"n": 3}]  # the others go on
    with pytest.raises(Exception, match="ratio"):
        db.sql("SELECT * FROM ratio")
    assert db.sql("SELECT * FROM total").to_pylist() == [{"s": 15, "n": 2}]  # the reader of ratio stays with it
    db.sql("INSERT INTO t VALUES (4, 50)")
    db.flush()
    assert db.sql("SELECT * FROM total").to_pylist() == [{"s": 15, "n": 2}]
