"""The stretched exponential R(C) = R0 + (P - R0) * (1 - exp(-(C/tau)^k)): a second saturating family.

    theta = fit_stretched(compute, score, r0)        # (P, ln tau, k), least squares, R0 fixed
    stretched_curve(c, r0, *theta)
    sse = profile_sse(compute, score, r0, plateaus)  # the least SSE at each fixed plateau P

The sigmoid approaches its ceiling A as a power law, (C_mid/C)^B; this family approaches P
exponentially in (C/tau)^k, as the gains of a small model mastering a narrow task stop. Same
number of parameters (R0 is measured), so their fits compare directly. ceiling.py uses its
profile to ask whether a curve pins its ceiling. As a forecast candidate it was measured and
rejected (forecast.py's list of variants); fit_stretched is the free fit that measurement used.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares

K_BOUNDS = (0.2, 5.0)  # the stretch exponent k: below 0.2 the curve is a near-step in ln C, above 5 a near-step in C


def stretched_curve(c: np.ndarray, r0: float, plateau: float, log_tau: float, k: float) -> np.ndarray:
    c = np.maximum(np.asarray(c, dtype=float), 1e-300)
    with np.errstate(over="ignore"):
        return r0 + (plateau - r0) * -np.expm1(-np.exp(k * (np.log(c) - log_tau)))


def _bounds(c: np.ndarray) -> tuple[list[float], list[float]]:
    return [math.log(c.min()) - 5, K_BOUNDS[0]], [math.log(c.max()) + 8, K_BOUNDS[1]]


def _starts(c: np.ndarray) -> list[list[float]]:
    return [[math.log(t), k] for t in np.quantile(c, [0.25, 0.5, 1.0]) for k in (0.7, 1.0, 1.5)]


def fit_stretched(c: np.ndarray, y: np.ndarray, r0: float) -> tuple[float, float, float]:
    """(P, ln tau, k) by least squares with R0 fixed; c > 0. P is searched in [0, 1]."""
    c, y = np.asarray(c, dtype=float), np.asarray(y, dtype=float)
    (lt_lo, k_lo), (lt_hi, k_hi) = _bounds(c)
    best = None
    for p0 in {float(np.clip(y[-1], 0.0, 1.0)), float(np.clip(y[-1] + (y[-1] - r0) * 0.5, 0.0, 1.0))}:
        for lt0, k0 in _starts(c):
            r = least_squares(lambda t: stretched_curve(c, r0, *t) - y, [p0, lt0, k0],
                              bounds=([0.0, lt_lo, k_lo], [1.0, lt_hi, k_hi]))
            if best is None or r.cost < best.cost:
                best = r
    return float(best.x[0]), float(best.x[1]), float(best.x[2])


def profile_sse(c: np.ndarray, y: np.ndarray, r0: float, plateaus: np.ndarray) -> np.ndarray:
    """The least SSE over (tau, k) at each plateau of `plateaus` (ascending). Each plateau starts
    from the previous one's optimum and from a neutral guess; the first from several (the surface
    has shallow valleys)."""
    c, y = np.asarray(c, dtype=float), np.asarray(y, dtype=float)
    lo, hi = _bounds(c)
    neutral = [math.log(float(np.median(c))), 1.0]
    out, prev = np.empty(len(plateaus)), None
    for i, plateau in enumerate(plateaus):
        best = None
        for x0 in (_starts(c) if prev is None else [prev, neutral]):
            r = least_squares(lambda t: stretched_curve(c, r0, float(plateau), *t) - y, x0, bounds=(lo, hi))
            if best is None or r.cost < best.cost:
                best = r
        out[i], prev = 2.0 * float(best.cost), list(np.clip(best.x, lo, hi))
    return out
