"""Is it worth scaling? The expected gain from continuing a run to a larger compute budget.

    g = scaling_gain(fit, factor=10)            # 10x the last fitted compute
    g = scaling_gain(fit, budget=5e4, min_gain=0.02)
    g.gain, (g.gain_lo, g.gain_hi), g.worth, g.verdict

The gain is the rise of the fitted curve between the current compute and the budget. Its
interval pushes every bootstrap replicate through the same difference (so the correlation between
the two forecasts is kept; it is narrower than differencing two bands). The verdict is "worth it"
when even the low end of the interval clears `min_gain`, "not worth it" when the high end does
not, and "uncertain" otherwise. The forecast is the fit's: with method "auto" the blend of
forecast.py, which may pass the sigmoid's A (the share of the headroom to A then exceeds 100%, and
the verdict says so); the backtests (backtest.py) tell how far forecasts held on real curves. A
no-gain fit (flat forecast) gets gain 0 and the verdict "no gain detected: ... not worth it".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from workbench.errors import UserError, as_number
from workbench.scaling.result import SigmoidFit, _ci


@dataclass(frozen=True)
class ScalingGain:
    current: float  # compute now
    budget: float  # compute after scaling
    score_now: float  # fitted score at `current`
    score_at_budget: float
    lo: float  # interval of score_at_budget (mean band)
    hi: float
    gain: float  # score_at_budget - score_now
    gain_lo: float
    gain_hi: float
    headroom: float  # A - score_now: what is left to gain at all
    share_of_headroom: float  # gain / headroom
    level: float
    min_gain: float
    worth: bool | None  # True / False, None = uncertain
    verdict: str

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
    `budget` (or `factor` x current), with a bootstrap interval and a verdict against min_gain."""
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
    gain = then - now
    if len(fit.samples):
        curves = fit.sample_curves(np.array([current, budget]))
        lo, hi = _ci(curves[:, 1], level)
        g_lo, g_hi = _ci(curves[:, 1] - curves[:, 0], level)
    else:
        lo = hi = g_lo = g_hi = math.nan
    headroom = fit.A - now
    share = gain / headroom if headroom != 0 else math.nan
    if not math.isfinite(g_lo):
        worth, word = None, "no interval (fit has no bootstrap samples)"
    elif g_lo >= min_gain:
        worth, word = True, "worth it"
    elif g_hi < min_gain:
        worth, word = False, "not worth it"
    else:
        worth, word = None, "uncertain"
    pct = f"{level:.0%}"
    if fit.no_gain:
        # a flat forecast: nothing to gain at any budget (the level's interval says where it sits)
        verdict = (
            f"no gain detected: the data show no rise that stands out from their noise, so scaling {current:.4g} -> {budget:.4g} ({budget / current:.3g}x) "
            f"is forecast to leave the score at its level {now:.4f} ({pct} CI [{lo:.4f}, {hi:.4f}]); not worth it"
        )
        return ScalingGain(current, float(budget), now, then, lo, hi, 0.0, 0.0, 0.0, 0.0, math.nan, level, min_gain, False, verdict)
    verdict = (
        f"{word}: scaling {current:.4g} -> {budget:.4g} ({budget / current:.3g}x) is expected to move the score "
        f"{now:.4f} -> {then:.4f}, gain {gain:+.4f} ({pct} CI [{g_lo:+.4f}, {g_hi:+.4f}]) against a minimum of {min_gain:g}; "
        + (
            f"the forecast is already above the sigmoid's A = {fit.A:.4f}: the blended forecast's log-compute trend carries it"
            if headroom < 0
            else f"the blended forecast passes the sigmoid's A = {fit.A:.4f}: its log-compute trend carries it past the ceiling"
            if math.isfinite(share) and share > 1
            else f"{share:.0%} of the remaining headroom to A = {fit.A:.4f}"
            if math.isfinite(share)
            else f"the curve is already at its fitted asymptote A = {fit.A:.4f}"
        )
    )
    return ScalingGain(current, float(budget), now, then, lo, hi, gain, g_lo, g_hi, headroom, share, level, min_gain, worth, verdict)
