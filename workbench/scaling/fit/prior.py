"""A prior on the sigmoid's shape from finished runs, and the MAP fit that uses it.

    prior = SigmoidPrior.from_fits([fit_a, fit_b, fit_c])     # finished runs of one family
    fit = fit_sigmoid(c, y, prior=prior)                       # a young run borrows their shape
    fit.prior_note                                             # how far the prior moved A, B, C_mid

The paper tunes one model family once and then predicts many runs; a workbench user keeps every
earlier run in MLflow (workbench.tracking.prior.history_prior reads them). The prior is Gaussian
on (gain = A - R0, ln C_mid, ln B): the mean and standard deviation over the finished runs' fits,
each sd floored (PRIOR_SD_FLOOR) so a handful of near-identical runs cannot pin a new one. The
MAP fit minimises  sum(((y - R(C)) / sigma)^2) + sum(((theta - mean) / sd)^2), sigma being the
residual sd of the plain least-squares fit (floored at SIGMA_FLOOR), so the prior weighs more on
a short, noisy prefix and fades as points accumulate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
from scipy.optimize import least_squares

from workbench.errors import UserError
from workbench.scaling.fit import numerics

PRIOR_SD_FLOOR = (0.02, 0.25, 0.15)  # gain (the paper's A margin), ln C_mid, ln B
SIGMA_FLOOR = 0.005


@dataclass(frozen=True)
class SigmoidPrior:
    gain: float  # mean A - R0 of the finished runs
    gain_sd: float
    ln_cmid: float
    ln_cmid_sd: float
    ln_b: float
    ln_b_sd: float
    n_runs: int

    @classmethod
    def from_fits(cls, fits: Sequence[Any]) -> "SigmoidPrior":
        """From finished runs' SigmoidFits; no-gain fits (B, C_mid unknown) are left out."""
        rows = [(f.A - f.R0, math.log(f.C_mid), math.log(f.B)) for f in fits if not f.no_gain and f.C_mid > 0 and f.B > 0]
        if len(rows) < 2:
            raise UserError(f"a history prior needs at least 2 finished runs with a fitted rise, got {len(rows)}")
        a = np.array(rows)
        mean, sd = a.mean(0), np.maximum(a.std(0, ddof=1), PRIOR_SD_FLOOR)
        return cls(float(mean[0]), float(sd[0]), float(mean[1]), float(sd[1]), float(mean[2]), float(sd[2]), len(rows))

    def describe(self) -> str:
        return (f"prior from {self.n_runs} runs: A - R0 = {self.gain:.3f} +- {self.gain_sd:.3f}, "
                f"C_mid = {math.exp(self.ln_cmid):.4g} (x/{math.exp(self.ln_cmid_sd):.2f}), B = {math.exp(self.ln_b):.3g} (x/{math.exp(self.ln_b_sd):.2f})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_map(x: np.ndarray, y: np.ndarray, r0: float, prior: SigmoidPrior, sigma: float, theta0: np.ndarray, bounds: numerics.Bounds) -> np.ndarray:
    """MAP theta = (A, ln C_mid, ln B) on x = ln C, started at theta0 and at the prior mean."""
    mu = np.array([r0 + prior.gain, prior.ln_cmid, prior.ln_b])
    sd = np.array([prior.gain_sd, prior.ln_cmid_sd, prior.ln_b_sd])
    s = max(sigma, SIGMA_FLOOR)
    lo, hi = bounds.lo(), bounds.hi()

    def resid(th: np.ndarray) -> np.ndarray:
        return np.concatenate([(y - numerics.predict(th[None, :], r0, x[None, :])[0]) / s, (th - mu) / sd])

    best = None
    for start in (theta0, mu):
        st = np.clip(np.asarray(start, float), lo + 1e-9, hi - 1e-9)
        r = least_squares(resid, st, bounds=(lo, hi), method="trf", max_nfev=200)
        if best is None or r.cost < best.cost:
            best = r
    return best.x


def map_theta(x: np.ndarray, y: np.ndarray, r0: float, prior: SigmoidPrior, bounds: numerics.Bounds | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(MAP theta, least-squares theta) for one data set; sigma from the least-squares residuals."""
    bounds = bounds or numerics.Bounds.for_data(x)
    th, sse, _ = numerics.fit_global(x, y, r0, bounds)
    sigma = math.sqrt(sse / max(len(y) - 3, 1))
    return fit_map(x, y, r0, prior, sigma, th, bounds), th


def bootstrap_map(x: np.ndarray, y: np.ndarray, theta: np.ndarray, run: np.ndarray, r0: float, prior: SigmoidPrior, bounds: numerics.Bounds,
                  n_boot: int, L: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, 3) MAP refits of y* = fitted + block-resampled residuals (as numerics.bootstrap)."""
    fitted = numerics.predict(theta[None, :], r0, x[None, :])[0]
    resid = y - fitted
    sigma = math.sqrt(float(resid @ resid) / max(len(y) - 3, 1))
    Ystar = np.clip(fitted[None, :] + numerics.resample_residuals(resid, run, 3, n_boot, L, rng), 0.0, 1.0)
    return np.array([fit_map(x, ys, r0, prior, sigma, theta, bounds) for ys in Ystar])


def shift_note(prior: SigmoidPrior, lsq: np.ndarray, post: np.ndarray) -> str:
    """How far the prior moved the fit from the data-only least squares."""
    return (f"{prior.describe()}; it moved A {lsq[0]:.4f} -> {post[0]:.4f}, B {math.exp(lsq[2]):.3g} -> {math.exp(post[2]):.3g}, "
            f"C_mid {math.exp(lsq[1]):.4g} -> {math.exp(post[1]):.4g} (data-only least squares -> with the prior)")
