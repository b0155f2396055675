"""Outer joins, top-N, whole-input and DISTINCT aggregates: scripted changelogs in, retraction
pairs out (each epoch commits its state writes to a real local store)."""

import polars as pl

from millpond.columns import KH, W
from millpond.engine.operators.aggregate import value_col
from millpond.engine.operators import HashAggregate, HashJoin, Materialize, TopN
from millpond.engine.operators.join import SIDE
from millpond.engine.plan import AggCall
from tests.engine.harness import Harness, as_rows, changelog


def _join_epoch(h, spec, left_text="", right_text=""):
    parts = []
    if left_text:
        parts.append(changelog(["_k0", "l"], left_text, key=["_k0"]).with_columns(pl.lit(0, pl.Int8).alias(SIDE)))
    if right_text:
        parts.append(changelog(["_k0", "r"], right_text, key=["_k0"]).with_columns(pl.lit(1, pl.Int8).alias(SIDE)))
    d = pl.concat(parts, how="diagonal_relaxed")
    for c in ("l", "r"):
        if c not in d.columns:
            d = d.with_columns(pl.lit(None, pl.String).alias(c))
    out, writes = spec.apply(d, h.states())
    h.commit(writes)
    return as_rows(out.select("l", "r", W))


def test_left_join_pads_until_a_match_arrives_and_again_after_it_leaves(tmp_path):
    spec = HashJoin(("_k0",), ("l",), ("r",), name="t", kind="left")
    h = Harness(str(tmp_path), spec.parts())
    assert _join_epoch(h, spec, "+ k visit1\n+ k visit2\n+ NULL visit3") == [
        ("visit1", None, 1), ("visit2", None, 1), ("visit3", None, 1)]
    # the first match replaces both padded rows
    assert _join_epoch(h, spec, right_text="+ k fruit") == [
        ("visit1", None, -1), ("visit1", "fruit", 1), ("visit2", None, -1), ("visit2", "fruit", 1)]
    # a second match adds rows, pads stay gone
    assert _join_epoch(h, spec, right_text="+ k green") == [("visit1", "green", 1), ("visit2", "green", 1)]
    # a left row arriving now joins both; nothing is padded
    assert _join_epoch(h, spec, "+ k visit4") == [("visit4", "fruit", 1), ("visit4", "green", 1)]
    # all matches leave in one epoch while a left row leaves too: pads come back for the rest
    assert _join_epoch(h, spec, "- k visit4", "- k fruit\n- k green") == [
        ("visit1", None, 1), ("visit1", "fruit", -1), ("visit1", "green", -1),
        ("visit2", None, 1), ("visit2", "fruit", -1), ("visit2", "green", -1),
        ("visit4", "fruit", -1), ("visit4", "green", -1)]


def test_full_join_with_residual_condition_pads_both_sides(tmp_path):
    # ON l.k = r.k AND l <> 'x': the residual decides matches, so a non-matching pair pads both
    spec = HashJoin(("_k0",), ("l",), ("r",), name="t", kind="full", residual="l <> 'x'")
    h = Harness(str(tmp_path), spec.parts())
    assert _join_epoch(h, spec, "+ k x", "+ k r1") == [(None, "r1", 1), ("x", None, 1)]
    assert _join_epoch(h, spec, "+ k y") == [(None, "r1", -1), ("y", "r1", 1)]
    assert _join_epoch(h, spec, "- k y") == [(None, "r1", 1), ("y", "r1", -1)]


def _topn_epoch(h, spec, text):
    d = changelog(["p", "v"], text, key=["p"])
    out, writes = spec.apply(d, h.states())
    h.commit(writes)
    return as_rows(out)


def test_top_two_refills_from_full_state_when_a_top_row_leaves(tmp_path):
    spec = TopN(("p", "v"), ("p",), (("v", True, False),), limit=2, offset=0, row_number="rn", name="t")
    h = Harness(str(tmp_path), spec.parts())
    assert _topn_epoch(h, spec, "+ a 1\n+ a 5\n+ a 3\n+ b 2") == [
        ("a", 3, 2, 1), ("a", 5, 1, 1), ("b", 2, 1, 1)]
    # a row ranked below the top changes nothing
    assert _topn_epoch(h, spec, "+ a 0") == []
    # a new first row renumbers the row it pushes down and evicts the old second
    assert _topn_epoch(h, spec, "+ a 9") == [("a", 3, 2, -1), ("a", 5, 1, -1), ("a", 5, 2, 1), ("a", 9, 1, 1)]
    # the first row leaves: 1 is read back from the full state (refill)
    assert _topn_epoch(h, spec, "- a 9\n- a 5") == [
        ("a", 1, 2, 1), ("a", 3, 1, 1), ("a", 5, 2, -1), ("a", 9, 1, -1)]


def test_limit_offset_emits_the_slice_after_the_offset(tmp_path):
    spec = TopN(("p", "v"), (), (("v", False, False),), limit=2, offset=1, row_number=None, name="t")
    h = Harness(str(tmp_path), spec.parts())
    d = lambda text: changelog(["p", "v"], text).with_columns(pl.lit(0, pl.Int64).alias(KH))  # noqa: E731
    out, writes = spec.apply(d("+ x 4\n+ x 1\n+ x 3\n+ x 2\n+ x 2"), h.states())
    h.commit(writes)
    assert as_rows(out) == [("x", 2, 2)]  # positions 2 and 3 are both a 2
    out, writes = spec.apply(d("- x 1"), h.states())
    assert as_rows(out) == [("x", 2, -1), ("x", 3, 1)]


def test_whole_input_aggregate_keeps_one_row_even_when_empty(tmp_path):
    spec = HashAggregate((), (AggCall("count_star", None, "n"), AggCall("max", "x", "hi"),
                        AggCall("count_distinct", "y", "dy")), name="t", whole=True)
    h = Harness(str(tmp_path), spec.parts())

    def epoch(text):
        d = changelog([value_col(1), value_col(2)], text).with_columns(pl.lit(0, pl.Int64).alias(KH))
        out, writes = spec.apply(d, h.states())
        h.commit(writes)
        return as_rows(out)

    heartbeat = "+ NULL NULL"  # stands in for Spark's zero-weight row; its weight is set below
    d0 = changelog([value_col(1), value_col(2)], heartbeat).with_columns(pl.lit(0, pl.Int64).alias(KH),
                                                                         pl.lit(0, pl.Int64).alias(W))
    out, writes = spec.apply(d0, h.states())
    h.commit(writes)
    assert as_rows(out) == [(0, None, 0, 1)]  # COUNT 0, MAX NULL, COUNT(DISTINCT) 0
    assert epoch("+ 4 a\n+ 7 a\n+ 2 b") == [(0, None, 0, -1), (3, 7, 2, 1)]
    assert epoch("- 7 a") == [(2, 4, 2, 1), (3, 7, 2, -1)]
    assert epoch("- 4 a\n- 2 b") == [(0, None, 0, 1), (2, 4, 2, -1)]
