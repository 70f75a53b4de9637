"""Is scaling worth it? (workbench/scaling/decide/gain.py)."""

from __future__ import annotations

import pytest

from workbench.errors import UserError
from workbench.scaling import fit_sigmoid, scaling_gain

from .synthetic import PAPER_8B, sigmoid, synth


@pytest.fixture(scope="module")
def early():
    c, y = synth(n=40, lo=500, hi=8000, noise=0.005, seed=1)  # stopped before C_mid
    return fit_sigmoid(c, y)


@pytest.fixture(scope="module")
def late():
    c, y = synth(n=40, lo=1500, hi=100000, noise=0.005, seed=2)  # saturated
    return fit_sigmoid(c, y)


def test_scaling_before_the_midpoint_is_worth_it(early):
    g = scaling_gain(early, factor=10)
    assert g.current == pytest.approx(8000) and g.budget == pytest.approx(80000)
    true_gain = sigmoid(80000, **PAPER_8B) - sigmoid(8000, **PAPER_8B)
    assert g.gain_lo <= true_gain <= g.gain_hi
    assert g.worth is True and g.verdict.startswith("worth it")
    assert g.gain == pytest.approx(g.score_at_budget - g.score_now)
    assert g.lo <= g.score_at_budget <= g.hi
    # before the midpoint A is barely identified; the blend's trend carries the forecast past it
    assert g.share_of_headroom > 1 and "passes the sigmoid's A" in g.verdict


def test_scaling_a_saturated_run_is_not_worth_it(late):
    g = scaling_gain(late, factor=10, min_gain=0.01)
    assert g.gain < 0.01 and g.gain_hi < 0.01
    assert g.worth is False and g.verdict.startswith("not worth it")
    assert 0 <= g.share_of_headroom <= 1.01


def test_a_threshold_inside_the_interval_is_uncertain(early):
    g = scaling_gain(early, factor=10)
    mid = (g.gain_lo + g.gain_hi) / 2
    assert scaling_gain(early, factor=10, min_gain=mid).worth is None


def test_budget_and_current_explicit(early):
    g = scaling_gain(early, budget=20000, current=4000)
    assert g.budget == 20000 and g.current == 4000 and g.to_dict()["budget"] == 20000
    assert str(g) == g.verdict


@pytest.mark.parametrize(
    "kwargs, fragment",
    [({}, "exactly one"), ({"budget": 1e5, "factor": 2}, "exactly one"), ({"factor": 0.5}, "factor"), ({"budget": 10.0}, "budget"), ({"factor": 2, "current": -1}, "current"),
     ({"budget": "x"}, "budget must be a number"), ({"factor": "10"}, "factor must be a number")],
)
def test_bad_requests(early, kwargs, fragment):
    with pytest.raises(UserError, match=fragment):
        scaling_gain(early, **kwargs)
    with pytest.raises(UserError, match="needs a SigmoidFit"):
        scaling_gain({"A": 1}, factor=10)
