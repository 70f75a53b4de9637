"""The stretched exponential family: its fit recovers known parameters; its profile is least at the truth."""

from __future__ import annotations

import math

import numpy as np

from workbench.scaling.fit.stretched import fit_stretched, profile_sse, stretched_curve

TRUE = (0.49, math.log(600.0), 0.9)  # the CPU demo's shape: plateau 0.49, tau 600 steps, k 0.9
R0 = 0.148


def _curve(noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    c = np.arange(35.0, 2801.0, 35.0)
    y = stretched_curve(c, R0, *TRUE) + np.random.default_rng(seed).normal(0, noise, len(c))
    return c, y


def test_the_fit_recovers_plateau_scale_and_stretch():
    P, log_tau, k = fit_stretched(*_curve(0.0), R0)
    assert abs(P - TRUE[0]) < 1e-4 and abs(log_tau - TRUE[1]) < 1e-3 and abs(k - TRUE[2]) < 1e-3
    P, _, _ = fit_stretched(*_curve(0.01), R0)
    assert abs(P - TRUE[0]) < 0.02


def test_a_falling_curve_is_fitted_below_r0():
    c = np.linspace(10, 1000, 40)
    P, _, _ = fit_stretched(c, stretched_curve(c, 0.6, 0.2, math.log(200.0), 1.0), 0.6)
    assert abs(P - 0.2) < 1e-3


def test_the_profile_is_least_at_the_true_plateau():
    c, y = _curve(0.005, seed=1)
    grid = np.round(np.arange(0.40, 0.60, 0.005), 3)
    sse = profile_sse(c, y, R0, grid)
    assert abs(grid[sse.argmin()] - TRUE[0]) <= 0.01 and sse[0] > 10 * sse.min() and sse[-1] > 5 * sse.min()  # the upper side is shallower


def test_the_batched_profile_finds_what_a_least_squares_fit_per_plateau_finds():
    """profile() polishes all plateaus at once; scipy's least_squares from several starts per plateau is the reference."""
    from scipy.optimize import least_squares

    c, y = _curve(0.01, seed=2)
    grid = np.array([0.45, 0.48, 0.5, 0.55, 0.7])
    sse = profile_sse(c, y, R0, grid)
    for p, s in zip(grid, sse):
        best = min(least_squares(lambda t: stretched_curve(c, R0, p, *t) - y, [lt, k], bounds=([0, 0.2], [20, 5])).cost
                   for lt in (4.0, 6.0, 8.0) for k in (0.7, 1.0, 1.5))
        assert s <= 2 * best * (1 + 1e-3)
