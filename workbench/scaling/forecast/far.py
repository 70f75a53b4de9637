"""What a forecast past the data may claim: SigmoidFit's part that looks past its last fitted compute.

    fit.families                        # the stretched exponential beside the sigmoid (families.py)
    far = fit.far_band(c, 0.95)         # what the band past the data spans beyond the fit's own (None: nothing)
    fit.horizon(c).line()               # "10x the compute seen; backtested only to 1.8x: ..."

Two things widen a forecast past the last fitted compute (`origin`), and only there:
- the families disagree on the ceiling (families.Families.disagrees: a stretched exponential fits
  as well, with a plateau outside A's interval): the band spans the stretched exponential's too;
- A is not identified (a rising fit that did not converge: A or C_mid on a search bound, the curve
  has not bent): where the curve levels off the data do not show, so the band's lower edge past
  the data stays at its level at the origin (the run may level off where it is).
SigmoidFit.band joins these to its own band, and decision.scaling_gain its gain interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from workbench.scaling.forecast.families import Families
from workbench.scaling.forecast.blend import Horizon


@dataclass(frozen=True)
class FarBand:
    """What the band past the data spans beyond the fit's own band, at the computes asked."""

    lo: np.ndarray  # the lower edge to join (nan: nothing to join there)
    hi: np.ndarray
    families: Families | None  # the second family, where the families disagree on the ceiling
    floor: float  # A not identified: the band's lower edge at the last fitted compute (nan otherwise)


class PastTheData:
    """Mixed into result.SigmoidFit: reads its fields (compute, score, used, A, A_ci, ...)."""

    compute: np.ndarray
    score: np.ndarray
    used: np.ndarray
    warnings: list[str]
    forecast: Any
    A: float
    A_ci: tuple[float, float]
    R0: float
    n: int
    rmse: float
    level: float
    method: str
    converged: bool
    no_gain: bool
    fixed_A: bool
    run_names: list[str]

    @property
    def origin(self) -> float:
        """The last fitted compute: past it the forecast leaves the data."""
        return float(self.compute[self.used].max())

    @cached_property
    def families(self) -> Families | None:
        """The stretched exponential beside the sigmoid on the fitted points (families.py): for a
        rising fit of one run (A not held fixed); None otherwise, or with too few points."""
        if self.no_gain or self.fixed_A or not self.A > self.R0 or len(self.run_names) != 1:
            return None
        c, y = self.compute[self.used], self.score[self.used]
        try:
            return Families.of_points(c, y, self.R0, sse_sigmoid=self.n * self.rmse**2, origin=float(c.max()), level=self.level)
        except (ValueError, ArithmeticError) as e:  # the second family is optional: a numerical failure never loses the fit
            self.warnings = self.warnings + [f"second curve family skipped: {type(e).__name__}: {e}"]
            return None

    @property
    def disagreeing(self) -> Families | None:
        """The second family when the families disagree on the ceiling (else None)."""
        fam = self.families
        return fam if fam is not None and fam.disagrees(self.A_ci) else None

    @property
    def unidentified(self) -> bool:
        """A rising fit whose A is not identified (it did not converge): where it levels off, the data do not show."""
        return not self.converged and not self.no_gain and not self.fixed_A and self.A > self.R0

    def far_band(self, c: Any, level: float, kind: str = "mean") -> FarBand | None:
        """What the band at computes c spans beyond the fit's own, past the data (module doc); None
        where nothing applies."""
        arr = np.atleast_1d(np.asarray(c, dtype=float))
        past = arr > self.origin * (1 + 1e-9)
        fam = self.disagreeing
        if not past.any() or (fam is None and not self.unidentified):
            return None
        lo, hi = np.full(arr.shape, math.nan), np.full(arr.shape, math.nan)
        if fam is not None:
            f_lo, f_hi = fam.band(arr, level, kind)
            lo, hi = np.where(past, f_lo, lo), np.where(past, f_hi, hi)
        floor = math.nan
        if self.unidentified:
            floor = float(self.band(self.origin, level, kind)[0][0])  # type: ignore[attr-defined]
            lo = np.where(past, np.fmin(lo, floor), lo)
        return FarBand(lo, hi, fam, floor)

    def horizon(self, c: float) -> Horizon:
        """How far past the data compute c is (a multiple of the last fitted compute), against how
        far the forecast's rolling-origin backtest reached (forecast.Horizon; none without a blend)."""
        return Horizon(float(c) / self.origin, self.forecast.reach if self.forecast is not None else math.nan, self.method)
