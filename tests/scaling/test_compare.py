"""Ranking recipes with the paper's tie rule (workbench/scaling/decide/compare.py)."""

from __future__ import annotations

import math

import pytest

from workbench.errors import UserError
from workbench.scaling import compare, fit_sigmoid

from .synthetic import synth


def _fit(A, B, seed, noise=0.005):
    c, y = synth(n=60, lo=1500, hi=100000, noise=noise, seed=seed, params={"A": A, "B": B})
    return fit_sigmoid(c, y), (c, y)


@pytest.fixture(scope="module")
def three():
    fa, ca = _fit(0.645, 1.9, 1)  # efficient
    fb, cb = _fit(0.655, 1.3, 2)  # slightly higher A (a tie), clearly less efficient
    fc, cc = _fit(0.600, 2.2, 3)  # lower asymptote: loses whatever its B
    return {"a": fa, "b": fb, "c": fc}, {"a": ca, "b": cb, "c": cc}


def test_a_within_002_is_a_tie_decided_by_b_at_the_shared_a(three):
    fits, _ = three
    assert abs(fits["a"].A - fits["b"].A) <= 0.02 and fits["b"].A > fits["a"].A
    cmp = compare(fits)
    assert [r.name for r in cmp.rows] == ["a", "b", "c"]  # b has the higher A but ties, and a is faster
    ra, rb, rc = cmp.rows
    assert ra.group == rb.group == 1 and rc.group == 2
    assert ra.shared_A == pytest.approx((fits["a"].A + fits["b"].A) / 2) == rb.shared_A
    assert ra.B_shared > rb.B_shared and ra.B_shared_lo <= ra.B_shared <= ra.B_shared_hi
    assert "ties b on A" in ra.verdict and ra.verdict.endswith("real")
    assert rb.verdict.startswith("A above c") and rb.verdict.endswith("real")
    assert math.isnan(rc.B_shared) and rc.verdict == "last"
    assert cmp.winner == "a"


def test_a_gap_beyond_the_margin_ranks_by_a_regardless_of_b(three):
    fits, _ = three
    cmp = compare({"slow_high": fits["b"], "fast_low": fits["c"]})
    assert [r.name for r in cmp.rows] == ["slow_high", "fast_low"]
    assert cmp.rows[0].group != cmp.rows[1].group and cmp.winner == "slow_high"


def test_two_seeds_of_one_recipe_are_not_distinguishable():
    f1, _ = _fit(0.645, 1.7, 10, noise=0.01)
    f2, _ = _fit(0.645, 1.7, 11, noise=0.01)
    cmp = compare({"seed1": f1, "seed2": f2})
    assert cmp.rows[0].verdict.endswith("not distinguishable")
    assert cmp.winner is None


def test_raw_curves_give_the_same_shared_a_refit(three):
    fits, curves = three
    stored = compare(fits)
    raw = compare(fits, curves=curves)
    for r1, r2 in zip(stored.rows, raw.rows):
        assert r1.name == r2.name
        if not math.isnan(r1.B_shared):
            assert r1.B_shared == pytest.approx(r2.B_shared, rel=1e-9)


def test_wider_margin_merges_groups(three):
    fits, _ = three
    cmp = compare(fits, margin=0.1)
    assert {r.group for r in cmp.rows} == {1}
    assert all(math.isfinite(r.B_shared) for r in cmp.rows)


def test_table_text_and_frame(three):
    fits, _ = three
    cmp = compare(fits)
    text = str(cmp)
    assert "A interval" in text and "B@shared A" in text and "+-0.02 is a tie" in text
    df = cmp.to_frame()
    assert list(df["name"]) == ["a", "b", "c"] and {"A_lo", "A_hi", "B_shared", "verdict"} <= set(df.columns)


def test_compare_bad_input(three):
    with pytest.raises(UserError, match="at least one"):
        compare({})
    with pytest.raises(UserError, match="not a SigmoidFit"):
        compare({"x": 0.5})
    with pytest.raises(UserError, match="takes a dict name -> SigmoidFit"):
        compare([three[0]["a"], three[0]["a"]])
    only = compare({"a": three[0]["a"]})
    assert only.winner == "a" and only.rows[0].verdict == "only recipe"
