"""The flat module paths of workbench.scaling (before fit/, forecast/, decide/) still import."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import workbench.scaling as scaling
from workbench.scaling import moved

# old path -> public names code imported from it before the move
OLD_NAMES = {
    "sigmoid": ["fit_sigmoid", "fit_sigmoid_multi", "refit_at_shared_A", "MIN_POINTS", "METHODS", "FitOptions"],
    "engine": ["fit_global", "Bounds", "predict", "bootstrap", "block_length"],
    "result": ["SigmoidFit", "Reach", "Interval"],
    "prior": ["SigmoidPrior", "map_theta"],
    "paper": ["fit_paper", "bounds_for"],
    "stretched": ["stretched_curve", "profile"],
    "powerlaw": ["PowerLawFit", "fit_power_law"],
    "far": ["PastTheData"],
    "families": ["Families", "A_MARGIN", "APART_SDS", "profile_threshold"],
    "backtest": ["backtest", "BacktestResult", "holdout_noise", "score_holdout", "naive_rmse"],
    "scoreboard": ["score_prefix", "summary", "format_table", "load_folder"],
    "predict": ["predict_config", "ConfigPrediction", "Worth", "MIN_RUNS"],
    "ladder": ["leave_largest_out", "next_rung"],
    "decision": ["scaling_gain", "ScalingGain"],
    "compare": ["compare", "Comparison", "CompareRow"],
    "early_stop": ["rung_decisions"],
    "ceiling": ["ceiling_check", "CeilingCheck", "attach_ceiling_check"],
    "cli": ["add_parser", "run"],
}


def test_every_moved_module_is_listed_with_its_names():
    assert set(OLD_NAMES) == set(moved.MOVED)


@pytest.mark.parametrize("old", sorted(moved.MOVED))
def test_an_old_path_gives_the_moved_module_itself(old):
    mod = importlib.import_module(f"workbench.scaling.{old}")
    assert mod is importlib.import_module(moved.target(old))
    for name in OLD_NAMES[old]:
        assert hasattr(mod, name), f"workbench.scaling.{old}.{name}"


def test_the_old_forecast_module_names_import_from_the_forecast_package():
    from workbench.scaling.forecast import ANCHOR_HORIZONS, MIN_POINTS_BLEND, Blend, Horizon, fit_blend

    from workbench.scaling.forecast import blend

    assert blend.Blend is Blend and blend.Horizon is Horizon and blend.fit_blend is fit_blend
    assert (blend.MIN_POINTS_BLEND, blend.ANCHOR_HORIZONS) == (MIN_POINTS_BLEND, ANCHOR_HORIZONS)


def test_the_package_exports_stay_functions_after_old_submodule_imports():
    import workbench.scaling.backtest  # noqa: F401  (the old module path)
    import workbench.scaling.compare  # noqa: F401

    assert callable(scaling.backtest) and scaling.backtest.__module__ == "workbench.scaling.forecast.backtest"
    assert callable(scaling.compare) and scaling.compare.__module__ == "workbench.scaling.decide.compare"
    for name in scaling.__all__:
        assert getattr(scaling, name) is not None


def test_old_paths_import_in_a_fresh_interpreter():
    # first import through an old path, before anything else of workbench is loaded
    code = ("from workbench.scaling.sigmoid import fit_sigmoid\nfrom workbench.scaling.early_stop import rung_decisions\n"
            "import workbench.scaling.engine as e, workbench.scaling.fit.numerics as n\nassert e is n\n"
            "from workbench.scaling import ladder\nassert ladder.__name__ == 'workbench.scaling.forecast.ladder'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
