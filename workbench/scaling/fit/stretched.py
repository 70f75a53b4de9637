"""The stretched exponential R(C) = R0 + (P - R0) * (1 - exp(-(C/tau)^k)): a second saturating family.

    theta = fit_stretched(compute, score, r0)        # (P, ln tau, k), least squares, R0 fixed
    stretched_curve(c, r0, *theta)
    prof = profile(compute, score, r0, plateaus)     # at each fixed plateau P: the least SSE and its (ln tau, k)
    prof.sse; prof.curves(c)                         # profile_sse(...) is prof.sse

The sigmoid approaches its ceiling A as a power law, (C_mid/C)^B; this family approaches P
exponentially in (C/tau)^k, as the gains of a small model mastering a narrow task stop. Same
number of parameters (R0 is measured), so their fits compare directly. ceiling.py uses its
profile to ask whether a curve pins its ceiling, and families.py to bound a forecast past the data
when the two families fit alike. As a forecast candidate of the blend it was measured and
rejected (forecast/blend.py's list of variants); fit_stretched is the free fit that measurement used.

The profile is computed like the sigmoid's fit (numerics.py): for a fixed shape (tau, k) the model
is linear in P - R0, so a (ln tau, k) grid scores every plateau at once; each plateau's best grid
shape is then polished by a Levenberg-Marquardt loop run on all plateaus together. Measured
against one scipy least_squares per plateau (several starts) on the demo curves and synthetic
sigmoids: the same least SSE (within 0.1%, sometimes lower), 30x faster (~15 ms for 40 points).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

K_BOUNDS = (0.2, 5.0)  # the stretch exponent k: below 0.2 the curve is a near-step in ln C, above 5 a near-step in C
GRID = (100, 30)  # (ln tau, k) grid of the profile's starts; k is spaced evenly in ln k
LM_ITER = 50  # Levenberg-Marquardt steps of the profile's polish


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


def _shape(lc: np.ndarray, shapes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(u, g) for shapes (m, 2) of (ln tau, k) at ln C = lc: u = (C/tau)^k, g = 1 - exp(-u), (m, len(lc))."""
    with np.errstate(over="ignore", under="ignore"):
        u = np.exp(np.clip(shapes[:, 1:2] * (lc[None, :] - shapes[:, 0:1]), -700.0, 50.0))
        return u, -np.expm1(-u)


@dataclass(frozen=True)
class Profile:
    """The profile of the plateau: at each plateau P of `plateaus`, the least SSE over (tau, k)
    (`sse`) and the shape that attains it (`shapes`, (ln tau, k) per plateau), on n points."""

    r0: float
    plateaus: np.ndarray
    sse: np.ndarray
    shapes: np.ndarray
    n: int

    def curves(self, c: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        """(plateaus, len(c)) profile curves at compute c (rows `keep` only, when given)."""
        rows = slice(None) if keep is None else keep
        _, g = _shape(np.log(np.maximum(np.asarray(c, dtype=float), 1e-300)), self.shapes[rows])
        return self.r0 + (self.plateaus[rows] - self.r0)[:, None] * g


def profile(c: np.ndarray, y: np.ndarray, r0: float, plateaus: np.ndarray) -> Profile:
    """The plateau's profile on points (c > 0, y): each plateau's best shape on the (ln tau, k) grid
    (closed form in P), polished by Levenberg-Marquardt on all plateaus at once (bounds by clipping)."""
    c, y, plateaus = np.asarray(c, dtype=float), np.asarray(y, dtype=float), np.asarray(plateaus, dtype=float)
    lc, r, a = np.log(c), y - r0, plateaus - r0
    lo, hi = (np.array(b) for b in _bounds(c))
    grid = np.stack([g.ravel() for g in np.meshgrid(np.linspace(lo[0], hi[0], GRID[0]),
                                                    np.geomspace(lo[1], hi[1], GRID[1]), indexing="ij")], 1)
    _, g = _shape(lc, grid)
    sse_grid = r @ r - 2 * a[None, :] * (g @ r)[:, None] + a[None, :] ** 2 * np.einsum("ij,ij->i", g, g)[:, None]
    th = grid[sse_grid.argmin(0)]

    def resid(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        u, g = _shape(lc, t)
        return a[:, None] * g - r[None, :], u

    e, u = resid(th)
    s, lam = np.einsum("ij,ij->i", e, e), np.full(len(a), 1e-3)
    for _ in range(LM_ITER):
        w = a[:, None] * u * np.exp(-u)  # d(model)/du; u = (C/tau)^k
        J0, J1 = -th[:, 1:2] * w, (lc[None, :] - th[:, 0:1]) * w  # d/d(ln tau), d/dk
        A00, A01, A11 = (J0 * J0).sum(1), (J0 * J1).sum(1), (J1 * J1).sum(1)
        b0, b1 = -(J0 * e).sum(1), -(J1 * e).sum(1)
        M00, M11 = A00 * (1 + lam) + 1e-12, A11 * (1 + lam) + 1e-12
        det = M00 * M11 - A01 * A01
        step = np.stack([(M11 * b0 - A01 * b1) / det, (M00 * b1 - A01 * b0) / det], 1)
        new = np.clip(th + np.nan_to_num(step), lo, hi)
        e2, u2 = resid(new)
        s2 = np.einsum("ij,ij->i", e2, e2)
        ok = s2 < s
        th, e, u, s = np.where(ok[:, None], new, th), np.where(ok[:, None], e2, e), np.where(ok[:, None], u2, u), np.where(ok, s2, s)
        lam = np.where(ok, lam / 3, lam * 4)
    return Profile(float(r0), plateaus, s, th, len(y))


def profile_sse(c: np.ndarray, y: np.ndarray, r0: float, plateaus: np.ndarray) -> np.ndarray:
    """The least SSE over (tau, k) at each plateau of `plateaus` (see `profile`)."""
    return profile(c, y, r0, plateaus).sse
