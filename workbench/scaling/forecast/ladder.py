"""Ladders of one setting: the leave-largest-out backtest of predict_config, and the rule that stops a ladder.

    bt = leave_largest_out({32: f32, 48: f48, 64: f64, 96: f96}, key="model.n_embd")
    bt.rmse, bt.rmse_same, bt.rmse_scaled, bt.coverage, bt.A_pred, bt.A_meas
    step = next_rung({32: f32, 48: f48, 64: f64}, at=96, key="model.n_embd", min_gain=0.01)
    step.run, step.prediction, step.reason

The backtest predicts the largest run from the others and scores the prediction on that run's
measured (fitted) points against two naive answers: "the same curve as the largest run seen"
(its fit, read at the held-out compute) and "that curve scaled to its own A" (the same fit with
its gain rescaled so its asymptote is the held-out run's fitted A: an answer that already knows
the ceiling). coverage is the share of the measured points inside the 95% prediction band.

next_rung: with fewer than 3 rungs done there is nothing to predict from, so the rung runs; else
the rung runs unless `ConfigPrediction.worth_it` says "not worth it" (even the upper end of the
predicted gain over the largest rung so far, at its compute or at `budget`, is below min_gain).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from workbench.errors import UserError
from workbench.scaling.forecast.config_curve import MIN_RUNS, ConfigPrediction, predict_config
from workbench.scaling.fit.result import SigmoidFit, _curve


@dataclass(frozen=True)
class LadderBacktest:
    key: str
    at: float  # the held-out (largest) value
    seen: list[float]
    n_points: int
    rmse: float  # the prediction's, on the held-out run's measured points
    rmse_same: float  # "the same curve as the largest run seen"
    rmse_scaled: float  # "that curve scaled to the held-out run's own A"
    coverage: float  # share of the measured points inside the prediction band
    A_pred: float
    A_pred_ci: tuple[float, float]
    A_meas: float
    A_meas_ci: tuple[float, float]
    forms: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return (f"{self.key}={self.at:g} predicted from {', '.join(f'{v:g}' for v in self.seen)}: RMSE {self.rmse:.4f} vs "
                f"same curve as the largest seen {self.rmse_same:.4f}, scaled to its own A {self.rmse_scaled:.4f}; "
                f"95% band covers {self.coverage:.0%} of {self.n_points} points; A predicted {self.A_pred:.3f} "
                f"[{self.A_pred_ci[0]:.3f}, {self.A_pred_ci[1]:.3f}], measured {self.A_meas:.3f} "
                f"[{self.A_meas_ci[0]:.3f}, {self.A_meas_ci[1]:.3f}]; forms {self.forms}")


def leave_largest_out(fits: Mapping[float, SigmoidFit], *, key: str = "setting", level: float = 0.95, seed: int = 0) -> LadderBacktest:
    """Predict the run with the largest value from the others and score it (see the module docstring)."""
    if len(fits) < MIN_RUNS + 1:
        raise UserError(f"{len(fits)} value(s): the leave-largest-out backtest needs {MIN_RUNS} to predict from and one to hold out")
    values = sorted(fits)
    held, seen = fits[values[-1]], {v: fits[v] for v in values[:-1]}
    p = predict_config(seen, values[-1], key=key, level=level, seed=seed)
    c, y = held.compute[held.used], held.score[held.used]
    ref = seen[values[-2]]
    same = _curve(c, ref.R0, ref.A, ref.B, ref.C_mid)
    scale = (held.A - ref.R0) / (ref.A - ref.R0) if ref.A != ref.R0 else 1.0
    scaled = ref.R0 + scale * (same - ref.R0)
    lo, hi = p.band(c, kind="prediction")

    def rmse(pred: np.ndarray) -> float:
        return float(np.sqrt(np.mean((pred - y) ** 2)))

    return LadderBacktest(key, float(values[-1]), [float(v) for v in values[:-1]], len(y), rmse(p.predict(c)), rmse(same),
                          rmse(scaled), float(np.mean((y >= lo) & (y <= hi))), p.A, p.A_ci, held.A, held.A_ci, dict(p.forms))


@dataclass(frozen=True)
class RungDecision:
    run: bool
    reason: str
    prediction: ConfigPrediction | None = None


def next_rung(fits: Mapping[float, SigmoidFit], at: float, *, key: str = "setting", min_gain: float = 0.01,
              budget: float | None = None) -> RungDecision:
    """Run the rung at `at`, or stop the ladder because it is predicted not to be worth it."""
    if len(fits) < MIN_RUNS:
        return RungDecision(True, f"{len(fits)} rung(s) done: fewer than {MIN_RUNS} to predict {key}={at:g} from, so it runs")
    p = predict_config(fits, at, key=key)
    w = p.worth_it(budget, min_gain=min_gain)
    why = f"no law beat carrying run {p.fallback}'s curve over, so that curve is the prediction; " if p.fallback else ""
    return RungDecision(w.worth is not False, why + w.verdict, p)
