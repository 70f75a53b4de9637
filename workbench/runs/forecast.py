"""What a session reports about its fit: the forecast at a budget, and the fit's artifacts.

    fc = forecast_from_fit(fit, budget=0.05)         # dict: pass_rate, lo, hi, gain, verdict, ...
    paths = write_fit_artifacts(fit, out_dir / "fit", title="run: val/pass_rate", x="compute/device_hours")
    log_fit(sink, fit, paths, step=200, x="compute/device_hours")   # fit/A, fit/A_lo, ... + artifacts

`workbench.Session` calls these when a run ends; the dashboard shows the forecast.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from workbench.runs.report import write_fit_artifacts  # noqa: F401  (re-exported)
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
        "converged": fit.converged, "reason": fit.reason,
        "gain": None, "gain_lo": None, "gain_hi": None, "worth": None, "verdict": None,
    }
    if budget > current:
        g = scaling_gain(fit, budget=float(budget), current=current, min_gain=min_gain, level=level)
        out.update(gain=g.gain, gain_lo=g.gain_lo, gain_hi=g.gain_hi, worth=g.worth, verdict=g.verdict)
    else:
        out["verdict"] = f"budget {budget:g} is not past the current compute {current:g}: no gain to forecast"
    return out


def fit_metrics(fit: Any) -> dict[str, float]:
    """fit/A, fit/B, fit/C_mid with fit/*_lo and fit/*_hi, fit/r2, fit/n, fit/converged, fit/no_gain
    (finite only: a no-gain fit has no B or C_mid, its A is the flat level)."""
    m = {"fit/A": fit.A, "fit/B": fit.B, "fit/C_mid": fit.C_mid, "fit/r2": fit.r2, "fit/n": float(fit.n),
         "fit/converged": float(fit.converged), "fit/no_gain": float(getattr(fit, "no_gain", False))}
    for k, ci in (("A", fit.A_ci), ("B", fit.B_ci), ("C_mid", fit.C_mid_ci)):
        m[f"fit/{k}_lo"], m[f"fit/{k}_hi"] = ci
    return {k: float(v) for k, v in m.items() if v is not None and math.isfinite(v)}


def log_fit(sink: Any, fit: Any, paths: list[Path], *, step: int, x: str) -> None:
    """Log the fit's metrics (at `step`) and artifacts (under fit/) through an MlflowSink."""
    sink.log_metrics(fit_metrics(fit), step=step)
    sink.set_tags({"workbench.fit_x": x})
    for p in paths:
        sink.log_artifact(p, "fit")
