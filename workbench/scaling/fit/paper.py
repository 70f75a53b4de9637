"""The paper's own fitting procedure (ScaleRL appendix A.5), kept by name for fidelity.

    fit = fit_sigmoid(compute, score, method="paper")

The paper grid-searches A over steps of 0.005 and C_mid over 100 values, fits B for each pair
and keeps the pair with the smallest sum of squared residuals; the sigmoid is always kept (no
"no gain" fallback), and its forecast is the sigmoid alone. Its grids suit the paper's runs
(A in [0.45, 0.80], C_mid in [100, 40000] GPU-hours); a general tool derives them from the data:
A runs from R0 to 1 in steps of 0.005 (down to 0 when the latest scores sit below R0), and C_mid
over 100 values log-spaced from the first fitted compute to 10x the last. B is searched on a
grid in [B_MIN, B_MAX] and the best (A, C_mid, B) is polished by a 1-D search on B, which is
what `curve_fit` on B does. For a fixed (C_mid, B) the squared error is a quadratic in A, so the
whole A x C_mid x B grid costs one matrix product per B row.

Intervals: the residual bootstrap of `numerics.bootstrap`, started at the paper's estimate.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit

from workbench.scaling.fit import numerics

A_STEP = 0.005  # the paper's A grid step
N_CMID = 100  # the paper's number of C_mid values
CMID_SPAN = 10.0  # C_mid searched up to this factor above the last fitted compute
N_B = 80


def grids(x: np.ndarray, y: np.ndarray, r0: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The data-derived A, ln C_mid and ln B grids."""
    k = max(3, len(y) // 4)
    rising = float(np.mean(y[np.argsort(x)][-k:])) >= r0
    a = np.arange(r0, 1.0 + 1e-12, A_STEP) if rising else np.arange(r0, -1e-12, -A_STEP)
    m = np.linspace(float(x.min()), float(x.max()) + math.log(CMID_SPAN), N_CMID)
    lb = np.linspace(math.log(numerics.B_MIN), math.log(numerics.B_MAX), N_B)
    return a, m, lb


def fit_paper(x: np.ndarray, y: np.ndarray, r0: float) -> tuple[np.ndarray, float]:
    """The paper's least-squares estimate theta = (A, ln C_mid, ln B) and its SSE, on x = ln C."""
    a, m, lb = grids(x, y, r0)
    yd = y - r0
    d = a - r0
    best = (math.inf, 0, 0, 0)
    for j, lbj in enumerate(lb):
        s = expit(math.exp(lbj) * (x[None, :] - m[:, None]))  # (M, n)
        t, ss = s @ yd, np.einsum("mn,mn->m", s, s)
        sse = float(yd @ yd) - 2 * d[:, None] * t[None, :] + d[:, None] ** 2 * ss[None, :]  # (A, M)
        i = int(np.argmin(sse))
        if sse.flat[i] < best[0]:
            ia, im = divmod(i, len(m))
            best = (float(sse.flat[i]), ia, im, j)
    _, ia, im, j = best
    A, M = float(a[ia]), float(m[im])

    def sse_b(lbv: float) -> float:
        return float(((y - numerics.predict(np.array([[A, M, lbv]]), r0, x[None, :])[0]) ** 2).sum())

    lo, hi = lb[max(j - 1, 0)], lb[min(j + 1, len(lb) - 1)]
    res = minimize_scalar(sse_b, bounds=(lo, hi), method="bounded")
    lbest = float(res.x) if res.fun <= sse_b(lb[j]) else float(lb[j])
    theta = np.array([A, M, lbest])
    return theta, sse_b(lbest)


def bounds_for(x: np.ndarray, r0: float) -> numerics.Bounds:
    """Bootstrap bounds matching the paper's grids (C_mid up to CMID_SPAN x the last compute)."""
    b = numerics.Bounds.for_data(x)
    return numerics.Bounds(b.a_lo, b.a_hi, float(x.min()), float(x.max()) + math.log(CMID_SPAN))
