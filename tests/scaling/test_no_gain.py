"""No-gain fits (workbench/scaling/fit/sigmoid.py, result.py): flat, falling and noisy data never get a
sigmoid that collapses or jumps past the observed range; the forecast is flat with an honest band.

The yardstick (issue 11): on every curve and prefix, the forecast's held-out RMSE is never worse
than the better of two naive forecasts (the prefix's last value, the prefix's mean) by more than
0.02. Rising curves must keep their sigmoid.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.scaling import MIN_POINTS, Curve, backtest, compare, fit_sigmoid, fit_sigmoid_multi, refit_at_shared_A, scaling_gain
from workbench.scaling.fit.result import SigmoidFit

from .synthetic import GEMMA_TRAIN, GEMMA_VAL, QWEN_TRAIN, QWEN_VAL, curve_path, synth

FRACTIONS = (0.25, 0.4, 0.5, 0.75)
TOL = 0.02  # the bar over the better naive forecast


def _c(n: int = 40) -> np.ndarray:
    return np.r_[0.0, np.geomspace(50, 5000, n)]


def flat(seed: int, level: float = 0.5, noise: float = 0.02, n: int = 40):
    rng = np.random.default_rng(seed)
    return _c(n), np.r_[level, np.clip(level + rng.normal(0, noise, n), 0, 1)]


def ar_flat(seed: int, rho: float = 0.5, noise: float = 0.015, n: int = 40):
    rng = np.random.default_rng(seed)
    e = np.zeros(n)
    for i in range(1, n):
        e[i] = rho * e[i - 1] + rng.normal(0, noise)
    return _c(n), np.r_[0.5, 0.5 + e]


def falling(seed: int, n: int = 40):
    """A gentle, steady decline (0.55 -> 0.47) with noise 0.01."""
    rng = np.random.default_rng(seed)
    return _c(n), np.r_[0.55, 0.55 - 0.08 * np.linspace(0, 1, n) + rng.normal(0, 0.01, n)]


def _excess(c, y, fraction, **kw):
    """(fit, held-out RMSE of the fit minus that of the better naive forecast) for one prefix."""
    bt = backtest((c, y), fractions=(fraction,), n_boot=0, **kw)
    r = bt.rows[0]
    assert not r.error, r.error
    return bt.fits[0], r.rmse - min(r.naive_last_rmse, r.naive_mean_rmse)


# ---------------------------------------------------------------- the failure, on a real curve
def test_real_flat_stretch_no_longer_collapses():
    # Qwen2.5-0.5B validation accuracy after its early jump: a flat stretch (0.523, 0.531, 0.523,
    # 0.514), fitted from its first point as R0. The old fit put a step (B = 20) just past the data
    # and forecast a collapse to A = 0: held-out RMSE 0.242 where the prefix's mean scores 0.022.
    cv = Curve.from_csv(curve_path(QWEN_VAL))
    c, s = cv.compute[11:19], cv.score[11:19]
    fit = fit_sigmoid(c[:4], s[:4], r0="first")
    assert fit.no_gain and not fit.converged and fit.reason.startswith("no gain detected")
    assert math.isnan(fit.B) and math.isnan(fit.C_mid)
    assert s[:4].min() <= fit.A <= s[:4].max()  # the level sits inside the data
    assert fit.A_ci[0] < fit.A < fit.A_ci[1]
    pred = fit.predict(c[4:])
    assert np.all(pred == fit.A)  # flat
    rmse = float(np.sqrt(np.mean((pred - s[4:]) ** 2)))
    naive = min(np.sqrt(np.mean((s[3] - s[4:]) ** 2)), np.sqrt(np.mean((s[:4].mean() - s[4:]) ** 2)))
    assert rmse <= naive + TOL and rmse < 0.05
    assert "NO GAIN DETECTED" in fit.summary()


@pytest.mark.parametrize("lo, hi", [(10, 26), (18, 42)])
def test_real_flat_stretches_get_no_step_to_one(lo, hi):
    # the same curve's later plateau: the old fit jumped to A = 1 (B = 20) right after the prefix
    cv = Curve.from_csv(curve_path(QWEN_VAL))
    c, s = cv.compute[lo:hi], cv.score[lo:hi]
    h = len(c) // 2
    fit = fit_sigmoid(c[:h], s[:h], r0="first", n_boot=50)
    assert fit.no_gain
    rmse = float(np.sqrt(np.mean((fit.predict(c[h:]) - s[h:]) ** 2)))
    assert rmse < 0.02


# ---------------------------------------------------------------- synthetic flat, noisy, falling
@pytest.mark.parametrize("seed", range(6))
def test_noisy_flat_curves_are_no_gain_and_forecast_no_worse_than_naive(seed):
    c, y = flat(seed)
    flagged = 0
    for fr in FRACTIONS:
        fit, excess = _excess(c, y, fr)
        assert excess <= TOL, (fr, excess, fit.reason)
        flagged += fit.no_gain
        if not fit.no_gain:  # a kept sigmoid on noise must at least stay inside the data
            assert y.min() - 0.05 <= fit.predict(c[-1]) <= y.max() + 0.05
    assert flagged >= 3


@pytest.mark.parametrize("seed", range(6))
def test_autocorrelated_flat_curves_forecast_no_worse_than_naive(seed):
    c, y = ar_flat(seed)
    for fr in FRACTIONS:
        fit, excess = _excess(c, y, fr)
        assert excess <= TOL, (fr, excess, fit.reason)


@pytest.mark.parametrize("seed", range(4))
def test_falling_curves_forecast_no_worse_than_naive(seed):
    c, y = falling(seed)
    for fr in FRACTIONS:
        fit, excess = _excess(c, y, fr)
        assert excess <= TOL, (fr, excess, fit.reason)
        assert not fit.rising  # falling or flat, never a gain
        assert fit.predict(c[-1]) >= y.min() - 0.05  # no collapse below the observed range


def test_low_flat_curve_of_a_crippled_run_is_flat_at_its_level():
    c, y = flat(3, level=0.145, noise=0.015)
    fit = fit_sigmoid(c, y)
    assert fit.no_gain and abs(fit.A - 0.145) < 0.015
    lo, hi = fit.band([1e4, 1e6], kind="prediction")
    assert np.all(lo < 0.145) and np.all(hi > 0.145) and lo[0] == lo[1]  # flat band


def test_collapse_to_zero_is_not_reported():
    # a decline seen only up to its midpoint: the unconstrained fit runs A to 0, far below the data
    c = _c()
    y = np.r_[0.6, 0.6 - 0.3 / (1 + (2000 / c[1:]) ** 2) + np.random.default_rng(10).normal(0, 0.01, 40)]
    fit = fit_sigmoid(c, y, fit_until=2000, n_boot=0)
    assert fit.no_gain and "collapse" in fit.reason
    assert fit.A > 0.4


# ---------------------------------------------------------------- the band is honest
def test_flat_band_covers_new_points_and_widens_with_autocorrelation():
    covered = []
    for seed in range(10):
        c, y = flat(100 + seed)
        fit = fit_sigmoid(c, y, fit_until=2500, seed=seed)
        if fit.no_gain:
            test = c > 2500
            lo, hi = fit.band(c[test], kind="prediction")
            covered.append(np.mean((y[test] >= lo) & (y[test] <= hi)))
    assert len(covered) >= 8 and np.mean(covered) >= 0.85
    # same marginal noise (0.02): AR(1) rho 0.8 moves the level more, so its interval is wider
    ratios = []
    for seed in range(10):
        c, y_iid = flat(200 + seed, noise=0.02)
        c, y_ar = ar_flat(200 + seed, rho=0.8, noise=0.012)
        iid, ar = fit_sigmoid(c, y_iid, seed=seed), fit_sigmoid(c, y_ar, seed=seed)
        if iid.no_gain and ar.no_gain:
            assert ar.block > iid.block
            ratios.append((ar.A_ci[1] - ar.A_ci[0]) / (iid.A_ci[1] - iid.A_ci[0]))
    # measured 1.10-1.38 on the first five seeds (the moving-block bootstrap under-widens a
    # little: for 5 latest points of AR(0.8) the exact ratio is about 1.7)
    assert len(ratios) >= 5 and min(ratios) > 1.0 and np.median(ratios) > 1.1, ratios


# ---------------------------------------------------------------- rising curves keep their sigmoid
@pytest.mark.parametrize("hi", [4000, 8000, 20000, 100000])
def test_rising_synthetic_curves_are_not_flagged(hi):
    c, y = synth(n=30, lo=500, hi=hi, noise=0.01, seed=hi)
    fit = fit_sigmoid(c, y, n_boot=0)
    assert not fit.no_gain and fit.gain_p < 0.01 and fit.rising


def test_a_small_rise_in_few_points_is_kept():
    # gemma-2-2b validation, first 40% of compute: 4 points rising 0.546 -> 0.616 from R0 0.52
    cv = Curve.from_csv(curve_path(GEMMA_VAL))
    fit = fit_sigmoid(cv.compute, cv.score, fit_until=0.4 * cv.compute[-1], n_boot=0)
    assert fit.n == MIN_POINTS and not fit.no_gain and fit.rising


# ---------------------------------------------------------------- every public curve
PUBLIC = [
    (QWEN_VAL, {"fit_from": 0.5}),  # leave out the format jump 0.001 -> 0.46 (see the test below)
    (GEMMA_VAL, {}),
    (QWEN_TRAIN, {"r0": "first"}),
    (GEMMA_TRAIN, {"r0": "first"}),
]


@pytest.mark.parametrize("name, kw", PUBLIC, ids=[p[0].split("_gsm8k")[0] + p[0].rsplit("__", 1)[1][:-4] for p in PUBLIC])
def test_public_curves_forecast_no_worse_than_naive(name, kw):
    cv = Curve.from_csv(curve_path(name))
    bt = backtest(cv, fractions=FRACTIONS, n_boot=0, **kw)
    fitted = [r for r in bt.rows if not r.error]
    assert len(fitted) >= 3
    for r in bt.rows:
        if r.error:  # gemma's 25% prefix holds 2 evaluations: no forecast is made
            assert "at least 4" in r.error and r.fraction == 0.25
            continue
        assert not r.no_gain  # these runs learn
        assert r.rmse <= min(r.naive_last_rmse, r.naive_mean_rmse) + TOL, r


def test_qwen_validation_with_its_early_jump_misses_the_bar_by_a_little():
    # Measured and kept honest: fitted from compute 0, the 0.001 -> 0.46 jump in the first three
    # evaluations forces a steep sigmoid whose ceiling (0.50-0.52) sits under the slow later
    # rise; the 25% and 40% forecasts are 0.003 and 0.016 worse than the last value (0.004 and
    # 0.003 with the previous blend, forecast/blend.py). Not a
    # no-gain case (the curve rises); the fix is the paper's fit_from (test above).
    bt = backtest(Curve.from_csv(curve_path(QWEN_VAL)), fractions=(0.25, 0.4), n_boot=0)
    for r in bt.rows:
        assert not r.no_gain
        assert 0.0 < r.rmse - min(r.naive_last_rmse, r.naive_mean_rmse) < 0.035


# ---------------------------------------------------------------- every consumer
@pytest.fixture(scope="module")
def flat_fit() -> SigmoidFit:
    c, y = flat(1)
    f = fit_sigmoid(c, y)
    assert f.no_gain
    return f


def test_reach_above_the_level_is_unreachable_and_says_so(flat_fit):
    r = flat_fit.compute_to_reach(0.6)
    assert not r.reachable and r.compute == math.inf and "no gain detected" in r.note
    below = flat_fit.compute_to_reach(flat_fit.A_ci[0] - 0.01)
    assert below.reachable and below.compute <= 50.0 and below.p_reachable == 1.0


def test_scaling_gain_verdict_is_no_gain(flat_fit):
    g = scaling_gain(flat_fit, factor=10)
    assert g.worth is False and g.gain == 0.0 and g.verdict.startswith("no gain detected")
    assert g.lo <= flat_fit.A <= g.hi


def test_json_round_trip_keeps_the_flat_forecast(flat_fit):
    text = flat_fit.to_json()
    assert "NaN" not in text  # strict JSON
    back = SigmoidFit.from_json(text)
    assert back.no_gain and back.to_dict() == flat_fit.to_dict()
    assert back.predict(1e5) == flat_fit.A
    assert np.allclose(back.band([1e3, 1e5])[0], flat_fit.band([1e3, 1e5])[0])
    old = flat_fit.to_dict()
    del old["no_gain"], old["gain_p"]  # a fit saved before no-gain existed still loads
    assert not SigmoidFit.from_dict({**old, "B": 1.0, "C_mid": 100.0}).no_gain


def test_compare_ranks_a_no_gain_point_by_its_level(flat_fit):
    c, y = synth(n=40, noise=0.01, seed=3)
    rising = fit_sigmoid(c, y)
    cmp = compare({"flat": flat_fit, "rising": rising})
    assert cmp.winner == "rising" and [r.name for r in cmp.rows] == ["rising", "flat"]
    row = cmp.rows[1]
    assert (row.A_lo, row.A_hi) == flat_fit.A_ci and "no gain detected" in row.verdict
    # a tie on A with a no-gain point: no B to compare, so no winner and no exception
    c2, y2 = flat(2, level=rising.A, noise=0.01)
    tied = fit_sigmoid(c2, y2)
    assert tied.no_gain
    cmp2 = compare({"flat": tied, "rising": rising})
    assert cmp2.winner is None and all(r.group == 1 for r in cmp2.rows)
    assert "B not comparable" in cmp2.rows[0].verdict and str(cmp2)


def test_joint_fit_of_flat_seeds_and_refit_at_a_shared_a():
    runs = {f"seed{s}": flat(20 + s) for s in range(3)}
    f = fit_sigmoid_multi(runs)
    assert f.no_gain and f.run_names == ["seed0", "seed1", "seed2"] and abs(f.A - 0.5) < 0.02
    g = refit_at_shared_A(f, 0.55)
    assert g.fixed_A and not g.no_gain and not g.converged and "B at a shared A" in g.reason


def test_held_a_never_triggers_the_gain_rule():
    c, y = flat(4)
    f = fit_sigmoid(c, y, fixed_A=0.5, n_boot=0)
    assert not f.no_gain and math.isnan(f.gain_p) and f.A == 0.5


def test_backtest_rows_report_naive_forecasts():
    c, y = flat(5)
    bt = backtest((c, y), fractions=(0.5,), n_boot=0)
    r = bt.rows[0]
    test = c > 0.5 * c[-1]
    prefix = ~test
    assert r.naive_last_rmse == pytest.approx(np.sqrt(np.mean((y[test] - y[prefix][-1]) ** 2)))
    assert r.naive_mean_rmse == pytest.approx(np.sqrt(np.mean((y[test] - y[prefix & (c > 0)].mean()) ** 2)))
    assert r.no_gain and "no gain: flat" in str(bt) and "naive" in str(bt)
