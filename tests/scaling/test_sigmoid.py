"""Fitting the sigmoid (workbench/scaling/fit/sigmoid.py): recovery, honesty of intervals, options."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import UserError
from workbench.scaling import fit_sigmoid, fit_sigmoid_multi, refit_at_shared_A

from .synthetic import PAPER_8B, sigmoid, synth

TRUE = PAPER_8B


def test_recovers_known_parameters_at_noise_001_over_60_points():
    errors = []
    for seed in range(20):
        c, y = synth(n=60, lo=1500, hi=100000, noise=0.01, seed=seed)
        f = fit_sigmoid(c, y, n_boot=0)
        assert f.converged and f.n == 60 and f.r0_source == "measured" and f.R0 == TRUE["R0"]
        errors.append(f.A - TRUE["A"])
    errors = np.abs(errors)
    assert (errors <= 0.01).mean() >= 0.9  # the bar: A within 0.01
    assert np.median(errors) < 0.005


def test_one_fit_reports_parameters_intervals_and_residual_statistics():
    c, y = synth(n=60, noise=0.01, seed=7)
    f = fit_sigmoid(c, y)
    assert abs(f.A - TRUE["A"]) < 0.01
    assert abs(f.B - TRUE["B"]) < 0.25
    assert abs(np.log(f.C_mid / TRUE["C_mid"])) < 0.1
    for est, (lo, hi) in ((f.A, f.A_ci), (f.B, f.B_ci), (f.C_mid, f.C_mid_ci)):
        assert lo < est < hi
    assert 0.005 < f.rmse < 0.015 and f.r2 > 0.9 and f.samples.shape == (200, 3)
    assert abs(f.sigma - 0.01) < 0.003


@pytest.mark.slow
def test_95_percent_intervals_cover_the_truth_90_to_98_percent_of_the_time():
    draws = 200
    hits = np.zeros(3)
    for d in range(draws):
        c, y = synth(n=60, lo=1500, hi=50000, noise=0.01, seed=1000 + d)
        f = fit_sigmoid(c, y, seed=d)
        hits += [f.A_ci[0] <= TRUE["A"] <= f.A_ci[1], f.B_ci[0] <= TRUE["B"] <= f.B_ci[1], f.C_mid_ci[0] <= TRUE["C_mid"] <= f.C_mid_ci[1]]
    coverage = hits / draws
    assert np.all((coverage >= 0.90) & (coverage <= 0.98)), coverage


def test_block_bootstrap_widens_intervals_for_autocorrelated_noise():
    # Same marginal noise, but AR(1) with rho 0.8: fewer independent points, wider honest intervals.
    c = np.r_[0.0, np.geomspace(1500, 50000, 120)]
    rng = np.random.default_rng(3)
    e = np.zeros(120)
    for i in range(1, 120):
        e[i] = 0.8 * e[i - 1] + rng.normal(0, 0.006)
    y = np.r_[TRUE["R0"], sigmoid(c[1:], **TRUE) + e]
    auto = fit_sigmoid(c, y)
    plain = fit_sigmoid(c, y, block=1)
    assert auto.autocorr > 0.5 and auto.block > 1 and plain.block == 1
    width = lambda f: f.A_ci[1] - f.A_ci[0]  # noqa: E731
    assert width(auto) > 1.5 * width(plain)


def test_fit_from_leaves_out_the_early_regime():
    c, y = synth(n=50, lo=1500, hi=60000, noise=0.005, seed=2)
    # an early, nearly linear and noisy phase that the sigmoid does not describe
    early_c = np.linspace(50, 1400, 15)
    early_y = TRUE["R0"] + 0.12 * early_c / 1400
    c2, y2 = np.r_[0.0, early_c, c[1:]], np.r_[TRUE["R0"], early_y, y[1:]]
    with_early = fit_sigmoid(c2, y2, n_boot=0)
    without = fit_sigmoid(c2, y2, fit_from=1500, n_boot=0)
    assert without.n == 50 and with_early.n == 65
    assert not without.used[1:16].any() and without.used[0] == False  # noqa: E712 (compute 0 defines R0)
    assert abs(without.A - TRUE["A"]) < 0.01
    assert abs(without.B - TRUE["B"]) < abs(with_early.B - TRUE["B"])


def test_r0_rules():
    c, y = synth(n=30, noise=0.01)
    assert fit_sigmoid(c, y, n_boot=0).R0 == TRUE["R0"]
    given = fit_sigmoid(c, y, r0=0.35, n_boot=0)
    assert given.R0 == 0.35 and given.r0_source == "given"
    with pytest.raises(UserError, match="no point at compute 0"):
        fit_sigmoid(c[1:], y[1:])
    first = fit_sigmoid(c[1:], y[1:], r0="first", n_boot=0)
    assert first.R0 == y[1] and first.r0_source == "first"
    with pytest.raises(UserError, match="r0 must be"):
        fit_sigmoid(c, y, r0=1.5)
    with pytest.raises(UserError, match="r0 must be"):
        fit_sigmoid(c, y, r0="last")


def test_the_r0_rule_of_run_curves_measures_r0_only_when_every_curve_has_compute_0():
    from workbench.scaling import r0_rule

    c, y = synth(n=30, noise=0.01)
    assert r0_rule([(c, y)]) is None and r0_rule([(c, y), (c, y)]) is None
    assert r0_rule([(c, y), (c[1:], y[1:])]) == "first"  # one resumed run: every curve starts at its first point
    assert fit_sigmoid(c[1:], y[1:], r0=r0_rule([(c[1:], y[1:])]), n_boot=0).r0_source == "first"


def test_options_come_as_keywords_or_one_fitoptions_and_unknown_ones_are_named():
    from workbench.scaling import FitOptions

    c, y = synth(n=30, noise=0.01)
    opts = FitOptions(n_boot=0, method="sigmoid", fit_from=float(c[3]))
    a, b = fit_sigmoid(c, y, opts), fit_sigmoid(c, y, n_boot=0, method="sigmoid", fit_from=float(c[3]))
    assert (a.A, a.B, a.C_mid, a.n) == (b.A, b.B, b.C_mid, b.n)
    assert fit_sigmoid(c, y, opts, n_boot=50).samples.shape == (50, 3)  # a keyword replaces the option's field
    with pytest.raises(UserError, match="unknown fit option.*'nboot'.*n_boot"):
        fit_sigmoid(c, y, nboot=10)


def test_too_few_points_after_fit_from():
    c, y = synth(n=30, lo=1500, hi=50000, noise=0.01)
    with pytest.raises(UserError, match=r"only 3 point\(s\) in \[.*at least 4"):
        fit_sigmoid(c, y, fit_from=c[-3])
    with pytest.raises(UserError, match="at least 4"):
        fit_sigmoid(c[:4], y[:4])  # compute 0 + 3 points


@pytest.mark.parametrize(
    "kwargs, fragment",
    [({"n_boot": 5}, "n_boot"), ({"level": 1.5}, "level"), ({"fit_from": 5000, "fit_until": 4000}, "fit_until"), ({"fit_from": -1.0}, "fit_from"), ({"fixed_A": 1.5}, "fixed_A"), ({"block": 0}, "block"), ({"block": "big"}, "block"),
     ({"n_boot": "200"}, "n_boot must be a whole number"), ({"fit_from": "1"}, "fit_from must be a number"), ({"level": "high"}, "level must be a number"),
     ({"prior": {"A": 0.5}}, "prior must be a SigmoidPrior")],
)
def test_bad_options(kwargs, fragment):
    c, y = synth(n=20, noise=0.01)
    with pytest.raises(UserError, match=fragment):
        fit_sigmoid(c, y, **kwargs)


def test_bad_data_is_rejected_before_fitting():
    c, y = synth(n=20, noise=0.01)
    with pytest.raises(UserError, match="sorted"):
        fit_sigmoid(c[::-1], y[::-1])
    with pytest.raises(UserError, match="constant"):
        fit_sigmoid(c, np.full_like(y, 0.5))


def test_a_curve_that_has_not_bent_is_reported_not_converged():
    c, y = synth(n=30, lo=100, hi=6000, noise=0.01, seed=1)  # ends at half of C_mid: no ceiling visible
    f = fit_sigmoid(c, y)
    assert not f.converged and "not identified" in f.reason
    assert f.A_ci[1] == 1.0  # and the interval says the ceiling could be anywhere up to 1
    assert "NOT CONVERGED" in f.summary()


def test_asymptote_above_the_observed_range():
    # Data stop at C_mid (half the gain): A must be extrapolated above every observed score.
    c, y = synth(n=60, lo=500, hi=TRUE["C_mid"], noise=0.005, seed=4)
    f = fit_sigmoid(c, y)
    assert f.A > y.max() + 0.05
    assert f.A_ci[0] <= TRUE["A"] <= f.A_ci[1]


def test_asymptote_below_noisy_high_points():
    c, y = synth(n=80, lo=1500, hi=300000, noise=0.02, seed=5)
    f = fit_sigmoid(c, y)
    assert f.A < y.max() and abs(f.A - TRUE["A"]) < 0.01


def test_a_falling_curve_fits_with_a_below_r0():
    c = np.r_[0.0, np.geomspace(100, 10000, 40)]
    y = np.r_[0.6, sigmoid(c[1:], R0=0.6, A=0.3, C_mid=1000, B=2.0) + np.random.default_rng(0).normal(0, 0.01, 40)]
    f = fit_sigmoid(c, y)
    assert f.converged and not f.rising
    assert abs(f.A - 0.3) < 0.02 and abs(f.B - 2.0) < 0.4


def test_any_compute_unit_gives_the_same_fit():
    c, y = synth(n=40, noise=0.01, seed=6)
    hours = fit_sigmoid(c, y, n_boot=0)
    flops = fit_sigmoid(c * 3.6e21, y, n_boot=0)  # FLOPs-sized numbers
    steps = fit_sigmoid(c / 1e4, y, n_boot=0)
    for f, k in ((flops, 3.6e21), (steps, 1e-4)):
        assert abs(f.A - hours.A) < 1e-6 and abs(f.B - hours.B) < 1e-4
        assert abs(f.C_mid / k / hours.C_mid - 1) < 1e-4


def test_seeded_bootstrap_is_reproducible():
    c, y = synth(n=30, noise=0.01, seed=8)
    a, b = fit_sigmoid(c, y, seed=3), fit_sigmoid(c, y, seed=3)
    assert a.A_ci == b.A_ci and np.array_equal(a.samples, b.samples)


def _seeds(spread: float, n_runs: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    runs = {}
    for s in range(n_runs):
        a = TRUE["A"] + spread * (s - (n_runs - 1) / 2)  # seeds that plateau at different heights
        c, y = synth(n=40, noise=0.008, seed=100 * seed + s, params={"A": a})
        runs[f"seed{s}"] = (c, y)
    return runs


def test_several_seeds_fit_jointly_and_seed_spread_widens_the_interval():
    agree = fit_sigmoid_multi(_seeds(0.0))
    disagree = fit_sigmoid_multi(_seeds(0.02))
    for f in (agree, disagree):
        assert f.run_names == ["seed0", "seed1", "seed2"] and f.n == 120
        assert abs(f.A - TRUE["A"]) < 0.01
        assert f.A_ci[0] <= TRUE["A"] <= f.A_ci[1]
    width = lambda f: f.A_ci[1] - f.A_ci[0]  # noqa: E731
    assert width(disagree) > 1.5 * width(agree)


def test_multi_accepts_a_list_and_rejects_an_empty_one():
    runs = list(_seeds(0.0).values())
    f = fit_sigmoid_multi(runs, n_boot=0)
    assert f.run_names == ["run0", "run1", "run2"] and f.R0 == TRUE["R0"]
    with pytest.raises(UserError, match="no curves"):
        fit_sigmoid_multi([])


def test_fixed_a_and_refit_at_shared_a():
    c, y = synth(n=40, noise=0.01, seed=9)
    f = fit_sigmoid(c, y)
    g = refit_at_shared_A(f, 0.66)
    assert g.A == 0.66 and g.fixed_A and g.A_ci == (0.66, 0.66)
    assert g.B_ci[0] < g.B < g.B_ci[1]
    assert g.rmse >= f.rmse - 1e-12  # holding A can only fit worse
