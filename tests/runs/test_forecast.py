"""The forecast dict of a fitted run at a budget."""

from __future__ import annotations

import math

import pytest

from workbench import Session
from workbench.errors import UserError
from workbench.scaling import scaling_gain
from workbench.runs.forecast import forecast_from_fit


@pytest.fixture
def fit(run_folder):
    return Session.open(run_folder(12)).fit()


def test_forecast_matches_the_fit_and_the_scaling_gain(fit):
    current = float(fit.compute[fit.used].max())
    fc = forecast_from_fit(fit, 5 * current)
    assert fc["pass_rate"] == pytest.approx(fit.predict(5 * current))
    lo, hi = fit.band(5 * current)
    assert (fc["lo"], fc["hi"]) == pytest.approx((lo[0], hi[0]))
    g = scaling_gain(fit, budget=5 * current)
    assert fc["gain"] == pytest.approx(g.gain) and fc["verdict"] == g.verdict and fc["worth"] == g.worth
    assert fc["horizon"] == fit.horizon(5 * current).line() == g.horizon and fc["horizon"].startswith("5x the compute seen")


def test_forecast_inside_the_data_has_no_gain(fit):
    fc = forecast_from_fit(fit, float(fit.compute[fit.used].min()))
    assert fc["gain"] is None and "not past the current compute" in fc["verdict"] and fc["horizon"] == "inside the compute seen"
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(UserError, match="budget"):
            forecast_from_fit(fit, bad)
