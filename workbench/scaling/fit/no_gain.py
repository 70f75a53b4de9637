"""The no-gain side of the sigmoid fit: the rules that refuse a sigmoid, and the flat fit given instead.

    gain_p, why = gain_check(x, y, run, r0, point, rho, L, converged, seed)   # fit_sigmoid_multi's step 5
    fit = flat_fit(y, c, run, why, gain_p, n_boot, seed, common)             # when `why` is not ""

No gain (never forecast nonsense). A sigmoid fitted to flat, noisy or wandering data chases the
noise: a step (B = 20) just past the data, then a forecast that collapses to 0 or jumps to 1.
After the fit, three rules decide whether the sigmoid is kept; if any fires, the result is a
no-gain fit (`no_gain=True`, converged=False, reason "no gain detected: ..."):
1. Gain test (numerics.gain_test): T = the share of the variance around the mean the sigmoid
   explains, against T on flat replicates (the mean plus the fit's residuals, block-resampled
   as in the bootstrap, so autocorrelated noise is calibrated for; 200 replicates, coarse grid),
   and the same for a straight line in log-compute (more power on a run's first, steady
   evaluations); p is the smaller of the two. The sigmoid is kept when p <= 0.05, or p <= 0.01 for a fit that did not converge (its
   forecast extrapolates an unidentified shape). A clear rise skips the replicates (F-test
   shortcut, see numerics.gain_test), so rising curves cost no more.
2. Step: B at its upper bound with fewer than MIN_POINTS fitted points on one side of C_mid
   (a jump carried by a few points, e.g. C_mid just past the data).
3. Collapse: A on its lower bound 0 while every fitted score is above 0.03.
A significant, supported decline is kept as a falling sigmoid (A < R0): that is what the data
show. Take-off (`rising_tail`): a no-gain fit whose latest max(3, n/8) fitted points stand above
the earlier ones by more than TAKEOFF_Z noise standard errors (noise from successive
differences) may be a run taking off; it stays flat (a rise in a few points identifies no
sigmoid) but says so (`fit.takeoff`, `forecast_used`). How high a take-off goes the data cannot
tell, so beyond the last fitted compute the band's upper edge opens from the rising points' level
to 1 over one more stretch of compute as long (in ln C) as the one the rising points cover: it
never claims 95% confidence that the run stays flat while its last points are already rising. The no-gain forecast is flat at the level: the mean of the latest max(4, n/8) fitted
points (latest, so a slow drift is followed). Its interval (A_ci, samples[:, 0]): replicate
series block-resampled from all fitted points' residuals around their mean, each replicate's
level the mean of its latest points, so autocorrelated noise widens it; the prediction band adds
sigma, the spread of those residuals. B and C_mid are NaN.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workbench.scaling.data import MIN_POINTS
from workbench.scaling.fit import numerics
from workbench.scaling.fit.result import SigmoidFit, _ci

GAIN_ALPHA = 0.05  # the sigmoid is kept only when the gain test's p-value is at most this...
GAIN_ALPHA_UNIDENTIFIED = 0.01  # ...or this, for a fit that did not converge (its forecast extrapolates more)
N_NULL = 200  # flat-noise replicates of the gain test
TAKEOFF_Z = 2.0  # a no-gain fit's latest points this many noise se above the earlier ones: a take-off may be starting


def gain_check(x: np.ndarray, y: np.ndarray, run: np.ndarray, r0: float, point: numerics.PointFit, rho: float, L: int,
               converged: bool, seed: int) -> tuple[float, str]:
    """(gain test p, why the sigmoid is not kept: "" when it is); the three rules of the module doc."""
    theta, bounds = point.theta, point.bounds
    # the gain test has its own random stream, so a rising curve's intervals do not depend on it
    gain_p = numerics.gain_test(x, y, run, r0, bounds, point.sse, point.resid, rho, L, N_NULL, np.random.default_rng([seed, 1]))
    step_side = int(min((x < theta[1]).sum(), (x >= theta[1]).sum())) if theta[2] >= bounds.lb_hi - 1e-6 else len(y)
    collapse = theta[0] <= bounds.a_lo + 1e-6 and r0 > bounds.a_lo and float(y.min()) > 0.03
    sst = float(((y - y.mean()) ** 2).sum())
    alpha = GAIN_ALPHA if converged else GAIN_ALPHA_UNIDENTIFIED
    return gain_p, no_gain_reason(theta, gain_p, alpha, 1 - point.sse / sst if sst > 0 else 0.0, step_side, collapse)


def no_gain_reason(theta: np.ndarray, gain_p: float, alpha: float, explained: float, step_side: int, collapse: bool) -> str:
    """Why the sigmoid is not kept ("" when it is): no significant change, a step resting on a few
    points, or a collapse to A = 0. step_side: fitted points on the thinner side of C_mid when B is
    at its upper bound (a step), else n."""
    A, C_mid, B = float(theta[0]), math.exp(theta[1]), math.exp(theta[2])
    curve = f"the sigmoid (A = {A:.3f}, B = {B:.3g}, C_mid = {C_mid:.4g})"
    if gain_p > alpha:
        return (f"{curve} explains {explained:.0%} of the variance around the mean, no more than it explains on flat noise "
                f"with these residuals (gain test p = {gain_p:.3f} > {alpha:g})")
    if step_side < MIN_POINTS:
        return (f"{curve} is a step at C_mid with only {step_side} fitted point(s) on one side of it: "
                f"a jump carried by {step_side} point(s), not a rise the data show")
    if collapse:
        return f"{curve} falls to its lower bound A = 0, below every fitted score: a collapse the data do not show"
    return ""


def flat_fit(y: np.ndarray, c: np.ndarray, run: np.ndarray, why: str, gain_p: float, n_boot: int, seed: int, common: dict[str, Any]) -> SigmoidFit:
    """The no-gain result: a flat forecast at the level of the later fitted points, with a block-bootstrap band."""
    n = len(y)
    k = max(min(n, MIN_POINTS), math.ceil(n / 8))
    sel = np.sort(np.argsort(c, kind="stable")[-k:])  # the latest points by compute, in data order
    lvl = float(y[sel].mean())
    # Noise: the residuals of all fitted points around their mean (a few latest points are too
    # few to see autocorrelation); replicate series are block-resampled from them and each
    # replicate's level is the mean of its latest k points, so a wander widens the interval.
    r = y - y.mean()
    rho, L = numerics.noise_blocks(r, run)
    level = common["level"]
    samples = np.zeros((0, 3))
    if n_boot:
        lv = lvl + numerics.resample_residuals(r, run, 1, n_boot, L, np.random.default_rng(seed))[:, sel].mean(1)
        samples = np.column_stack([np.clip(lv, 0.0, 1.0), np.full(n_boot, math.nan), np.full(n_boot, math.nan)])
    sse_all = float(((y - lvl) ** 2).sum())
    sst = float(((y - y.mean()) ** 2).sum())
    warnings = [f"only {n} fitted points: intervals are rough"] if n < 8 else []
    nan = (math.nan, math.nan)
    takeoff = rising_tail(np.log(c), y)
    if takeoff:
        why += (f"; but its last {int(takeoff['k'])} points rise {takeoff['rise']:+.3f} over the earlier level "
                f"({takeoff['z']:.1f} noise se): a take-off may be starting; how high, the data cannot tell, so the band's upper edge opens to 1")
    return SigmoidFit(
        A=lvl,
        B=math.nan,
        C_mid=math.nan,
        A_ci=_ci(samples[:, 0], level) if n_boot else nan,
        B_ci=nan,
        C_mid_ci=nan,
        rmse=math.sqrt(sse_all / n),
        r2=1 - sse_all / sst if sst > 0 else math.nan,
        sigma=float(math.sqrt((r @ r) / max(n - 1, 1))),
        converged=False,
        reason=f"no gain detected: {why}; forecast flat at {lvl:.4f}, the mean of the last {k} fitted points",
        warnings=warnings,
        autocorr=rho,
        block=L,
        samples=samples,
        no_gain=True,
        gain_p=gain_p,
        takeoff=takeoff,
        **common,
    )


def rising_tail(x: np.ndarray, y: np.ndarray) -> dict[str, float] | None:
    """A take-off starting at the end of flat data (x = ln C): the latest k = max(3, n/8) points
    by compute against the earlier ones, in units of the noise standard error (noise sd from
    successive differences, which a slow trend does not inflate). None unless they stand above by
    more than TAKEOFF_Z; else origin (last compute), level (the k points' mean), span (the ln C
    the k points cover, back to the point before them), z, k and rise."""
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    n = len(y)
    k = max(3, math.ceil(n / 8))
    if n - k < 3:
        return None
    base, tail = y[:-k], y[-k:]
    sd = math.sqrt(float(np.mean(np.diff(y) ** 2)) / 2)
    rise = float(tail.mean() - base.mean())
    z = rise / max(sd * math.sqrt(1 / k + 1 / len(base)), 1e-12)
    if z <= TAKEOFF_Z:
        return None
    span = max(float(x[-1] - x[-k - 1]), 1e-9)
    return {"origin": float(math.exp(x[-1])), "level": float(tail.mean()), "span": span, "z": float(z), "k": float(k), "rise": rise}
