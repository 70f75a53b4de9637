"""The ceiling check: does a curve pin its ceiling, or does a stretched exponential fit as well lower?"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from workbench.scaling import CeilingCheck, Curve, SigmoidFit, ceiling_check, fit_sigmoid
from tests.scaling.synthetic import EXAMPLE_CURVES, PAPER_8B, synth

DEMO = EXAMPLE_CURVES / "demo"
DEMO_CEILING = 0.512  # configs/demo.yaml: the share of validation sums with at most 3 digits


def _demo(name: str, until_step: float = 1400) -> tuple[np.ndarray, np.ndarray]:
    with (DEMO / f"{name}.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if float(r["step"]) <= until_step]
    return np.array([float(r["compute"]) for r in rows]), np.array([float(r["val_pass_rate"]) for r in rows])


def test_the_demo_does_not_pin_its_ceiling_and_the_check_says_so():
    fit = fit_sigmoid(*_demo("seed0"))
    assert not fit.A_ci[0] <= DEMO_CEILING <= fit.A_ci[1], "the sigmoid's interval alone misses the true ceiling"
    check = ceiling_check(fit)
    assert isinstance(check, CeilingCheck) and check.fits_as_well and check.family_dependent
    assert check.P < fit.A and check.P_ci[0] < fit.A_ci[0] - 0.02
    lo, hi = check.ceiling_range
    assert lo == check.P_ci[0] and hi == fit.A_ci[1] and lo <= DEMO_CEILING <= hi
    assert "does not pin its ceiling" in check.line() and f"[{lo:.3f}, {hi:.3f}]" in check.line()


def test_the_range_holds_where_a_longer_run_went():
    """The 2,800-step demo run, cut at its default 1,400 steps: the curve went on to level off
    below the sigmoid's whole interval; the stretched exponential's plateau interval holds it."""
    full_c, full_y = _demo("long2800_seed0", until_step=2800)
    reached = float(full_y[-10:].mean())
    fit = fit_sigmoid(*_demo("long2800_seed0"))
    check = ceiling_check(fit)
    assert reached < fit.A_ci[0]
    assert check.family_dependent and check.P_ci[0] <= reached <= check.P_ci[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_sigmoid_run_well_past_its_midpoint_pins_its_ceiling(seed):
    fit = fit_sigmoid(*synth(n=40, hi=200000.0, seed=seed))
    check = ceiling_check(fit)
    assert check is not None and not check.family_dependent and check.ceiling_range == tuple(fit.A_ci), check.line()


def test_a_sigmoid_run_stopped_before_twice_c_mid_is_said_not_to_pin_its_ceiling():
    """Under 2x C_mid the approach is not seen yet: a lower plateau fits as well, and the check
    says so on most seeds, with a range that still holds the true A."""
    checks = [ceiling_check(fit_sigmoid(*synth(n=40, hi=20000.0, seed=s))) for s in range(8)]
    assert sum(c.family_dependent for c in checks) >= 6
    assert all(c.ceiling_range[0] <= PAPER_8B["A"] <= c.ceiling_range[1] for c in checks)


def test_the_plateau_is_searched_from_r0_not_from_near_the_data():
    """A noisy real run whose best points stand far above its level (Unsloth's Mistral GRPO reward):
    the plateau and its interval lie more than 0.25 below the highest score and are found there."""
    curve = Curve.from_csv(EXAMPLE_CURVES / "more" / "unslothai__mistral-7b-v0.3-grpo__reward.csv")
    fit = fit_sigmoid(curve.compute, curve.score, r0="first" if curve.compute.min() > 0 else None)
    check = ceiling_check(fit)
    assert check.P_ci[0] < float(curve.score.max()) - 0.25
    assert fit.A_ci[0] - 0.02 <= check.P_ci[0] <= check.P <= check.P_ci[1] <= fit.A_ci[1] + 0.02
    assert not check.family_dependent and "does not depend on the curve family" in check.line()
    assert all(round(v, 6) == v for v in check.P_ci), "grid values, without float noise"


def test_no_check_without_a_rising_converged_fit_with_an_interval():
    rng = np.random.default_rng(0)
    c = np.r_[0.0, np.geomspace(1, 100, 30)]
    flat = fit_sigmoid(c, 0.3 + rng.normal(0, 0.01, 31))
    assert flat.no_gain and ceiling_check(flat) is None
    c, y = synth(n=40, hi=200000.0)
    assert ceiling_check(fit_sigmoid(c, y, n_boot=0)) is None, "no bootstrap: no interval to check against"
    assert ceiling_check(fit_sigmoid(c, y, fixed_A=0.64)) is None


def test_the_check_travels_in_fit_json_and_prints_in_the_summary():
    fit = fit_sigmoid(*_demo("seed0"))
    fit.ceiling_check = ceiling_check(fit).to_dict()
    back = SigmoidFit.from_json(json.dumps(json.loads(fit.to_json())))
    assert back.ceiling_check == fit.ceiling_check and back.ceiling_check["family_dependent"] is True
    assert fit.ceiling_check["line"] in back.summary()


def test_a_check_that_fails_numerically_leaves_the_fit_whole(monkeypatch):
    import workbench.scaling.forecast.families as families

    from workbench.scaling.decide.ceiling import attach_ceiling_check

    assert attach_ceiling_check(fit_sigmoid(*_demo("seed0"))).family_dependent

    def broken(*a, **k):
        raise ValueError("x0 is infeasible")

    monkeypatch.setattr(families, "profile", broken)
    fit = fit_sigmoid(*_demo("seed0"))
    assert attach_ceiling_check(fit) is None and fit.ceiling_check is None
    assert fit.warnings[-1] == "second curve family skipped: ValueError: x0 is infeasible" and fit.A_ci[0] > 0
    lo, hi = fit.band(10 * fit.compute.max())  # the forecast stands on the sigmoid alone
    assert 0 < lo[0] < hi[0] <= 1
