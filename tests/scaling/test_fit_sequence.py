"""A fit is one straight sequence: fit_sigmoid_multi calls each step once, in order (traced)."""

from __future__ import annotations

import sys

import numpy as np

from workbench.scaling import fit_sigmoid
from tests.scaling.synthetic import synth

PACKAGE_STEPS = [  # (file under workbench/scaling, function) called from fit_sigmoid_multi, in order
    ("fit/sigmoid.py", "fit_options"),
    ("fit/sigmoid.py", "checked"),
    ("fit/sigmoid.py", "gather"),
    ("fit/sigmoid.py", "_point_fit"),
    ("fit/numerics.py", "noise_blocks"),
    ("fit/sigmoid.py", "_diagnose"),
    ("fit/no_gain.py", "gain_check"),
    ("forecast/blend.py", "fit_blend"),
    ("fit/sigmoid.py", "_bootstrap"),
    ("fit/sigmoid.py", "_assemble"),
]

DATA_ACCESSORS = {"_FitData.n", "_FitData.x", "_FitData.y", "_FitData.run_used"}


def _steps(*args, **kw) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_back is not None and frame.f_back.f_code.co_name == "fit_sigmoid_multi":
            path = frame.f_code.co_filename.replace("\\", "/")
            accessor = frame.f_code.co_qualname in DATA_ACCESSORS  # reading the fitted points is no step
            if "/workbench/scaling/" in path and not accessor:
                seen.append((path.split("/workbench/scaling/")[1], frame.f_code.co_name))

    sys.setprofile(prof)
    try:
        fit_sigmoid(*args, **kw)
    finally:
        sys.setprofile(None)
    return seen


def test_a_rising_fit_calls_each_step_once_in_order():
    c, y = synth(seed=0)
    assert _steps(c, y, n_boot=40) == PACKAGE_STEPS


def test_a_no_gain_fit_ends_at_the_flat_fit():
    c = np.linspace(0, 1000, 25)
    y = np.r_[0.3, 0.3 + 0.01 * np.random.default_rng(1).standard_normal(24)]
    steps = _steps(c, y, n_boot=40)
    assert steps == PACKAGE_STEPS[:7] + [("fit/no_gain.py", "flat_fit")]
