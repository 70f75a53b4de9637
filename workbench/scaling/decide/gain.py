"""Is it worth scaling? The expected gain from continuing a run to a larger compute budget.

    g = scaling_gain(fit, factor=10)            # 10x the last fitted compute
    g = scaling_gain(fit, budget=5e4, min_gain=0.02)
    g.gain, (g.gain_lo, g.gain_hi), g.worth, g.verdict

The gain is the rise of the fitted curve between the current compute and the budget. Its
interval pushes every bootstrap replicate through the same difference (so the correlation between
the two forecasts is kept; it is narrower than differencing two bands). The verdict is "worth it"
when even the low end of the interval clears `min_gain`, "not worth it" when the high end does
not, and "uncertain" otherwise. The forecast is the fit's: with method "auto" the blend of
forecast/blend.py, which may pass the sigmoid's A (the share of the headroom to A then exceeds 100%, and
the verdict says so); the backtests (backtest.py) tell how far forecasts held on real curves. A
no-gain fit (flat forecast) gets gain 0 and the verdict "no gain detected: ... not worth it".

Past the data the verdict follows the band (far.py): where the families disagree on the ceiling
(a stretched exponential fits as well with a plateau outside A's interval) or A is not identified,
the interval joins what the band past the data adds, read against the score now, to the fit's own
(`sigmoid_gain_ci`). "worth it, by how much the data cannot tell" then claims only the joined low
end; the sentence says why (the other family's plateau and gain, an unidentified A) and what would
settle it (`settle_factor`: run to where the families' forecasts part by 2 noise sds). Every
verdict says how far past the data the budget is against the forecast's backtest (`horizon`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from workbench.errors import UserError, as_number
from workbench.scaling.forecast.families import APART_SDS
from workbench.scaling.fit.result import SigmoidFit, _ci


@dataclass(frozen=True)
class ScalingGain:
    current: float  # compute now
    budget: float  # compute after scaling
    score_now: float  # fitted score at `current`
    score_at_budget: float
    lo: float  # interval of score_at_budget (mean band; over both families where they fit alike)
    hi: float
    gain: float  # score_at_budget - score_now
    gain_lo: float  # the gain's interval: over both families where a stretched exponential fits as well
    gain_hi: float
    headroom: float  # A - score_now: what is left to gain at all
    share_of_headroom: float  # gain / headroom
    level: float
    min_gain: float
    worth: bool | None  # True / False, None = uncertain
    verdict: str
    horizon: str = ""  # how far past the data the budget is, against how far the forecast was backtested
    sigmoid_gain_ci: tuple[float, float] = (math.nan, math.nan)  # the fit's own forecast's interval, before joining
    stretched_gain: float = math.nan  # the stretched exponential's best-fit gain (nan: it does not fit as well)
    settle_factor: float = math.nan  # where the families' forecasts part: a multiple of the last fitted compute

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return self.verdict


def scaling_gain(
    fit: SigmoidFit,
    budget: float | None = None,
    *,
    factor: float | None = None,
    current: float | None = None,
    min_gain: float = 0.01,
    level: float | None = None,
) -> ScalingGain:
    """Expected score gain from scaling from `current` (default: the last fitted compute) to
    `budget` (or `factor` x current), with a bootstrap interval and a verdict against min_gain.
    Where a stretched exponential fits as well (fit.families), the interval spans both families."""
    if (budget is None) == (factor is None):
        raise UserError("give exactly one of budget= or factor=")
    if not isinstance(fit, SigmoidFit):
        raise UserError(f"scaling_gain needs a SigmoidFit (fit_sigmoid's result), got a {type(fit).__name__}")
    budget = None if budget is None else as_number("budget", budget)
    factor = None if factor is None else as_number("factor", factor)
    current = None if current is None else as_number("current", current)
    level = fit.level if level is None else level
    if current is None:
        current = float(fit.compute[fit.used].max())
    if not (math.isfinite(current) and current > 0):
        raise UserError(f"current compute must be > 0, got {current}")
    if factor is not None:
        if not (math.isfinite(factor) and factor > 1):
            raise UserError(f"factor must be > 1, got {factor}")
        budget = current * factor
    assert budget is not None
    if not (math.isfinite(budget) and budget > current):
        raise UserError(f"budget ({budget:g}) must be above the current compute ({current:g})")
    now, then = fit.predict(current), fit.predict(budget)
    if len(fit.samples):
        curves = fit.sample_curves(np.array([current, budget]))
        lo, hi = _ci(curves[:, 1], level)
        g_lo, g_hi = _ci(curves[:, 1] - curves[:, 0], level)
    else:
        lo = hi = g_lo = g_hi = math.nan
    horizon = fit.horizon(budget).line()
    pct = f"{level:.0%}"
    if fit.no_gain:
        # a flat forecast: nothing to gain at any budget (the level's interval says where it sits)
        verdict = (
            f"no gain detected: the data show no rise that stands out from their noise, so scaling {current:.4g} -> {budget:.4g} ({horizon}) "
            f"is forecast to leave the score at its level {now:.4f} ({pct} CI [{lo:.4f}, {hi:.4f}]); not worth it"
        )
        return ScalingGain(current, float(budget), now, then, lo, hi, 0.0, 0.0, 0.0, 0.0, math.nan, level, min_gain, False, verdict,
                           horizon=horizon, sigmoid_gain_ci=(0.0, 0.0))
    far = fit.far_band(np.array([budget]), level) if math.isfinite(g_lo) else None
    own = (g_lo, g_hi)  # the fit's own forecast's interval
    s_gain = settle = math.nan
    if far is not None:
        # what the band past the data adds is read against the score now, so a verdict never claims
        # more than the band allows
        f_lo, f_hi = float(far.lo[0]), float(far.hi[0])
        lo, hi, g_lo, g_hi = (float(v) for v in (np.fmin(lo, f_lo), np.fmax(hi, f_hi), np.fmin(g_lo, f_lo - now), np.fmax(g_hi, f_hi - now)))
        if far.families is not None:
            s_gain = float(far.families.best(np.array([budget]))[0]) - now
            settle = far.families.settle_factor(fit.predict) or math.nan
    worth, word = _word(g_lo, g_hi, min_gain)
    gain = then - now
    headroom = fit.A - now
    share = gain / headroom if headroom != 0 else math.nan
    move = f"scaling {current:.4g} -> {budget:.4g} ({horizon})"
    if far is not None:
        verdict = (f"{word}{', by how much the data cannot tell' if worth else ''}: {move} "
                   + (f"gains at least {g_lo:+.4f}" if worth else f"gains at most {g_hi:+.4f}" if worth is False
                      else f"may gain as little as {g_lo:+.4f} or as much as {g_hi:+.4f}")
                   + f" over {'both curve families' if far.families else 'what the data allow'} ({pct}), against a minimum of {min_gain:g}. "
                   + f"The sigmoid's forecast goes {now:.4f} -> {then:.4f} (gain {gain:+.4f}, {pct} CI [{own[0]:+.4f}, {own[1]:+.4f}]); "
                   + _why(fit, far, s_gain, settle, pct))
    else:
        ci = f"{pct} CI [{g_lo:+.4f}, {g_hi:+.4f}]" if math.isfinite(g_lo) else "no interval: fitted without bootstrap"
        verdict = (f"{word}: {move} is expected to move the score {now:.4f} -> {then:.4f}, gain {gain:+.4f} "
                   f"({ci}) against a minimum of {min_gain:g}; " + _headroom(fit.A, headroom, share))
    return ScalingGain(current, float(budget), now, then, lo, hi, gain, g_lo, g_hi, headroom, share, level, min_gain, worth, verdict,
                       horizon=horizon, sigmoid_gain_ci=own, stretched_gain=s_gain, settle_factor=settle)


def _word(g_lo: float, g_hi: float, min_gain: float) -> tuple[bool | None, str]:
    if not math.isfinite(g_lo):
        return None, "no interval (fit has no bootstrap samples)"
    if g_lo >= min_gain:
        return True, "worth it"
    if g_hi < min_gain:
        return False, "not worth it"
    return None, "uncertain"


def _why(fit: SigmoidFit, far: Any, s_gain: float, settle: float, pct: str) -> str:
    """Why the interval spans more than the sigmoid's forecast (far.FarBand), and what would settle it."""
    why = []
    if far.families is not None:
        fam = far.families
        why.append(f"a stretched exponential fits these points as well (RMSE {fam.rmse_stretched:.4f} vs {fam.rmse_sigmoid:.4f}) "
                   f"and levels off at {fam.P:.3f} ({pct} {fam.P_ci[0]:.3f}-{fam.P_ci[1]:.3f}), a gain of {s_gain:+.4f}")
    if math.isfinite(far.floor):
        why.append(f"the sigmoid's A is not identified ({fit.reason}), so the curve may level off near where it is now "
                   f"(the band's lower edge past the data stays at {far.floor:.4f})")
    settles = (f"run to {settle:.2g}x the compute seen to tell the families apart (their forecasts part by {APART_SDS:g} noise sds there)"
               if math.isfinite(settle) else "run on until the curve bends (the fit converges) to tell"
               if math.isfinite(far.floor) else "the families do not part by 1000x the compute seen")
    return "; ".join(why) + ": " + settles


def _headroom(A: float, headroom: float, share: float) -> str:
    if headroom < 0:
        return f"the forecast is already above the sigmoid's A = {A:.4f}: the blended forecast's log-compute trend carries it"
    if math.isfinite(share) and share > 1:
        return f"the blended forecast passes the sigmoid's A = {A:.4f}: its log-compute trend carries it past the ceiling"
    if math.isfinite(share):
        return f"{share:.0%} of the remaining headroom to A = {A:.4f}"
    return f"the curve is already at its fitted asymptote A = {A:.4f}"
