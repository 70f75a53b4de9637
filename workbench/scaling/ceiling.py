"""Does the curve pin its ceiling? The sigmoid's A checked against a second saturating family.

    check = ceiling_check(fit)          # a SigmoidFit (converged, rising)
    if check and check.family_dependent:
        print(check.line())             # "ceiling check: a stretched exponential fits as well ..."
    attach_ceiling_check(fit)           # the same, kept on the fit (fit.json, summary, chart, MLflow)

The sigmoid R0 + (A - R0) / (1 + (C_mid/C)^B) approaches A as a power law, (C_mid/C)^B. A curve
whose gains stop faster (a small model mastering a synthetic task: the CPU demo's 3-digit sums) is
fitted just as well by a stretched exponential R0 + (P - R0) * (1 - exp(-(C/tau)^k)), same fixed
R0, three parameters too, whose plateau P sits lower. Then the data do not choose the ceiling, and
the sigmoid's interval alone overstates what is known: on a demo run cut at 1,400 steps A = 0.563
[0.498, 0.700] while P = 0.475 [0.445, 0.550], and the same run taken to 2,800 steps levels off at
0.48 (benchmarks/bench_ceiling.py). Real runs that keep climbing slowly are fitted worse by the
stretched exponential, and the check stays silent there.

How: P's interval is its profile likelihood (every P on a 0.005 grid from just above R0 to 1,
whose best (tau, k) fit is
within the F-test threshold SSE_min * (1 + F(level; 1, n - 3) / (n - 3)) of the best); "fits as
well" means the stretched exponential's SSE is within that same threshold of the sigmoid's. When
it does and P's interval reaches outside A's by more than the paper's A margin (0.02,
compare.A_MARGIN: closer ceilings count as one), the check is family-dependent and
`ceiling_range` is the union of both intervals: the ceilings the data allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import f as f_dist

from workbench.scaling.compare import A_MARGIN
from workbench.scaling.result import SigmoidFit
from workbench.scaling.stretched import profile_sse

GRID_STEP = 0.005  # the plateau grid of the profile likelihood
MIN_POINTS = 6  # fewer fitted points than this: no check (three parameters, and a threshold to set)


@dataclass(frozen=True)
class CeilingCheck:
    """The sigmoid's A beside the stretched exponential's plateau P on the same points."""

    A: float
    A_ci: tuple[float, float]
    P: float
    P_ci: tuple[float, float]
    rmse_sigmoid: float
    rmse_stretched: float
    fits_as_well: bool  # the stretched exponential's SSE is within the F-test threshold of the sigmoid's
    family_dependent: bool  # it fits as well and its plateau's interval reaches past A's by more than A_MARGIN
    ceiling_range: tuple[float, float]  # what the data allow: A's interval, widened by P's when family-dependent

    def line(self) -> str:
        head = (f"ceiling check: a stretched exponential (RMSE {self.rmse_stretched:.4f}, sigmoid {self.rmse_sigmoid:.4f}) "
                f"plateaus at P = {self.P:.3f} [{self.P_ci[0]:.3f}, {self.P_ci[1]:.3f}]")
        if self.family_dependent:
            return (head + f", as good a fit: this curve does not pin its ceiling, which may be anywhere in "
                    f"[{self.ceiling_range[0]:.3f}, {self.ceiling_range[1]:.3f}] (run longer to tell)")
        if self.fits_as_well:
            return head + ", as good a fit, and inside A's interval: the ceiling does not depend on the curve family"
        return head + ", a worse fit: the sigmoid's A stands"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the printed line (SigmoidFit.ceiling_check holds this)."""
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}
        return d | {"line": self.line()}


def profile_threshold(sse: float, n: int, level: float = 0.95) -> float:
    """The largest SSE a profile-likelihood interval admits, from the least SSE of n points (3 parameters)."""
    return sse * (1.0 + float(f_dist.ppf(level, 1, n - 3)) / (n - 3))


def ceiling_check(fit: SigmoidFit) -> CeilingCheck | None:
    """The check for a converged, rising sigmoid fit of one run with A's interval (None otherwise,
    or with fewer than MIN_POINTS fitted points)."""
    if not fit.converged or fit.no_gain or fit.fixed_A or not fit.A > fit.R0 or len(fit.run_names) != 1:
        return None
    if not all(math.isfinite(v) for v in fit.A_ci):  # fitted without bootstrap: no interval to check against
        return None
    used = np.asarray(fit.used, bool) & (np.asarray(fit.compute, float) > 0)
    c, y = np.asarray(fit.compute, float)[used], np.asarray(fit.score, float)[used]
    n = len(c)
    if n < MIN_POINTS:
        return None
    grid = np.round(np.arange(math.floor(fit.R0 / GRID_STEP + 1) * GRID_STEP, 1.0 + 1e-9, GRID_STEP), 6)
    sse = profile_sse(c, y, fit.R0, grid)
    inside = grid[sse <= profile_threshold(float(sse.min()), n, fit.level)]
    p_ci = (float(inside.min()), float(inside.max()))
    sse_sigmoid = n * fit.rmse**2
    fits_as_well = float(sse.min()) <= profile_threshold(sse_sigmoid, n, fit.level)
    a_lo, a_hi = fit.A_ci
    family_dependent = fits_as_well and (p_ci[0] < a_lo - A_MARGIN or p_ci[1] > a_hi + A_MARGIN)
    lo, hi = (min(a_lo, p_ci[0]), max(a_hi, p_ci[1])) if family_dependent else (a_lo, a_hi)
    return CeilingCheck(
        A=fit.A, A_ci=(a_lo, a_hi), P=float(grid[sse.argmin()]), P_ci=p_ci, rmse_sigmoid=fit.rmse,
        rmse_stretched=math.sqrt(float(sse.min()) / n), fits_as_well=fits_as_well,
        family_dependent=family_dependent, ceiling_range=(float(lo), float(hi)),
    )


def attach_ceiling_check(fit: SigmoidFit) -> CeilingCheck | None:
    """Run the check and keep it on the fit (`fit.ceiling_check`: what fit.json, the summary, the
    chart and MLflow read), as the run report and `workbench fit` do. The check is optional, so a
    numerical failure in it leaves the fit unchecked, with a warning, and never loses the fit."""
    try:
        check = ceiling_check(fit)
    except (ValueError, ArithmeticError) as e:
        check = None
        fit.warnings = fit.warnings + [f"ceiling check skipped: {type(e).__name__}: {e}"]
    fit.ceiling_check = check.to_dict() if check else None
    return check
