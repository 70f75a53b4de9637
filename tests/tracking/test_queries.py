"""runs_frame / run_curve read back what MlflowSink wrote to a real SQLite store."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.errors import UserError
from workbench.tracking.mlflow_sink import MlflowSink
from workbench.tracking.queries import metric_history, run_curve, runs_frame
from workbench.tracking.store import create_run


def _logged_run(uri, experiment, name, recipe, parent=None):
    rid = create_run(experiment, name, {"team": "rl"}, parent_run_id=parent, tracking_uri=uri)
    sink = MlflowSink(rid, uri)
    sink.log_config({"recipe": {"name": recipe}, "train": {"lr": 5e-7}})
    for step in range(0, 50, 10):
        sink.log_metrics({"compute/device_hours": step * 0.1, "compute/flops": step * 1e9}, step=step)
        if step % 20 == 0:  # evals less often than the compute counters
            sink.log_metrics({"val/pass_rate": 0.2 + step / 100}, step=step)
    sink.log_metrics({"fit/A": 0.61}, step=40)
    return rid


def test_runs_frame_one_row_per_run_with_params_and_metrics(tracking_uri, experiment):
    a = _logged_run(tracking_uri, experiment, "a", "scalerl")
    b = _logged_run(tracking_uri, experiment, "b", "scalerl-loo-no-fp32", parent=a)
    MlflowSink(b, tracking_uri).close("FAILED")
    frame = runs_frame(experiment=experiment, tracking_uri=tracking_uri)
    assert list(frame["run_id"]) == [a, b]
    assert list(frame["name"]) == ["a", "b"]
    assert list(frame["status"]) == ["RUNNING", "FAILED"]
    assert list(frame["recipe.name"]) == ["scalerl", "scalerl-loo-no-fp32"]
    assert list(frame["fit/A"]) == [0.61, 0.61]
    assert frame.loc[1, "parent_run_id"] == a and pd.isna(frame.loc[0, "parent_run_id"])
    assert list(frame["tags.team"]) == ["rl", "rl"]
    assert not any(c.startswith("tags.mlflow.") for c in frame.columns)


def test_runs_frame_by_ids_and_unknowns(tracking_uri, experiment):
    a = _logged_run(tracking_uri, experiment, "a", "scalerl")
    frame = runs_frame(run_ids=[a], tracking_uri=tracking_uri)
    assert list(frame["run_id"]) == [a]
    with pytest.raises(UserError, match="no MLflow experiment named 'nope'.*known"):
        runs_frame(experiment="nope", tracking_uri=tracking_uri)
    with pytest.raises(UserError, match="no MLflow run"):
        runs_frame(run_ids=["f" * 32], tracking_uri=tracking_uri)


def test_empty_experiment_gives_empty_frame_with_columns(tracking_uri, experiment):
    frame = runs_frame(experiment=experiment, tracking_uri=tracking_uri)
    assert frame.empty and "run_id" in frame.columns


def test_run_curve_joins_on_step(tracking_uri, experiment):
    rid = _logged_run(tracking_uri, experiment, "a", "scalerl")
    curve = run_curve(rid, tracking_uri=tracking_uri)
    assert list(curve.columns) == ["step", "x", "y"]
    assert list(curve["step"]) == [0, 20, 40]  # only steps where both metrics exist
    assert curve["x"].tolist() == pytest.approx([0.0, 2.0, 4.0])
    assert curve["y"].tolist() == pytest.approx([0.2, 0.4, 0.6])
    assert curve.attrs["metric"] == "val/pass_rate" and curve.attrs["x"] == "compute/device_hours"
    flops = run_curve(rid, x="compute/flops", tracking_uri=tracking_uri)
    assert flops["x"].tolist() == pytest.approx([0.0, 2e10, 4e10])
    by_step = run_curve(rid, x="step", tracking_uri=tracking_uri)
    assert by_step["x"].tolist() == [0.0, 20.0, 40.0]


def test_run_curve_keeps_last_value_of_a_repeated_step(tracking_uri, experiment):
    rid = create_run(experiment, "r", tracking_uri=tracking_uri)
    sink = MlflowSink(rid, tracking_uri)
    sink.log_metrics({"val/pass_rate": 0.1, "compute/device_hours": 1.0}, step=5)
    sink.log_metrics({"val/pass_rate": 0.3}, step=5)  # e.g. a resumed run re-evaluated step 5
    assert metric_history(rid, "val/pass_rate", tracking_uri).to_dict() == {5: 0.3}
    assert run_curve(rid, tracking_uri=tracking_uri)["y"].tolist() == [0.3]


def test_run_curve_missing_metric_names_what_exists(tracking_uri, experiment):
    rid = _logged_run(tracking_uri, experiment, "a", "scalerl")
    with pytest.raises(UserError, match=r"no metric 'val/score'.*val/pass_rate"):
        run_curve(rid, metric="val/score", tracking_uri=tracking_uri)


def test_reading_a_missing_store_is_a_user_error_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for read in (lambda: runs_frame(experiment="x", tracking_uri="mlflow.db"),
                 lambda: run_curve("f" * 32, tracking_uri="mlflow.db"),
                 lambda: metric_history("f" * 32, "a", tracking_uri="mlflow.db")):
        with pytest.raises(UserError, match="no MLflow store at"):
            read()
    assert list(tmp_path.iterdir()) == []


def test_run_curve_missing_metric_names_a_few_close_ones_not_all(tracking_uri, experiment):
    rid = create_run(experiment, "many", tracking_uri=tracking_uri)
    sink = MlflowSink(rid, tracking_uri)
    sink.log_metrics({f"train/m{i:02d}": float(i) for i in range(30)} | {"compute/flops": 1.0}, step=0)
    sink.close("FINISHED")
    with pytest.raises(UserError) as e:
        run_curve(rid, metric="train/m01", x="compute/flop", tracking_uri=tracking_uri)
    msg = str(e.value)
    assert "no metric 'compute/flop'" in msg and "close: compute/flops" in msg and "of 31 metrics" in msg
    assert msg.count("train/m") <= 3  # not the whole list
