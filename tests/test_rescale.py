"""State is addressed by vnode: any parallelism reads any other's state, with identical results."""

from tests import workload


def test_reopen_with_other_parallelism_gives_identical_results(open_db, root, tmp_path):
    plan = workload.steps(5, 14)
    ref = workload.Reference()
    db = open_db(parallelism=2)
    workload.setup(db)
    for step in plan[:7]:
        workload.apply(db, step)
        ref.apply(step)
    db.flush()
    db.close()

    for n in (3, 1):  # reopen the same root with another number of stateful partitions
        db = open_db(parallelism=n)
        assert db.parallelism == n
        assert workload.mismatches(db, ref) == []
    for step in plan[7:]:
        workload.apply(db, step)
        ref.apply(step)
    db.flush()
    assert workload.mismatches(db, ref) == []

    # The same input on a fresh root at a fixed parallelism gives the same views.
    other = open_db(parallelism=4, path=str(tmp_path / "other"))
    workload.setup(other)
    for step in plan:
        workload.apply(other, step)
    other.flush()
    for view in workload.VIEWS:
        assert workload.norm(other.sql(f"SELECT * FROM {view}")) == workload.norm(db.sql(f"SELECT * FROM {view}"))


def test_set_parallelism_between_epochs(open_db):
    db = open_db(parallelism=2)
    workload.setup(db)
    ref = workload.Reference()
    for i, step in enumerate(workload.steps(9, 12)):
        if i % 3 == 0:
            db.sql(f"SET parallelism = {1 + i % 4}")
        workload.apply(db, step)
        ref.apply(step)
        db.flush()
    assert db.parallelism == 1 + 9 % 4
    assert workload.mismatches(db, ref) == []
