"""Does the curve pin its ceiling? The sigmoid's A checked against a second saturating family.

    check = ceiling_check(fit)          # a SigmoidFit (rising, one run, with A's interval)
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

How (families.py, which SigmoidFit.families runs on the fitted points): P's interval is its
profile likelihood (every P on a 0.005 grid from just above R0 to 1, whose best (tau, k) fit is
within the F-test threshold SSE_min * (1 + F(level; 1, n - 3) / (n - 3)) of the best); "fits as
well" means the stretched exponential's SSE is within that same threshold of the sigmoid's. When
it does and P's interval reaches outside A's by more than the paper's A margin (0.02,
families.A_MARGIN: closer ceilings count as one), the check is family-dependent and
`ceiling_range` is the union of both intervals: the ceilings the data allow. Then the forecast
past the data spans both families too (SigmoidFit.band, scaling_gain). A fit whose A did not
converge is checked too: a stretched exponential that fits as well is what it has to go on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workbench.scaling.forecast.families import A_MARGIN
from workbench.scaling.fit.result import SigmoidFit


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
    settle_factor: float | None = None  # family-dependent: the compute multiple where the families' forecasts part (None: not by 1000x)

    def line(self) -> str:
        head = (f"ceiling check: a stretched exponential (RMSE {self.rmse_stretched:.4f}, sigmoid {self.rmse_sigmoid:.4f}) "
                f"plateaus at P = {self.P:.3f} [{self.P_ci[0]:.3f}, {self.P_ci[1]:.3f}]")
        if self.family_dependent:
            return (head + f", as good a fit: this curve does not pin its ceiling, which may be anywhere in "
                    f"[{self.ceiling_range[0]:.3f}, {self.ceiling_range[1]:.3f}] ("
                    + (f"run to {self.settle_factor:.2g}x the compute seen to tell" if self.settle_factor else "run longer to tell") + ")")
        if self.fits_as_well:
            return head + ", as good a fit, and inside A's interval: the ceiling does not depend on the curve family"
        return head + ", a worse fit: the sigmoid's A stands"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the printed line (SigmoidFit.ceiling_check holds this)."""
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}
        return d | {"line": self.line()}


def ceiling_check(fit: SigmoidFit) -> CeilingCheck | None:
    """The check for a rising sigmoid fit of one run with A's interval (None otherwise, or with
    fewer than families.MIN_POINTS fitted points, or when the second family failed numerically)."""
    if not all(math.isfinite(v) for v in fit.A_ci):  # fitted without bootstrap: no interval to check against
        return None
    fam = fit.families
    if fam is None:
        return None
    a_lo, a_hi = fit.A_ci
    family_dependent = fam.disagrees(fit.A_ci)
    lo, hi = (min(a_lo, fam.P_ci[0]), max(a_hi, fam.P_ci[1])) if family_dependent else (a_lo, a_hi)
    return CeilingCheck(
        A=fit.A, A_ci=(a_lo, a_hi), P=fam.P, P_ci=fam.P_ci, rmse_sigmoid=fam.rmse_sigmoid, rmse_stretched=fam.rmse_stretched,
        fits_as_well=fam.fits_as_well, family_dependent=family_dependent, ceiling_range=(float(lo), float(hi)),
        settle_factor=fam.settle_factor(fit.predict) if family_dependent else None,
    )


def attach_ceiling_check(fit: SigmoidFit) -> CeilingCheck | None:
    """Run the check and keep it on the fit (`fit.ceiling_check`: what fit.json, the summary, the
    chart and MLflow read), as the run report and `workbench fit` do. A numerical failure of the
    second family leaves the fit unchecked, with a warning (SigmoidFit.families), never loses it."""
    check = ceiling_check(fit)
    fit.ceiling_check = check.to_dict() if check else None
    return check
