"""SigmoidFit (workbench/scaling/fit/result.py): predictions, bands, compute to reach, JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from workbench.errors import UserError
from workbench.scaling import SigmoidFit, fit_sigmoid

from .synthetic import PAPER_8B, sigmoid, synth


@pytest.fixture(scope="module")
def fit() -> SigmoidFit:
    # the sigmoid's own formulas (predict, band, reach) are tested here: method="sigmoid";
    # the default blended forecast is tested in test_forecast.py
    c, y = synth(n=60, noise=0.01, seed=11)
    return fit_sigmoid(c, y, method="sigmoid")


def test_predict_scalar_array_and_special_points(fit):
    assert isinstance(fit.predict(1000.0), float)
    arr = fit.predict([0.0, fit.C_mid, 1e12])
    assert arr.shape == (3,)
    assert arr[0] == fit.R0  # compute 0 is the measured start
    assert arr[1] == pytest.approx((fit.A + fit.R0) / 2)  # half of the gain at C_mid
    assert arr[2] == pytest.approx(fit.A, abs=1e-9)
    with pytest.raises(UserError):
        fit.predict(-1.0)
    with pytest.raises(UserError):
        fit.predict([1.0, float("nan")])
    with pytest.raises(UserError, match="a number or an array of numbers"):
        fit.predict("x")


def test_bands_bracket_the_fit_and_nest(fit):
    c = np.geomspace(1000, 500000, 30)
    pred = fit.predict(c)
    lo, hi = fit.band(c)
    plo, phi = fit.band(c, kind="prediction")
    nlo, nhi = fit.band(c, level=0.5)
    assert np.all(lo <= pred + 1e-12) and np.all(pred <= hi + 1e-12)
    assert np.all(plo <= lo) and np.all(phi >= hi)
    assert np.all(nlo >= lo - 1e-12) and np.all(nhi <= hi + 1e-12)
    # a prediction band is at least +-1.96 sigma wide
    assert np.all(phi - plo >= 2 * 1.959 * fit.sigma)
    with pytest.raises(UserError, match="kind"):
        fit.band(c, kind="confidence")
    with pytest.raises(UserError, match="level"):
        fit.band(c, level=95)


def test_prediction_band_covers_about_95_percent_of_new_points(fit):
    rng = np.random.default_rng(0)
    c = np.geomspace(1500, 50000, 2000)
    new = sigmoid(c, **PAPER_8B) + rng.normal(0, 0.01, len(c))
    lo, hi = fit.band(c, kind="prediction")
    inside = np.mean((new >= lo) & (new <= hi))
    assert 0.90 <= inside <= 0.99


def test_mean_band_covers_the_true_curve_where_there_is_data(fit):
    c = np.geomspace(3000, 40000, 20)
    lo, hi = fit.band(c)
    truth = sigmoid(c, **PAPER_8B)
    assert np.mean((truth >= lo) & (truth <= hi)) >= 0.8


def test_compute_to_reach_inverts_predict(fit):
    r = fit.compute_to_reach(0.6)
    assert r.reachable and r.p_reachable == 1.0
    assert fit.predict(r.compute) == pytest.approx(0.6, abs=1e-9)
    assert r.lo < r.compute < r.hi


def test_compute_to_reach_above_the_asymptote_is_infinite(fit):
    r = fit.compute_to_reach(0.9)
    assert not r.reachable and math.isinf(r.compute) and math.isinf(r.hi) and r.p_reachable == 0.0
    below = fit.compute_to_reach(0.3)
    assert below.compute == 0.0 and below.reachable  # R0 already meets it
    near = fit.compute_to_reach(fit.A - 0.001)  # reachable, but the ceiling might sit below it
    assert near.reachable and math.isinf(near.hi) and 0 < near.p_reachable < 1
    with pytest.raises(UserError):
        fit.compute_to_reach(1.2)
    with pytest.raises(UserError, match="target must be a number"):
        fit.compute_to_reach("0.5")


def test_json_round_trip_keeps_everything(fit):
    text = fit.to_json()
    back = SigmoidFit.from_json(text)
    json.loads(text)  # plain JSON: no NaN/Infinity tokens
    for k in ("A", "B", "C_mid", "R0", "A_ci", "B_ci", "C_mid_ci", "rmse", "r2", "n", "sigma", "converged", "block", "run_names"):
        assert getattr(back, k) == getattr(fit, k), k
    for k in ("compute", "score", "used", "run", "samples"):
        assert np.array_equal(getattr(back, k), getattr(fit, k)), k
    c = np.geomspace(100, 1e6, 7)
    assert np.array_equal(back.predict(c), fit.predict(c))
    assert all(np.array_equal(a, b) for a, b in zip(back.band(c), fit.band(c)))
    assert back.to_dict() == fit.to_dict()


def test_json_round_trip_without_bootstrap_keeps_nan_intervals():
    c, y = synth(n=20, noise=0.01)
    f = fit_sigmoid(c, y, n_boot=0)
    text = f.to_json()
    assert "NaN" not in text
    back = SigmoidFit.from_json(text)
    assert all(math.isnan(v) for v in back.A_ci) and back.samples.shape == (0, 3)
    with pytest.raises(UserError, match="no bootstrap"):
        back.band([1000.0])


def test_json_errors():
    with pytest.raises(UserError, match="not a SigmoidFit JSON"):
        SigmoidFit.from_json("{oops")
    with pytest.raises(UserError, match="unknown SigmoidFit keys"):
        SigmoidFit.from_dict({"A": 0.5, "bogus": 1})
    with pytest.raises(UserError, match="missing A_ci, B, "):
        SigmoidFit.from_json('{"A": 0.5}')
    with pytest.raises(UserError, match="JSON object"):
        SigmoidFit.from_json("[1, 2]")


def test_power_law_limit_coefficient(fit):
    c = 1e9  # far past C_mid, R ~ A - D / C^B
    assert fit.A - fit.predict(c) == pytest.approx(fit.tail_coefficient / c**fit.B, rel=1e-3)


def test_summary_names_the_numbers(fit):
    text = str(fit)
    assert "A     =" in text and "95% CI" in text and "R^2" in text
