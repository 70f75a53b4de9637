"""history_prior reads finished runs from a real SQLite MLflow store and helps a young run."""

from __future__ import annotations

import numpy as np
import pytest

from tests.scaling.test_prior import family_run, heldout_rmse
from workbench.errors import UserError
from workbench.scaling import fit_sigmoid
from workbench.tracking.mlflow_sink import MlflowSink
from workbench.tracking.prior import history_prior
from workbench.tracking.store import create_run


def _log(uri, experiment, name, c, y, recipe="scalerl", status="FINISHED"):
    rid = create_run(experiment, name, {}, tracking_uri=uri)
    sink = MlflowSink(rid, uri)
    sink.log_config({"recipe": {"name": recipe}})
    for step, (ci, yi) in enumerate(zip(c, y)):
        sink.log_metrics({"compute/device_hours": float(ci), "val/pass_rate": float(yi)}, step=step)
    sink.close(status)
    return rid


def test_history_prior_from_finished_runs_helps_a_young_run(tracking_uri, experiment):
    for seed in range(4):
        _log(tracking_uri, experiment, f"done{seed}", *family_run(seed))
    # neither a failed run nor another recipe's run takes part
    _log(tracking_uri, experiment, "broken", *family_run(9), status="FAILED")
    _log(tracking_uri, experiment, "other", np.linspace(0, 20000, 61), np.linspace(0.2, 0.3, 61), recipe="other")
    prior = history_prior(experiment, where={"recipe.name": "scalerl"}, tracking_uri=tracking_uri)
    assert prior.n_runs == 4
    c, y = family_run(200)
    until = 0.25 * c[-1]
    alone = fit_sigmoid(c, y, fit_until=until, n_boot=0)
    helped = fit_sigmoid(c, y, fit_until=until, n_boot=0, prior=prior)
    assert heldout_rmse(helped, c, y, until) < heldout_rmse(alone, c, y, until)


def test_history_prior_says_why_it_cannot_be_built(tracking_uri, experiment):
    _log(tracking_uri, experiment, "only", *family_run(0))
    with pytest.raises(UserError, match="at least 2 finished runs"):
        history_prior(experiment, tracking_uri=tracking_uri)
    with pytest.raises(UserError, match="no run parameter or metric 'nope'"):
        history_prior(experiment, where={"nope": 1}, tracking_uri=tracking_uri)
    with pytest.raises(UserError, match=r"did you mean recipe\.name\?") as e:
        history_prior(experiment, where={"recipe.nam": "scalerl"}, tracking_uri=tracking_uri)
    assert "run_id" not in str(e.value)  # the columns are counted, not all listed
