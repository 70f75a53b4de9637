"""MlflowSink against a real SQLite MLflow store: params, metric batches, artifacts, status."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field

import pytest
from mlflow import MlflowClient

from workbench.errors import UserError
from workbench.tracking.mlflow_sink import MAX_PARAM_VALUE, MlflowSink, config_params
from workbench.tracking.sink import MetricSink
from workbench.tracking.store import create_run


@dataclass
class _Loss:
    type: str = "cispo"
    eps_max: float = 4.0


@dataclass
class _Cfg:
    name: str = "r"
    loss: _Loss = field(default_factory=_Loss)
    betas: list = field(default_factory=lambda: [0.9, 0.999])
    note: str = "x" * 7000


@pytest.fixture
def run_id(tracking_uri, experiment):
    return create_run(experiment, "sink-test", tracking_uri=tracking_uri)


def test_is_a_metric_sink(run_id, tracking_uri):
    assert isinstance(MlflowSink(run_id, tracking_uri), MetricSink)


def test_log_config_flattens_and_truncates(run_id, tracking_uri):
    sink = MlflowSink(run_id, tracking_uri)
    sink.log_config(_Cfg())
    params = MlflowClient(tracking_uri).get_run(run_id).data.params
    assert params["loss.type"] == "cispo"
    assert params["loss.eps_max"] == "4.0"
    assert params["betas"] == "[0.9, 0.999]"
    assert len(params["note"]) == MAX_PARAM_VALUE and params["note"].endswith("[truncated]")


def test_log_config_twice_keeps_first_value_and_tags_changes(run_id, tracking_uri):
    sink = MlflowSink(run_id, tracking_uri)
    sink.log_config({"train": {"lr": 1e-6}, "seed": 0})
    sink.log_config({"train": {"lr": 1e-6}, "seed": 1})  # a resumed run with a changed value
    data = MlflowClient(tracking_uri).get_run(run_id).data
    assert data.params == {"train.lr": "1e-06", "seed": "0"}
    assert data.tags["config.seed"] == "1"


def test_config_params_rejects_non_mappings():
    with pytest.raises(UserError, match="mapping"):
        config_params(["a", "b"])


def test_metrics_with_slashes_and_steps(run_id, tracking_uri):
    sink = MlflowSink(run_id, tracking_uri)
    for step in range(3):
        sink.log_metrics(
            {"val/pass_rate": 0.1 * step, "compute/device_hours": 0.5 * step, "compute/flops": 1e12 * step,
             "skipped": None, "bad": "text", "nan": float("nan"), "inf": float("inf")},
            step=step,
        )
    c = MlflowClient(tracking_uri)
    hist = c.get_metric_history(run_id, "val/pass_rate")
    assert [(m.step, round(m.value, 6)) for m in hist] == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert [m.value for m in c.get_metric_history(run_id, "compute/flops")] == [0.0, 1e12, 2e12]
    metrics = c.get_run(run_id).data.metrics
    assert "skipped" not in metrics and "bad" not in metrics
    assert math.isnan(metrics["nan"])
    assert metrics["inf"] > 1e300


def test_large_batch_is_split(run_id, tracking_uri):
    sink = MlflowSink(run_id, tracking_uri)
    sink.log_metrics({f"m/{i}": float(i) for i in range(1500)}, step=7)  # > MLflow's 1000 per batch
    metrics = MlflowClient(tracking_uri).get_run(run_id).data.metrics
    assert len(metrics) == 1500 and metrics["m/1499"] == 1499.0


def test_artifacts_and_close(run_id, tracking_uri, tmp_path):
    f = tmp_path / "metrics.jsonl"
    f.write_text('{"step": 0}\n')
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    sink = MlflowSink(run_id, tracking_uri)
    sink.log_artifact(f)
    sink.log_artifact(folder, artifact_path="ckpt")
    with pytest.warns(RuntimeWarning, match="log_artifact"):
        sink.log_artifact(tmp_path / "missing.txt")  # warned, never raised into training
    c = MlflowClient(tracking_uri)
    names = {a.path for a in c.list_artifacts(run_id)}
    assert {"metrics.jsonl", "ckpt"} <= names
    assert [a.path for a in c.list_artifacts(run_id, "ckpt")] == ["ckpt/a.txt"]
    with pytest.raises(UserError, match="status"):
        sink.close("DONE")
    sink.close("killed")
    sink.close("FINISHED")  # second close is a no-op
    assert c.get_run(run_id).info.status == "KILLED"


def test_logging_failure_warns_instead_of_raising(tracking_uri):
    sink = MlflowSink("0" * 32, tracking_uri)  # no such run
    with pytest.warns(RuntimeWarning, match="log_metrics") as caught:
        sink.log_metrics({"a": 1.0}, step=0)  # must not raise into the training loop
    assert len(caught) >= 1


def test_pickles_without_its_client(run_id, tracking_uri):
    sink = MlflowSink(run_id, tracking_uri)
    sink.log_metrics({"a": 1.0}, step=0)  # builds the client
    clone = pickle.loads(pickle.dumps(sink))
    clone.log_metrics({"a": 2.0}, step=1)
    assert [m.value for m in MlflowClient(tracking_uri).get_metric_history(run_id, "a")] == [1.0, 2.0]


@pytest.mark.slow
def test_two_processes_log_to_one_sqlite_store_at_once(tracking_uri, experiment):
    """The store exists (parent made it); two writers at once must lose nothing."""
    runs = [create_run(experiment, f"w{i}", tracking_uri=tracking_uri) for i in range(2)]
    code = textwrap.dedent(
        """
        import sys
        from workbench.tracking.mlflow_sink import MlflowSink
        sink = MlflowSink(sys.argv[1], sys.argv[2])
        sink.log_config({"worker": sys.argv[1]})
        for step in range(40):
            sink.log_metrics({"val/pass_rate": step / 40, "compute/flops": float(step)}, step=step)
        sink.close("FINISHED")
        """
    )
    procs = [subprocess.Popen([sys.executable, "-W", "error::RuntimeWarning", "-c", code, r, tracking_uri]) for r in runs]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    c = MlflowClient(tracking_uri)
    for r in runs:
        assert len(c.get_metric_history(r, "val/pass_rate")) == 40
        assert c.get_run(r).info.status == "FINISHED"
