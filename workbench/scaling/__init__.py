"""workbench.scaling: fit, forecast and compare compute-performance curves (ScaleRL Eq. 1).

    from workbench.scaling import fit_sigmoid, scaling_gain, compare, backtest
    fit = fit_sigmoid(gpu_hours, pass_rate, fit_from=1500)   # R0 = score at compute 0
    print(fit.summary()); fit.band(c); fit.compute_to_reach(0.6)
    fit.forecast_used                                         # which forecast beyond the data, and why
    fit_sigmoid(c, y, method="paper")                         # the paper's procedure, by name
    fit_sigmoid(c, y, prior=SigmoidPrior.from_fits(finished)) # borrow the shape of finished runs
    scaling_gain(fit, factor=10).verdict                      # is 10x worth it?
    predict_config({32: f32, 64: f64, 128: f128}, at=256, key="model.n_embd")   # a run not yet paid for
    compare({"cispo": f1, "dapo": f2})                        # ranked, with the +-0.02 A tie rule
    ceiling_check(fit).line()                                 # does the curve pin its ceiling?
    from workbench.scaling import chart_fit, save_chart       # Altair, imported on first use

numpy/scipy only: no torch, Ray or notebooks here. Altair is loaded lazily by the chart functions.
Modules by concern (docs/concepts/layout.md): data (validation, CSV), charts, fit_command (`workbench fit`);
fit/: sigmoid (fit_sigmoid, one straight sequence), numerics (grid + LM + bootstrap), result (SigmoidFit),
prior (history prior, MAP fit), paper (the paper's procedure), stretched, powerlaw;
forecast/: blend (the default: sigmoid / paper / trend weighted by a rolling-origin backtest), families
and far (past the data), backtest, scoreboard (forecasts vs naive ones over many curves), config_curve
(predict_config: a configuration's curve from runs that differ in one setting), ladder;
decide/: gain (scaling_gain), compare, early_stop, ceiling.
MIN_POINTS (the fewest fitted points any fit accepts) is the one constant sessions and reports import.
Flat, falling-to-nothing or noisy data give a no-gain fit (`fit.no_gain`): a flat forecast, see fit/sigmoid.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.scaling.forecast.backtest import BacktestResult, BacktestRow, backtest
from workbench.scaling.decide.ceiling import CeilingCheck, ceiling_check
from workbench.scaling.decide.compare import Comparison, CompareRow, compare
from workbench.scaling.data import Curve, check_curve
from workbench.scaling.decide.gain import ScalingGain, scaling_gain
from workbench.scaling.forecast.blend import Blend
from workbench.scaling.fit.powerlaw import PowerLawFit, fit_power_law
from workbench.scaling.forecast.config_curve import ConfigPrediction, Worth, predict_config
from workbench.scaling.fit.prior import SigmoidPrior
from workbench.scaling.fit.result import Reach, SigmoidFit
from workbench.scaling.data import r0_rule
from workbench.scaling.data import MIN_POINTS
from workbench.scaling.fit.sigmoid import METHODS, FitOptions, fit_sigmoid, fit_sigmoid_multi, refit_at_shared_A

_CHARTS = ("chart_fit", "chart_overlay", "save_chart")
if TYPE_CHECKING:  # for type checkers and the API reference; at run time __getattr__ loads them
    from workbench.scaling.charts import chart_fit, chart_overlay, save_chart

__all__ = [
    "METHODS",
    "MIN_POINTS",
    "Blend",
    "SigmoidPrior",
    "BacktestResult",
    "BacktestRow",
    "CeilingCheck",
    "Comparison",
    "ConfigPrediction",
    "CompareRow",
    "Curve",
    "FitOptions",
    "PowerLawFit",
    "Reach",
    "ScalingGain",
    "SigmoidFit",
    "Worth",
    "backtest",
    "ceiling_check",
    "check_curve",
    "compare",
    "fit_power_law",
    "fit_sigmoid",
    "fit_sigmoid_multi",
    "predict_config",
    "r0_rule",
    "refit_at_shared_A",
    "scaling_gain",
    *_CHARTS,
]


def __getattr__(name: str) -> Any:
    # Charts pull in Altair (heavy); load them only when asked for.
    if name in _CHARTS:
        from workbench.scaling import charts

        return getattr(charts, name)
    raise AttributeError(f"module 'workbench.scaling' has no attribute {name!r}")
