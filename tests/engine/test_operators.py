"""Operators fed scripted changelogs, epoch by epoch, compared with expected retraction pairs."""

import polars as pl
import pytest

from millpond.columns import KH, W
from millpond.engine.changelog import consolidate, settle
from millpond.engine.operators.aggregate import nonnull_col, sum_col, value_col
from millpond.engine.operators import HashAggregate, HashJoin, Materialize, TopN
from millpond.engine.operators.join import SIDE
from millpond.engine.plan import AggCall
from millpond.errors import InvariantError
from tests.engine.harness import Harness, as_rows, changelog


def test_max_with_retraction_falls_back_to_the_next_value(tmp_path):
    spec = HashAggregate(("cat",), (AggCall("max", "len", "max_len"), AggCall("count_star", None, "n")), name="t")
    h = Harness(str(tmp_path), spec.parts())

    def epoch(text):
        d = changelog(["cat", value_col(0)], text, key=["cat"])
        out, writes = spec.apply(d, h.states())
        h.commit(writes)
        return as_rows(out)

    assert epoch("""
        + Fruit 10
        + Fruit 20
        + Fruit 40
        + Vegetable 50""") == [("Fruit", 40, 3, 1), ("Vegetable", 50, 1, 1)]
    assert epoch("- Fruit 40") == [("Fruit", 20, 2, 1), ("Fruit", 40, 3, -1)]
    assert epoch("""
        - Vegetable 50
        + Fruit 5""") == [("Fruit", 20, 2, -1), ("Fruit", 20, 3, 1), ("Vegetable", 50, 1, -1)]
    assert epoch("+ Fruit 5") == [("Fruit", 20, 3, -1), ("Fruit", 20, 4, 1)]
    # an insert and a delete of the same row in one epoch cancel: nothing is emitted
    assert epoch("""
        + Fruit 99
        - Fruit 99""") == []


def test_max_reads_its_value_multiset_only_when_a_retraction_removes_the_maximum(tmp_path):
    spec = HashAggregate(("cat",), (AggCall("max", "len", "max_len"),), name="t")
    h = Harness(str(tmp_path), spec.parts())
    reads = []

    class Counted:  # the real state table, with its multi-gets counted
        def __init__(self, table):
            self.table = table

        def lookup(self, kh):
            reads.append(len(kh))
            return self.table.lookup(kh)

    def epoch(text):
        d = changelog(["cat", value_col(0)], text, key=["cat"])
        states = h.states()
        out, writes = spec.apply(d, {**states, "values": Counted(states["values"])})
        h.commit(writes)
        return as_rows(out)

    assert epoch("""
        + A 10
        + A 20
        + B 5""") == [("A", 20, 1), ("B", 5, 1)]
    assert epoch("""
        - A 10
        + B 7""") == [("B", 5, -1), ("B", 7, 1)]  # A's maximum stays 20: nothing read, nothing emitted
    assert reads == []
    assert epoch("""
        + A 30
        - A 20
        + A 15""") == [("A", 20, -1), ("A", 30, 1)]  # 20 left, but 30 came in the same epoch
    assert reads == []
    assert epoch("- A 30") == [("A", 15, 1), ("A", 30, -1)]  # the maximum left: read A's values
    assert reads == [1]
    assert epoch("- A 15") == [("A", 15, -1)]  # A is empty now
    assert epoch("+ A 1") == [("A", 1, 1)]


def test_sum_and_count_follow_sql_null_rules(tmp_path):
    spec = HashAggregate(("g",), (AggCall("sum", "x", "s"), AggCall("count", "x", "c")), name="t")
    h = Harness(str(tmp_path), spec.parts())

    def epoch(rows):
        d = pl.DataFrame(rows, schema={"g": pl.String, W: pl.Int64, sum_col(0): pl.Int64,
                                       nonnull_col(0): pl.Int64, nonnull_col(1): pl.Int64}, orient="row")
        d = d.with_columns(pl.col("g").hash(seed=1).reinterpret(signed=True).alias(KH))
        out, writes = spec.apply(d, h.states())
        h.commit(writes)
        return as_rows(out)

    # one NULL x: the group exists with SUM NULL and COUNT(x) 0
    assert epoch([("a", 1, 0, 0, 0)]) == [("a", None, 0, 1)]
    assert epoch([("a", 1, 7, 1, 1)]) == [("a", None, 0, -1), ("a", 7, 1, 1)]
    # deleting every row removes the group
    assert epoch([("a", -2, -7, -1, -1)]) == [("a", 7, 1, -1)]


def test_inner_join_emits_and_retracts_matches_from_both_sides(tmp_path):
    spec = HashJoin(("_k0",), ("l_product", "l_cat"), ("r_product", "r_len"), name="t")
    h = Harness(str(tmp_path), spec.parts())
    cols = [SIDE, "_k0", "l_product", "l_cat", "r_product", "r_len"]

    def epoch(text):
        types = {SIDE: pl.Int8, "_k0": pl.String, "l_product": pl.String, "l_cat": pl.String,
                 "r_product": pl.String, "r_len": pl.Int64}
        d = changelog(cols, text, key=["_k0"], types=types)
        out, writes = spec.apply(d, h.states())
        h.commit(writes)
        return as_rows(out)

    assert epoch("""
        + 0 Apple Apple Fruit NULL NULL
        + 1 Apple NULL NULL Apple 10
        + 1 Apple NULL NULL Apple 20
        + 1 Carrot NULL NULL Carrot 50""") == [("Apple", "Fruit", "Apple", 10, 1), ("Apple", "Fruit", "Apple", 20, 1)]
    # the left row changes category: every match is retracted and re-emitted
    assert epoch("""
        - 0 Apple Apple Fruit NULL NULL
        + 0 Apple Apple Veg NULL NULL""") == [
        ("Apple", "Fruit", "Apple", 10, -1), ("Apple", "Fruit", "Apple", 20, -1),
        ("Apple", "Veg", "Apple", 10, 1), ("Apple", "Veg", "Apple", 20, 1)]
    # both sides change in one epoch: dL ⋈ R + (L + dL) ⋈ dR
    assert epoch("""
        + 0 Carrot Carrot Veg NULL NULL
        - 1 Apple NULL NULL Apple 10""") == [("Apple", "Veg", "Apple", 10, -1), ("Carrot", "Veg", "Carrot", 50, 1)]
    # NULL keys never match
    assert epoch("""
        + 0 NULL NULL Veg NULL NULL
        + 1 NULL NULL NULL NULL 5""") == []


def test_materialize_keeps_a_multiset_and_refuses_phantom_retractions(tmp_path):
    spec = Materialize(("a", "b"), name="v")
    h = Harness(str(tmp_path), spec.parts())

    def epoch(text):
        d = changelog(["a", "b"], text, key=["a", "b"])
        out, writes = spec.apply(d, h.states())
        h.commit(writes)
        return as_rows(consolidate(out))  # an epoch of inserts only may emit equal rows apart (settle)

    assert epoch("""
        + x 1
        + x 1
        + y 2""") == [("x", 1, 2), ("y", 2, 1)]
    assert epoch("- x 1") == [("x", 1, -1)]
    assert as_rows(h.states()["rows"].scan()) == [("x", 1, 1), ("y", 2, 1)]
    with pytest.raises(InvariantError, match="retraction of a row that is not there"):
        epoch("- z 3")


def test_settle_consolidates_only_a_changelog_that_retracts():
    inserts = changelog(["a"], """
        + x
        + x
        + y""")
    assert settle(inserts).equals(inserts)  # equal rows stay apart: copies count as weights do
    zero = inserts.with_columns(pl.Series(W, [1, 0, 1]))
    assert as_rows(settle(zero)) == [("x", 1), ("y", 1)]
    mixed = changelog(["a"], """
        + x
        - x
        + y
        + y
        - z""")
    assert as_rows(settle(mixed)) == [("y", 2), ("z", -1)]
