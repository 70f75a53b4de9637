"""Numerical core (workbench/scaling/fit/numerics.py): global search, refinement, bootstrap pieces."""

from __future__ import annotations

import numpy as np
from scipy.optimize import curve_fit

from workbench.scaling.fit import numerics

from .synthetic import PAPER_8B, sigmoid, synth


def _sse(theta, r0, x, y):
    return float(((y - numerics.predict(theta[None, :], r0, x[None, :])[0]) ** 2).sum())


def _paper_grid_search(c, y, r0):
    """The paper's A.5 procedure: grid over A and C_mid, B by curve_fit, keep the smallest SSE."""
    best = (np.inf, None)
    for A in np.arange(0.60, 0.70 + 1e-9, 0.005):
        for cm in np.geomspace(4000, 30000, 30):
            f = lambda cc, B: r0 + (A - r0) / (1 + (cm / cc) ** B)  # noqa: E731
            try:
                (B,), _ = curve_fit(f, c, y, p0=[1.5], bounds=(0.05, 20), maxfev=200)
            except RuntimeError:
                continue
            sse = float(((y - f(c, B)) ** 2).sum())
            if sse < best[0]:
                best = (sse, (A, cm, B))
    return best


def test_global_fit_at_least_as_good_as_the_papers_grid_search():
    c, y = synth(n=40, noise=0.015, seed=3, with_zero=False)
    r0 = PAPER_8B["R0"]
    x = np.log(c)
    theta, sse, ok = numerics.fit_global(x, y, r0, numerics.Bounds.for_data(x))
    paper_sse, _ = _paper_grid_search(c, y, r0)
    assert ok
    assert sse <= paper_sse * (1 + 1e-9)
    assert abs(sse - _sse(theta, r0, x, y)) < 1e-12


def test_noiseless_data_recovers_parameters_exactly():
    c, y = synth(n=30, noise=0.0, with_zero=False)
    x = np.log(c)
    theta, sse, ok = numerics.fit_global(x, y, PAPER_8B["R0"], numerics.Bounds.for_data(x))
    assert ok and sse < 1e-20
    assert abs(theta[0] - PAPER_8B["A"]) < 1e-7
    assert abs(np.exp(theta[1]) - PAPER_8B["C_mid"]) / PAPER_8B["C_mid"] < 1e-6
    assert abs(np.exp(theta[2]) - PAPER_8B["B"]) < 1e-6


def test_global_fit_beats_every_multistart_curve_fit_on_a_two_phase_curve():
    # Real curves often rise fast, then slowly (two phases): no single sigmoid fits, and the
    # least-squares surface is awkward. The grid + refinement must match the best of many starts.
    r0 = 0.05
    c = np.geomspace(0.1, 1000, 50)
    y = r0 + 0.35 / (1 + (1 / c) ** 4) + 0.35 / (1 + (100 / c) ** 1.5) + np.random.default_rng(0).normal(0, 0.005, 50)
    f = lambda cc, A, cm, B: r0 + (A - r0) / (1 + (cm / cc) ** B)  # noqa: E731
    best = np.inf
    for p0 in [(1, 1, 1), (0.4, 1, 4), (0.8, 100, 1.5), (0.75, 30, 0.5), (0.6, 3, 2), (0.5, 0.5, 8)]:
        p, _ = curve_fit(f, c, y, p0=p0, bounds=([0, 1e-6, 0.05], [1, 1e6, 20]), maxfev=5000)
        best = min(best, float(((y - f(c, *p)) ** 2).sum()))
    x = np.log(c)
    _, sse, ok = numerics.fit_global(x, y, r0, numerics.Bounds.for_data(x))
    assert ok and sse <= best * (1 + 1e-9)


def test_grid_search_handles_many_replicates_at_once():
    c, y = synth(n=25, noise=0.01, with_zero=False)
    x = np.log(c)
    Y = np.stack([y, y[::-1] * 0 + y.mean() + 0.3 * (y - y.mean())])
    theta, sse = numerics.grid_search(x, Y, PAPER_8B["R0"], numerics.Bounds.for_data(x), 30, 20)
    assert theta.shape == (2, 1, 3) and sse.shape == (2, 1)
    for k in range(2):
        assert abs(_sse(theta[k, 0], PAPER_8B["R0"], x, Y[k]) - sse[k, 0]) < 1e-9


def test_fixed_a_is_held():
    c, y = synth(n=30, noise=0.01, with_zero=False)
    x = np.log(c)
    theta, _, _ = numerics.fit_global(x, y, PAPER_8B["R0"], numerics.Bounds.for_data(x), fixed_a=0.7)
    assert theta[0] == 0.7


def test_block_length_rule():
    assert numerics.block_length(0.0, 100) == 1
    assert numerics.block_length(-0.3, 100) == 1
    lens = [numerics.block_length(r, 200) for r in (0.2, 0.5, 0.8)]
    assert lens == sorted(lens) and lens[-1] > lens[0] >= 1
    assert numerics.block_length(0.99, 12) <= 4  # capped at n // 3


def test_block_resample_keeps_contiguous_blocks():
    resid = np.arange(20.0)
    out = numerics.block_resample(resid, 20, 5, 50, np.random.default_rng(0))
    assert out.shape == (50, 20)
    blocks = out.reshape(50, 4, 5)
    assert np.all(np.diff(blocks, axis=2) == 1)  # each block is a run of consecutive residuals


def test_lag1_autocorr():
    rng = np.random.default_rng(0)
    e = rng.normal(size=4000)
    ar = np.zeros_like(e)
    for i in range(1, len(e)):
        ar[i] = 0.7 * ar[i - 1] + e[i]
    assert abs(numerics.lag1_autocorr(e)) < 0.05
    assert abs(numerics.lag1_autocorr(ar) - 0.7) < 0.05


def test_predict_matches_eq1():
    c = np.array([100.0, 10920.0, 1e6])
    theta = np.array([PAPER_8B["A"], np.log(PAPER_8B["C_mid"]), np.log(PAPER_8B["B"])])
    got = numerics.predict(theta[None, :], PAPER_8B["R0"], np.log(c)[None, :])[0]
    assert np.allclose(got, sigmoid(c, **PAPER_8B))
