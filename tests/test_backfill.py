"""A view created over tables that already hold data gives the same result as one created first."""

from tests import workload


def test_view_created_late_is_backfilled_from_the_log(open_db):
    db = open_db()
    db.sql(workload.TABLES)
    db.sql(f"CREATE MATERIALIZED VIEW early AS {workload.VIEWS['stats']}")
    ref = workload.Reference()
    plan = workload.steps(21, 16)
    for step in plan[:10]:
        workload.apply(db, step)
        ref.apply(step)
    db.flush()
    db.sql(f"CREATE MATERIALIZED VIEW late AS {workload.VIEWS['stats']}")
    db.flush()
    assert workload.norm(db.sql("SELECT * FROM late")) == workload.norm(db.sql("SELECT * FROM early"))
    for step in plan[10:]:
        workload.apply(db, step)
        ref.apply(step)
    db.flush()
    want = ref.query(workload.VIEWS["stats"])
    assert want, "the workload should leave rows in the view"
    assert workload.norm(db.sql("SELECT * FROM late")) == want
    assert workload.norm(db.sql("SELECT * FROM early")) == want


def test_delete_without_where_and_drop_view_keeps_others(open_db):
    db = open_db()
    db.sql(workload.TABLES)
    db.sql("CREATE MATERIALIZED VIEW per_user AS " + workload.VIEWS["per_user"])
    db.sql("CREATE MATERIALIZED VIEW thirds AS " + workload.VIEWS["thirds"])
    first = workload.steps(1, 1)[0]
    assert first.kind == "insert"
    db.insert("visit", first.payload)
    db.flush()
    assert db.sql("SELECT * FROM per_user").num_rows > 0
    db.sql("DROP MATERIALIZED VIEW thirds")
    db.sql("DELETE FROM visit")
    db.flush()
    assert db.sql("SELECT * FROM visit").num_rows == 0
    assert db.sql("SELECT * FROM per_user").num_rows == 0
    assert sorted(db.catalog.views) == ["per_user"]
