"""Honest take-off (issue 24 item 3): a flat prefix whose last points rise beyond the noise is a
no-gain fit that says a take-off may be starting, and its band opens beyond the data instead of
claiming 95% confidence that the run stays flat. Synthetic and real curves that take off late."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from workbench.scaling import SigmoidFit, fit_sigmoid, r0_rule
from workbench.scaling.data import Curve
from workbench.scaling.fit.no_gain import TAKEOFF_Z, rising_tail

MORE = Path(__file__).resolve().parents[2] / "examples" / "curves" / "more"


def flat_then_rise(seed: int):
    """Flat at 0.01 (noise 0.008), taking off sharply at C ~ 300 towards 0.6."""
    c = np.arange(0, 60) * 10.0
    true = 0.01 + 0.59 / (1 + (300 / np.maximum(c, 1e-9)) ** 10) * (c > 0)
    return c, np.clip(true + np.random.default_rng(seed).normal(0, 0.008, len(c)), 0, 1)


def _coverage(fit: SigmoidFit, c: np.ndarray, y: np.ndarray) -> float:
    lo, hi = fit.band(c, kind="prediction")
    return float(np.mean((y >= lo) & (y <= hi)))


@pytest.mark.parametrize("seed, until", [(0, 200), (2, 210), (3, 210)])
def test_a_flat_prefix_whose_last_points_rise_says_so_and_its_band_opens(seed, until):
    c, y = flat_then_rise(seed)
    fit = fit_sigmoid(c, y, fit_until=until)
    later = c > until
    assert fit.no_gain and fit.takeoff, fit.reason  # a rise in a few points identifies no sigmoid, but is seen
    assert "take-off may be starting" in fit.forecast_used and "take-off may be starting" in fit.reason
    assert fit.takeoff["z"] > TAKEOFF_Z and fit.takeoff["rise"] > 0
    flat_only = dataclasses.replace(fit, takeoff=None)  # what the forecast claimed before
    assert _coverage(flat_only, c[later], y[later]) < 0.1
    assert _coverage(fit, c[later], y[later]) >= 0.9
    assert fit.predict(c[later]) == pytest.approx(np.full(later.sum(), fit.A))  # the point forecast stays the level
    # the band opens from the rising points' level at the last fitted compute, not with a jump
    origin, span = fit.takeoff["origin"], fit.takeoff["span"]
    _, hi = fit.band(np.array([origin, origin * np.exp(span / 2), origin * np.exp(span)]))
    assert hi[0] < 0.1 and 0.3 < hi[1] < 0.8 and hi[2] == pytest.approx(1.0)


@pytest.mark.parametrize("name, fraction", [("shamanez__exp27-ef-r1-c7fa7kjv__critic-score-mean", 0.15),
                                            ("shamanez__exp27-plain-powersgd-u1v94opv__critic-score-mean", 0.30)])
def test_real_runs_that_take_off_late_are_not_given_a_tight_flat_band(name, fraction):
    cv = Curve.from_csv(MORE / f"{name}.csv")
    c, s = cv.compute, cv.score
    until = fraction * c[-1]
    fit = fit_sigmoid(c, s, r0=r0_rule([(c, s)]), fit_until=until)
    later = c > until
    assert fit.no_gain and fit.takeoff
    assert _coverage(dataclasses.replace(fit, takeoff=None), c[later], s[later]) < 0.1  # the old flat band held almost none
    assert _coverage(fit, c[later], s[later]) >= 0.9


def test_flat_noise_is_rarely_taken_for_a_take_off():
    flagged = 0
    for seed in range(200):
        rng = np.random.default_rng(1000 + seed)
        c = np.arange(0, 30) * 10.0
        fit = fit_sigmoid(c, np.clip(0.2 + rng.normal(0, 0.02, len(c)), 0, 1), n_boot=0)
        flagged += bool(fit.no_gain and fit.takeoff)
    assert flagged <= 10  # one-sided z > 2: about 2% of flat curves; each only gets a wider band and a note


def test_a_steady_flat_run_has_no_take_off_and_the_rule_needs_earlier_points():
    x = np.log(np.arange(1, 21) * 10.0)
    assert rising_tail(x, np.full(20, 0.3) + np.r_[np.zeros(10), np.tile([0.01, -0.01], 5)]) is None
    assert rising_tail(x[:5], np.array([0.1, 0.1, 0.2, 0.3, 0.4])) is None  # 3 tail points need 3 earlier ones


def test_the_take_off_survives_a_json_round_trip():
    c, y = flat_then_rise(0)
    fit = fit_sigmoid(c, y, fit_until=200)
    back = SigmoidFit.from_json(fit.to_json())
    assert back.takeoff == fit.takeoff
    assert back.band(c[c > 200])[1] == pytest.approx(fit.band(c[c > 200])[1])
