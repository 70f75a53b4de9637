"""Backtests on synthetic and real curves (workbench/scaling/forecast/backtest.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.errors import UserError
from workbench.scaling import Curve, backtest

from .synthetic import GEMMA_VAL, QWEN_TRAIN, QWEN_VAL, curve_path, synth


def test_backtest_on_a_true_sigmoid_forecasts_the_rest():
    c, y = synth(n=80, lo=500, hi=100000, noise=0.01, seed=0, spacing="lin")
    bt = backtest((c, y))
    assert [r.fraction for r in bt.rows] == [0.25, 0.5, 0.75]
    for r in bt.rows:
        assert not r.error and r.n_fit + r.n_test == 80
        assert r.coverage >= 0.75
    # noise is 0.01: from half the curve on, forecasts sit near that floor; from a quarter (just
    # past C_mid) the asymptote is still loose
    assert bt.rows[0].rmse < 0.04
    assert all(r.rmse < 0.015 and abs(r.final_error) < 0.03 for r in bt.rows[1:])


def test_backtest_real_qwen_validation_curve_first_half():
    # Qwen2.5-0.5B PPO on GSM8K: fit on the first half of the compute, forecast the second half.
    # Measured: held-out RMSE 0.029. Bound 0.05: about 3.5x the binomial noise of one GSM8K
    # evaluation (sqrt(0.55*0.45/1319) = 0.014), leaving room for the real curve's slow late rise
    # and sag that no sigmoid has; a broken fit (or a flat line at R0) is off by >0.3.
    bt = backtest(Curve.from_csv(curve_path(QWEN_VAL)), fractions=(0.5,))
    r = bt.rows[0]
    assert r.n_fit == 21 and r.n_test == 22
    assert r.rmse < 0.05
    assert abs(r.final_error) < 0.05
    assert r.coverage >= 0.7


def test_backtest_real_gemma_validation_curve_first_half():
    # gemma-2-2b-it after SFT: 11 evaluations; measured held-out RMSE 0.010 on the second half.
    # Bound 0.03: 2x the binomial noise of one evaluation (0.013) plus margin for 5-point fits.
    bt = backtest(Curve.from_csv(curve_path(GEMMA_VAL)))
    first, half = bt.rows[0], bt.rows[1]
    assert first.error and "at least 4" in first.error and math.isnan(first.rmse)  # 2 points: no fit
    assert bt.fits[0] is None
    assert half.rmse < 0.03


def test_backtest_real_train_reward_curve_improves_with_more_data():
    cv = Curve.from_csv(curve_path(QWEN_TRAIN))
    bt = backtest(cv, r0="first", n_boot=50)
    rmses = [r.rmse for r in bt.rows]
    # measured 0.030, 0.033, 0.029 (0.038, 0.036, 0.030 with the previous blend): more of the curve,
    # no worse forecasts; from 25% on the forecast is already near the curve's point noise
    assert rmses[2] < rmses[0] and all(r < 0.1 for r in rmses)


def test_backtest_table_and_frame():
    c, y = synth(n=40, noise=0.01)
    bt = backtest((c, y), fractions=(0.5, 0.75), n_boot=50)
    text = str(bt)
    assert "rmse" in text and "final_err" in text and text.count("\n") == 3
    df = bt.to_frame()
    assert list(df["fraction"]) == [0.5, 0.75] and {"rmse", "final_error", "coverage"} <= set(df.columns)


def test_backtest_bad_input():
    c, y = synth(n=20, noise=0.01)
    with pytest.raises(UserError, match="fractions"):
        backtest((c, y), fractions=(0.5, 1.0))
    with pytest.raises(UserError, match="compute 0"):
        backtest((c[1:], y[1:]))
    assert np.isfinite(backtest((c[1:], y[1:]), r0="first", fractions=(0.6,), n_boot=0).rows[0].rmse)
    one = backtest((c, y), 0.5, n_boot=0)  # a single prefix needs no tuple
    assert [r.fraction for r in one.rows] == [0.5]


def test_the_demo_runs_own_40pct_backtest_meets_its_targets():
    # a real demo run (tests/scaling/data/README.md); the `workbench run` report's backtest:
    # fit the first 40% of the compute, forecast the rest: RMSE <= 0.03, band coverage >= 80%
    from pathlib import Path

    cv = Curve.from_csv(Path(__file__).parent / "data" / "demo_seed0__val.csv")
    row = backtest(cv, fractions=(0.4,)).rows[0]
    assert row.rmse <= 0.03 and row.coverage >= 0.8
    assert row.rmse < row.naive_last_rmse
