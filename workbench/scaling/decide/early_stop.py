"""Stop losers by forecast: which running points of a sweep can no longer win.

After each rung of evaluations every running point is refitted; `rung_decisions` then says which
points to stop. Two rules, in order:

1. **Ceiling ruled out.** A point stops when the upper end of its 95% interval on A lies below
   the lower end of the best point's interval.
2. **Forecast behind.** While the A intervals overlap, a point stops when its forecast at the
   sweep's budget is below the best point's forecast there by more than the paper's margin
   (0.02, `compare.A_MARGIN`). With a blended forecast (fit_sigmoid's default method "auto") the
   point is judged by the upper end of its 95% forecast band at the budget, not its point forecast.

The best point is the one forecast highest at the sweep's budget (ties broken by A): the point
the sweep would spend its budget on. The best point never stops. Neither rule can stop a point
whose ceiling is clearly above the best point's, so the winner `compare` would pick by A is never
stopped by rule 1.

Fits that did not converge still take part (their intervals are wide, so rule 1 rarely fires on
them); a point without a fit (too few evaluations) continues. A no-gain fit (flat data, e.g. a
crippled point that does not learn; `SigmoidFit.no_gain`) takes part with its level: its A and A
interval are the level's and its forecast at any budget is the level, so a flat point far below
the best's ceiling stops by rule 1. Rule 2 judges it by the upper end of its level's interval
rather than the level itself: with 4-8 evaluations a real but slow rise is often not yet
distinguishable from noise (the fit then says "no gain detected"), and two such points must not
stop each other over a noise-sized difference in level.

    decisions = rung_decisions({"lr=2e-4": fit1, "lr=1e-6": fit2}, budget=1.5)
    decisions["lr=1e-6"].stop, decisions["lr=1e-6"].reason
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from workbench.errors import UserError
from workbench.scaling.decide.compare import A_MARGIN
from workbench.scaling.fit.result import SigmoidFit


@dataclass(frozen=True)
class StopDecision:
    name: str
    stop: bool
    reason: str  # why it stops ("" when it continues)
    forecast: float  # forecast pass rate at the budget (nan without a fit)
    best: str  # the point it was judged against


def rung_decisions(
    fits: Mapping[str, Optional[SigmoidFit]], budget: float, margin: float = A_MARGIN
) -> dict[str, StopDecision]:
    """One StopDecision per point; `None` fits (not enough evaluations yet) always continue."""
    if not np.isfinite(budget) or budget <= 0:
        raise UserError(f"the sweep budget must be a positive compute value, got {budget!r}")
    fitted = {n: f for n, f in fits.items() if f is not None}
    forecasts = {n: float(f.predict(budget)) for n, f in fitted.items()}
    if not fitted:
        return {n: StopDecision(n, False, "", float("nan"), "") for n in fits}
    best = max(fitted, key=lambda n: (forecasts[n], fitted[n].A))
    best_lo = float(fitted[best].A_ci[0])
    out: dict[str, StopDecision] = {}
    for name, fit in fits.items():
        if fit is None or name == best:
            out[name] = StopDecision(name, False, "", forecasts.get(name, float("nan")), best)
            continue
        hi = float(fit.A_ci[1])
        top = _forecast_top(fit, budget)
        gap = forecasts[best] - (hi if fit.no_gain else top)
        if hi < best_lo:
            reason = f"A's 95% interval ends at {hi:.3f}, below {best}'s lower end {best_lo:.3f}"
        elif gap > margin:
            what = (f"flat forecast (no gain detected) at most {hi:.3f}" if fit.no_gain
                    else f"forecast at budget {budget:.3g} is {forecasts[name]:.3f}" + (f" (95% band up to {top:.3f})" if top != forecasts[name] else ""))
            reason = f"{what}, {gap:.3f} below {best}'s {forecasts[best]:.3f} (margin {margin:g})"
        else:
            reason = ""
        out[name] = StopDecision(name, bool(reason), reason, forecasts[name], best)
    return out


def _forecast_top(fit: SigmoidFit, budget: float) -> float:
    """What rule 2 judges a rising point by: its forecast at the budget, or for a blended forecast
    (method "auto") the upper end of its 95% band there. The blend's weights come from a short
    backtest and can flip between near-identical points; two such points must not stop each
    other over that."""
    if fit.forecast is None or not len(fit.samples):
        return float(fit.predict(budget))
    return float(fit.band([budget], level=0.95, kind="mean")[1][0])
