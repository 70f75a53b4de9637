"""fit_runs: fit and compare MLflow runs' curves, read back from a real SQLite store."""

from __future__ import annotations

import pytest

from workbench.errors import UserError
from workbench.runs.fits import fit_runs
from workbench.tracking.mlflow_sink import MlflowSink
from workbench.tracking.store import create_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """Two runs with sigmoid curves of different ceilings (A 0.6 and 0.4)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    ids = {}
    for name, A in (("high", 0.6), ("low", 0.4)):
        rid = create_run("fits", name, tracking_uri=uri)
        sink = MlflowSink(rid, uri)
        for step in range(0, 200, 10):
            C = step * 0.01
            pass_rate = 0.1 + (A - 0.1) / (1 + (0.5 / C) ** 1.5) if C else 0.1
            sink.log_metrics({"compute/device_hours": C, "val/pass_rate": pass_rate}, step=step)
        sink.close("FINISHED")
        ids[name] = rid
    return uri, ids


def test_runs_by_name_or_as_a_plain_list_of_ids(runs):
    uri, ids = runs
    named = fit_runs(ids, tracking_uri=uri, n_boot=0)
    assert named.comparison.winner == "high"
    assert named.fits["high"].A == pytest.approx(0.6, abs=0.02) and named.fits["low"].A == pytest.approx(0.4, abs=0.02)
    listed = fit_runs(list(ids.values()), tracking_uri=uri, n_boot=0)  # each named by its run id
    assert listed.comparison.winner == ids["high"]


def test_runs_that_are_not_a_dict_or_list_are_refused(runs):
    uri, ids = runs
    with pytest.raises(UserError, match="runs must be a dict"):
        fit_runs(ids["high"], tracking_uri=uri)  # one id as a bare string


def test_run_labels_show_the_recipe_and_keep_runs_of_one_recipe_apart(runs):
    from workbench.runs.fits import run_labels
    from workbench.tracking.queries import runs_frame

    uri, ids = runs
    MlflowSink(ids["high"], uri).log_config({"recipe": {"name": "scalerl"}})
    twin = create_run("fits", "high", tracking_uri=uri)  # the same run name and recipe again
    MlflowSink(twin, uri).log_config({"recipe": {"name": "scalerl"}})
    labels = run_labels(runs_frame(experiment="fits", tracking_uri=uri))
    assert labels[ids["low"]] == "low"  # no recipe logged: the run name
    assert labels[ids["high"]] == f"scalerl (high)-{ids['high'][:6]}" and labels[twin] == f"scalerl (high)-{twin[:6]}"
