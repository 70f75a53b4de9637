"""The shipped CPU ladders (examples/predict): `workbench predict`, leaving the largest rung out, is
never worse than carrying the largest run seen over by more than the runs' point noise (issue 36),
and keeps its errors where its laws win (the Measured page's table; benchmarks/bench_predict.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workbench.runs.by_setting import runs_from_csvs
from workbench.scaling.forecast.ladder import leave_largest_out

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "predict"
LADDERS = {  # folder -> (setting, the prediction's RMSE on the Measured page)
    "ladder-batch": ("train.prompts_per_step", 0.0116),
    "ladder-generations": ("train.generations_per_prompt", 0.0206),
    "ladder-depth": ("model.n_layer", 0.0396),
    "ladder": ("train.prompts_per_step", 0.0190),
}


@pytest.mark.parametrize("folder", sorted(LADDERS))
def test_the_prediction_is_never_worse_than_the_largest_run_seen(folder):
    key, measured = LADDERS[folder]
    runs = runs_from_csvs(sorted((EXAMPLES / folder).glob("*.csv")), key)
    bt = leave_largest_out(runs.fits, key=key)
    noise = float(np.median([f.sigma for f in runs.fits.values()]))
    assert bt.rmse <= bt.rmse_same + noise, bt
    assert bt.rmse == pytest.approx(measured, abs=5e-5), bt  # the figure the Measured page prints
    assert bt.coverage >= 0.9, bt


def test_the_depth_ladder_fits_each_rungs_three_seeds_jointly():
    runs = runs_from_csvs(sorted((EXAMPLES / "ladder-depth").glob("*.csv")), "model.n_layer")
    assert sorted(runs.fits) == [1.0, 2.0, 3.0, 4.0]
    assert all(len(f.run_names) == 3 for f in runs.fits.values())


def test_every_shipped_ladder_is_held_to_its_figure():
    shipped = {p.name for p in EXAMPLES.glob("ladder*") if p.is_dir()}
    assert shipped == set(LADDERS), "a ladder under examples/predict without its figure here (or one removed)"
