"""Issue 46 on a real run (the quickstart's engine at test size, on the shared Ray cluster): the
samples folder holds each step's kept groups and each evaluation's first completions within the
configured bound, MLflow (a real SQLite store) has them as artifacts, and the readers filter them."""

from __future__ import annotations

import pytest

from workbench import Session
from workbench.engine.run import launch as launch_module
from workbench.runs.samples import folder_bytes, step_files
from workbench.runs.view import RunView


@pytest.mark.slow
def test_a_short_run_keeps_its_samples_on_disk_and_in_mlflow_within_the_bound(ray_cluster, tiny_config, tmp_path):
    from mlflow import MlflowClient

    from workbench.tracking.store import create_run, ensure_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ensure_experiment("samples", uri)
    run_id = create_run("samples", "samples-run", {}, tracking_uri=uri)
    bound_mb = 0.04
    cfg = tiny_config({"train.max_steps": 6, "eval.every_steps": 3, "samples.val_cap": 6, "samples.max_mb": bound_mb,
                       "tracking.mlflow": True, "tracking.tracking_uri": uri, "tracking.run_id": run_id},
                      name="samples-run")  # fmt: skip
    summary = launch_module.run_to_end(cfg, timeout=300)
    assert summary["status"] == "finished"

    files = step_files(cfg.out_dir)
    assert folder_bytes(cfg.out_dir) <= bound_mb * 1024 * 1024
    assert 0 in files and 6 in files  # the first evaluation and the newest step always stay
    view = RunView.open(cfg.out_dir)
    df = view.samples()
    assert {"step", "prompt", "completion", "passed", "reward", "version"} <= set(df.columns)
    val = view.samples(step=0, kind="val")
    assert len(val) == 6 and (val["version"] == 0).all()  # the cap, sampled by the initial policy
    train = view.samples(kind="train")
    assert len(train) and (train.groupby("step").size() == 8).all()  # two groups of 4 a step kept
    assert (train["staleness"] >= 0).all() and (train["version"] <= train["step"]).all()
    assert train["prompt"].str.len().gt(0).all() and train["completion"].map(type).eq(str).all()
    session = Session.open(cfg.out_dir)  # Session.samples: the same reader, its filters
    failed = session.samples(passed=False)
    assert len(failed) == (~df["passed"]).sum() and not failed["passed"].any()
    assert session.samples(step=6)["step"].eq(6).all()

    arts = {a.path for a in MlflowClient(uri).list_artifacts(run_id, "samples")}
    assert arts == {f"samples/{p.name}" for ps in files.values() for p in ps}
