"""The forecast scoreboard against the noise floor (issue 24): held-out noise, excess error, a
last value read from the last 3 points, and the per-prefix summary that states the targets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.scaling.forecast.backtest import excess_error, holdout_noise, last_k_rmse
from workbench.scaling.data import Curve
from workbench.scaling.forecast.scoreboard import PrefixScore, format_table, score_prefix, summary


def _sigmoid(c):
    return 0.1 + 0.5 / (1 + (0.3 / np.maximum(c, 1e-12)) ** 2.0) * (c > 0)


def test_the_held_out_noise_is_the_points_own_sd_whatever_the_curve_does():
    c = np.linspace(0, 1, 401)
    y = _sigmoid(c) + np.random.default_rng(0).normal(0, 0.02, len(c))
    assert holdout_noise(c, y, until=0.25) == pytest.approx(0.02, rel=0.15)  # the rising mean cancels out
    assert holdout_noise(c, _sigmoid(c), until=0.25) < 1e-3


def test_excess_error_is_what_is_left_beyond_the_noise():
    assert excess_error(0.05, 0.03) == pytest.approx(0.04)
    assert excess_error(0.02, 0.03) == 0.0  # a forecast at the noise floor has no excess
    assert math.isnan(excess_error(math.nan, 0.03))


def test_a_lucky_last_point_does_not_make_the_last3_forecast():
    c = np.arange(10.0)
    y = np.array([0.1, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.45, 0.2, 0.2])  # a lucky 0.45 ends the prefix C <= 7
    assert last_k_rmse(c, y, until=7.0, k=1) == pytest.approx(0.25)
    assert last_k_rmse(c, y, until=7.0, k=3) == pytest.approx(np.mean([0.2, 0.2, 0.45]) - 0.2)


def _row(name, wb, paper, last3, noise, fraction=0.25):
    rmse = {"workbench": wb, "paper": paper, "last": last3, "mean": last3, "last3": last3}
    return PrefixScore(name, fraction, 1.0, 10, 10, rmse, 0.95, noise)


def test_the_summary_states_the_excess_errors_their_gain_and_the_worst_curves():
    rows = [_row("a", 0.05, 0.06, 0.08, 0.03), _row("b", 0.10, 0.09, 0.04, 0.02), _row("c", 0.03, 0.05, 0.05, 0.03)]
    (s,) = summary(rows)
    ex = {k: [excess_error(r.rmse[k], r.noise) for r in rows] for k in ("workbench", "paper", "last3")}
    assert s["median_excess_workbench"] == pytest.approx(np.median(ex["workbench"]))
    ref = min(np.median(ex["paper"]), np.median(ex["last3"]))
    assert s["excess_gain_vs_better_of_paper_and_last3"] == pytest.approx(1 - np.median(ex["workbench"]) / ref)
    assert s["worst_vs_last3"] == pytest.approx(0.06) and s["worst_vs_last3_curve"] == "b"
    assert s["curves_worse_than_paper_or_last3_by_0.05"] == 1
    assert "beyond the noise" in format_table(rows) and "target 30% under" in format_table(rows)


def test_score_prefix_records_the_noise_and_the_last3_forecast():
    c = np.linspace(0, 1, 81)
    y = np.clip(_sigmoid(c) + np.random.default_rng(1).normal(0, 0.01, len(c)), 0, 1)
    row = score_prefix(Curve(c, y, name="clean"), 0.5, n_boot=0)
    assert not row.error and row.noise == pytest.approx(holdout_noise(c, y, row.until))
    assert row.rmse["last3"] == pytest.approx(last_k_rmse(c, y, row.until, 3))
    assert row.to_dict()["noise"] == pytest.approx(row.noise)
