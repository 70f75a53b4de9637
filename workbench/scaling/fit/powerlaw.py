"""Power-law fit R = A - D / C^B, kept to show why ScaleRL fits a sigmoid instead.

On a curve that saturates, a power law fitted on a low/middle compute window keeps climbing: its
asymptote runs to the cap A = 1 (the paper's appendix A.4: the 8B run fitted on 1.5k-50k GPU-hours
gives A = 1.0 while the data saturate near 0.65). Use it for comparison, not for forecasts.

    pl = fit_power_law(compute, score, fit_from=1500)
    pl.A, pl.B, pl.D, pl.predict(1e5)

Method: for fixed B the model is linear in (A, D), so A and D are solved by least squares (A
clipped to [0, 1], like a pass rate) on a B grid, and the best B is then polished. Compute is
scaled by its largest value internally so FLOP-sized units stay well conditioned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from workbench.errors import UserError
from workbench.scaling.data import check_curve

B_GRID = np.geomspace(1e-3, 10.0, 400)


@dataclass(frozen=True)
class PowerLawFit:
    A: float
    B: float
    D: float  # in the caller's compute units: R = A - D / C^B
    rmse: float
    r2: float
    n: int

    def predict(self, c: Any) -> Any:
        arr = np.asarray(c, dtype=float)
        if np.any(arr <= 0):
            raise UserError("a power law is defined for compute > 0 only")
        out = self.A - self.D * arr ** (-self.B)
        return float(out) if np.ndim(c) == 0 else out

    def to_dict(self) -> dict[str, float]:
        return {"A": self.A, "B": self.B, "D": self.D, "rmse": self.rmse, "r2": self.r2, "n": self.n}


def _profile(u: np.ndarray, y: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best (A, D) and SSE for each exponent in b; u = C / C_max. Vectorised over b."""
    P = u[None, :] ** (-b[:, None])  # (nb, n)
    n = len(y)
    sp, spp, sy, spy = P.sum(1), (P * P).sum(1), y.sum(), P @ y
    det = n * spp - sp * sp
    with np.errstate(divide="ignore", invalid="ignore"):
        A = (spp * sy - sp * spy) / det
        D = (sp * sy - n * spy) / det  # y = A - D P
    A_c = np.clip(np.nan_to_num(A, nan=1.0), 0.0, 1.0)
    # with A clipped, D is the 1-D least squares of (A - y) on P
    D_c = np.where(A_c == A, D, ((A_c[:, None] - y[None, :]) * P).sum(1) / spp)
    sse = ((y[None, :] - A_c[:, None] + D_c[:, None] * P) ** 2).sum(1)
    return A_c, D_c, sse


def fit_power_law(compute: Any, score: Any, *, fit_from: float | None = None, fit_until: float | None = None) -> PowerLawFit:
    """Least-squares power law R = A - D / C^B on the points with fit_from <= C <= fit_until (C > 0)."""
    c, s = check_curve(compute, score)
    keep = c > 0
    if fit_from is not None:
        keep &= c >= fit_from
    if fit_until is not None:
        keep &= c <= fit_until
    if keep.sum() < 3:
        raise UserError(f"only {int(keep.sum())} point(s) in the fit window; a power law needs at least 3")
    c, y = c[keep], s[keep]
    if np.ptp(y) == 0:
        raise UserError("scores in the fit window are constant: nothing to fit")
    scale = c.max()
    u = c / scale
    _, _, sse = _profile(u, y, B_GRID)
    i = int(np.argmin(sse))
    lo, hi = math.log(B_GRID[max(i - 1, 0)]), math.log(B_GRID[min(i + 1, len(B_GRID) - 1)])
    res = minimize_scalar(lambda lb: _profile(u, y, np.array([math.exp(lb)]))[2][0], bounds=(lo, hi), method="bounded")
    b = math.exp(res.x) if res.fun <= sse[i] else float(B_GRID[i])
    A, D, sse_b = (v[0] for v in _profile(u, y, np.array([b])))
    sst = float(((y - y.mean()) ** 2).sum())
    return PowerLawFit(A=float(A), B=b, D=float(D) * scale**b, rmse=math.sqrt(sse_b / len(y)), r2=1 - sse_b / sst, n=int(len(y)))
