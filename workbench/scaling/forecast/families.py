"""Forecasts past the data over both saturating families, when the data cannot tell them apart.

    fam = Families.of_points(c, y, r0, sse_sigmoid=..., origin=..., level=0.95)   # SigmoidFit.families does this
    fam.fits_as_well                  # the stretched exponential fits as well as the sigmoid (F test)
    fam.band(c, 0.95, "prediction")   # what the stretched exponential allows at compute c
    fam.apart(c, sigmoid_values)      # where the two families' forecasts part by more than the noise

A curve that has bent but not levelled off is fitted as well by the sigmoid (a power-law approach
to A) as by a stretched exponential (an exponential approach to a plateau P, stretched.py). Inside
the data they agree; far past it they part: on the CPU demo the sigmoid forecasts 0.65-0.72 at
10x the compute while the task's ceiling is 0.512 and the stretched exponential's plateau interval
holds it. The sigmoid's bootstrap band holds only the sigmoid's uncertainty, and the blend's
weights (forecast.py) were learned inside the data, where the families agree. So where the
stretched exponential fits as well, SigmoidFit.band joins its band to the sigmoid's past the last
fitted compute (the union: what either family allows), and scaling_gain joins the gain intervals.

How: the plateau's profile likelihood (stretched.profile on a GRID_STEP grid of plateaus from just
above R0 to 1). A plateau is admitted when its least SSE is within the F-test threshold
SSE_min * (1 + F(level; 1, n - 3) / (n - 3)) of the best (profile_threshold); "fits as well" means
the stretched exponential's least SSE is within that threshold of the sigmoid's. The band at c is
the range of the admitted plateaus' profile curves there (each with its best (tau, k)): far past
the data it is the plateau's profile interval; a prediction band widens it in quadrature by z times
the stretched exponential's residual sd, as the sigmoid's is by its sigma. ceiling.py reports the
same profile as the run's ceiling check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.stats import f as f_dist
from scipy.stats import norm

from workbench.scaling.fit.stretched import Profile, profile

GRID_STEP = 0.005  # the plateau grid of the profile likelihood
A_MARGIN = 0.02  # the paper's margin: ceilings (A values) closer than this count as one (compare.py ranks by it)
MIN_POINTS = 6  # fewer fitted points than this: no second family (three parameters, and a threshold to set)
APART_SDS = 2.0  # the families are told apart where their forecasts differ by this many point-noise sds
FACTORS = np.geomspace(1.1, 1000.0, 200)  # compute multiples searched for where the families part


def profile_threshold(sse: float, n: int, level: float = 0.95) -> float:
    """The largest SSE a profile-likelihood interval admits, from the least SSE of n points (3 parameters)."""
    return sse * (1.0 + float(f_dist.ppf(level, 1, n - 3)) / (n - 3))


def plateau_grid(r0: float) -> np.ndarray:
    """The plateaus profiled: GRID_STEP apart from just above R0 to 1, without float noise."""
    return np.round(np.arange(math.floor(r0 / GRID_STEP + 1) * GRID_STEP, 1.0 + 1e-9, GRID_STEP), 6)


@dataclass(frozen=True)
class Families:
    """The stretched exponential beside the sigmoid on one fit's points (c > 0)."""

    origin: float  # the last fitted compute: past it the forecast leaves the data
    level: float
    rmse_sigmoid: float
    rmse_stretched: float
    fits_as_well: bool  # the stretched exponential's SSE is within the F-test threshold of the sigmoid's
    P: float  # the stretched exponential's best plateau
    P_ci: tuple[float, float]  # the plateau's profile interval at `level`
    sigma: float  # the stretched exponential's residual sd, sqrt(SSE / (n - 3))
    prof: Profile = field(repr=False)

    @classmethod
    def of_points(cls, c: np.ndarray, y: np.ndarray, r0: float, *, sse_sigmoid: float, origin: float,
                  level: float = 0.95) -> "Families | None":
        """The two families on the fitted points (c > 0, y); None with fewer than MIN_POINTS."""
        n = len(c)
        if n < MIN_POINTS:
            return None
        prof = profile(c, y, r0, plateau_grid(r0))
        best = float(prof.sse.min())
        fits = best <= profile_threshold(sse_sigmoid, n, level)
        # the plateaus admitted beside the best fit of either family (of its own, for a worse fit)
        inside = prof.plateaus[prof.sse <= profile_threshold(min(best, sse_sigmoid) if fits else best, n, level)]
        return cls(origin=float(origin), level=float(level), rmse_sigmoid=math.sqrt(sse_sigmoid / n),
                   rmse_stretched=math.sqrt(best / n), fits_as_well=fits,
                   P=float(prof.plateaus[prof.sse.argmin()]), P_ci=(float(inside.min()), float(inside.max())),
                   sigma=math.sqrt(best / max(n - 3, 1)), prof=prof)

    def disagrees(self, a_ci: tuple[float, float]) -> bool:
        """The families disagree on the ceiling: the stretched exponential fits as well and its
        plateau's interval reaches past the sigmoid's A interval `a_ci` by more than A_MARGIN."""
        return self.fits_as_well and (self.P_ci[0] < a_ci[0] - A_MARGIN or self.P_ci[1] > a_ci[1] + A_MARGIN)

    def line(self) -> str:
        """What SigmoidFit.forecast_used adds when the families disagree."""
        return (f"past the data the band also spans a stretched exponential that fits as well (RMSE {self.rmse_stretched:.4f}, "
                f"sigmoid {self.rmse_sigmoid:.4f}; plateau {self.P_ci[0]:.3f}-{self.P_ci[1]:.3f})")

    def _admitted(self, level: float) -> np.ndarray:
        """The plateaus whose SSE is within the threshold at `level` of the best fit of either family
        (and always the stretched exponential's best, so a low `level` never leaves none)."""
        best = min(float(self.prof.sse.min()), self.prof.n * self.rmse_sigmoid**2)
        keep = self.prof.sse <= profile_threshold(best, self.prof.n, level)
        keep[self.prof.sse.argmin()] = True
        return keep

    def best(self, c: np.ndarray) -> np.ndarray:
        """The stretched exponential's best fit at compute c."""
        return self.prof.curves(np.atleast_1d(c), keep=np.array([int(self.prof.sse.argmin())]))[0]

    def band(self, c: np.ndarray, level: float, kind: str = "mean") -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) at compute c: the range of the admitted plateaus' curves ("mean"), widened in
        quadrature by z x sigma around the best fit ("prediction": where a new point lies)."""
        curves = self.prof.curves(np.atleast_1d(c), keep=self._admitted(level))
        lo, hi = curves.min(0), curves.max(0)
        if kind == "prediction":
            mid, z = self.best(c), float(norm.ppf(0.5 + level / 2))
            lo = mid - np.hypot(np.maximum(mid - lo, 0.0), z * self.sigma)
            hi = mid + np.hypot(np.maximum(hi - mid, 0.0), z * self.sigma)
        return lo, hi

    def reach(self, target: float, level: float) -> tuple[float, float]:
        """(lo, hi) compute at which the admitted curves reach `target` (hi = inf: some never do)."""
        keep = self._admitted(level)
        a = self.prof.plateaus[keep] - self.prof.r0
        lt, k = self.prof.shapes[keep, 0], self.prof.shapes[keep, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = (target - self.prof.r0) / a  # the share of the plateau's rise needed
            c = np.exp(lt + np.log(-np.log1p(-frac)) / k)
        c = np.where(frac <= 0, 0.0, np.where(frac >= 1, np.inf, c))
        return float(np.nanmin(c)), float(np.nanmax(c))

    def apart(self, c: np.ndarray, sigmoid_values: np.ndarray) -> float | None:
        """The first compute of c (ascending) where the sigmoid's forecast (`sigmoid_values` at c) and
        the stretched exponential's best fit differ by APART_SDS point-noise sds: a few evaluations
        there tell the families apart. None when they stay closer over all of c."""
        gap = np.abs(np.asarray(sigmoid_values, dtype=float) - self.best(c))
        hit = np.nonzero(gap >= APART_SDS * self.sigma)[0]
        return float(np.atleast_1d(c)[hit[0]]) if len(hit) else None

    def settle_factor(self, sigmoid_predict: Callable[[np.ndarray], np.ndarray]) -> float | None:
        """The multiple of the last fitted compute where the families part (FACTORS; None: not by 1000x)."""
        c = self.origin * FACTORS
        at = self.apart(c, sigmoid_predict(c))
        return None if at is None else at / self.origin

    def reach_note(self, target: float, hi: float, sigmoid_predict: Callable[[np.ndarray], np.ndarray]) -> str:
        """compute_to_reach's word on a target some admitted curve never reaches (hi = inf); "" otherwise."""
        if math.isfinite(hi):
            return ""
        settle = self.settle_factor(sigmoid_predict)
        return (f"uncertain: a stretched exponential fits these points as well and levels off at {self.P_ci[0]:.3f}-{self.P_ci[1]:.3f}, "
                f"so {target:g} may never be reached" + (f"; run to {settle:.2g}x the compute seen to tell the families apart" if settle else ""))
