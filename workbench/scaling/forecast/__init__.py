"""Forecasting from a fit: the blend beyond the data, the two families past it (families, far),
backtests and the scoreboard, and the curve of a configuration not yet run (config_curve, ladder).

Import from the modules (workbench.scaling.forecast.blend, ...) or from workbench.scaling. This
door re-exports blend.py's public names only because `workbench.scaling.forecast` was that module
before the subfolders (`from workbench.scaling.forecast import Blend` keeps working); its function
`blend` is now `blend.fit_blend`, the name `blend` being the module's.
"""

from workbench.scaling.forecast.blend import (
    ANCHOR_HORIZONS,
    EXCESS_FLOOR,
    LINE_REACH,
    LINES,
    MIN_POINTS_BLEND,
    ORIGINS,
    SIGMOIDS,
    WEIGHT_POWER,
    Blend,
    Horizon,
    fit_blend,
)

__all__ = ["ANCHOR_HORIZONS", "EXCESS_FLOOR", "LINE_REACH", "LINES", "MIN_POINTS_BLEND", "ORIGINS", "SIGMOIDS",
           "WEIGHT_POWER", "Blend", "Horizon", "fit_blend"]
