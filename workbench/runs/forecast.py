"""The forecast of a fitted run at a compute budget: pass rate, band and scaling-gain verdict.

    fc = forecast_from_fit(fit, budget=0.05)         # dict: pass_rate, lo, hi, gain, verdict, horizon, ...

`RunView.forecast` (and so `Session.forecast`) and the dashboard show it. Past the data the band
and the verdict span both curve families where the data cannot tell them apart (SigmoidFit.band,
scaling_gain), and `horizon` says how far past the data the budget is against how far the
forecast was backtested ("10x the compute seen; backtested only to 1.8x: ...").
"""

from __future__ import annotations

import math
from typing import Any

from workbench.errors import UserError


def forecast_from_fit(fit: Any, budget: float, *, x: str = "compute/device_hours", level: float = 0.95,
                      min_gain: float = 0.01) -> dict[str, Any]:
    """Session.forecast's dict for a given SigmoidFit (see there)."""
    from workbench.scaling import scaling_gain

    if not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget > 0):
        raise UserError(f"budget must be a compute > 0, got {budget!r}")
    current = float(fit.compute[fit.used].max())
    lo = hi = math.nan
    if len(fit.samples):
        band = fit.band(budget, level=level)
        lo, hi = float(band[0][0]), float(band[1][0])
    out: dict[str, Any] = {
        "x": x, "budget": float(budget), "current": current, "pass_rate": float(fit.predict(budget)),
        "lo": lo, "hi": hi, "level": level, "A": fit.A, "A_ci": fit.A_ci, "B": fit.B, "C_mid": fit.C_mid,
        "converged": fit.converged, "reason": fit.reason, "forecast_used": fit.forecast_used,
        "horizon": fit.horizon(budget).line(),
        "gain": None, "gain_lo": None, "gain_hi": None, "worth": None, "verdict": None,
    }
    if budget > current:
        g = scaling_gain(fit, budget=float(budget), current=current, min_gain=min_gain, level=level)
        out.update(gain=g.gain, gain_lo=g.gain_lo, gain_hi=g.gain_hi, worth=g.worth, verdict=g.verdict)
    else:
        out["verdict"] = f"budget {budget:g} is not past the current compute {current:g}: no gain to forecast"
    return out
