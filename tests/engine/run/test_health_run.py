"""Issue 46 on a real run: the mismatch measured at step 1 (same weights on both sides), the
run-health flags in summary.json, and the flags as MLflow tags (a real SQLite store)."""

from __future__ import annotations

import json

import pytest

from workbench.engine.run import launch as launch_module
from workbench.engine.run.metrics import RunLog
from workbench.tracking.sink import read_jsonl


@pytest.mark.slow
def test_a_short_run_logs_the_mismatch_near_zero_at_step_one_and_summary_health(ray_cluster, tiny_config):
    # sync: every token of step 1 was sampled by version 0, the trainer's version before its update
    cfg = tiny_config({"recipe.off_policy.algorithm": "sync", "recipe.off_policy.k": 1, "train.max_steps": 2}, name="mismatch")
    summary = launch_module.run_to_end(cfg, timeout=300)
    assert summary["status"] == "finished"
    first = next(r for r in read_jsonl(f"{cfg.out_dir}/metrics.jsonl") if r["step"] == 1 and "train/loss" in r)
    assert first["train/mismatch_tokens"] > 0
    assert first["train/mismatch_tokens"] <= first["train/tokens_trained"]
    assert 0.0 <= first["train/mismatch_kl"] < 1e-4  # the torch generator and the trainer: the same fp32 model
    assert first["train/mismatch_ratio_max"] == pytest.approx(1.0, abs=1e-2)
    assert first["train/mismatch_frac"] == 0.0
    written = json.loads(open(f"{cfg.out_dir}/summary.json").read())
    assert written["health"] == []  # two healthy steps: no flag, and the key is there


def test_health_flags_become_mlflow_tags(tmp_path, tiny_config):
    from mlflow import MlflowClient

    from workbench.tracking.mlflow_sink import MlflowSink
    from workbench.tracking.store import create_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rid = create_run("health", "flagged", tracking_uri=uri)
    log = RunLog(tmp_path, sinks=[MlflowSink(rid, uri)])
    rows = [{"step": s, "train/zero_variance_frac": 0.2 if s < 8 else 1.0} for s in range(1, 16)]
    cfg = tiny_config()
    flags = log.tag_health(rows, cfg)
    assert [(f.rule, f.step) for f in flags] == [("zero_variance", 8)]
    assert log.tag_health(rows[:7], cfg) == []
    tags = MlflowClient(uri).get_run(rid).data.tags
    assert tags["health/zero_variance"] == flags[0].message
    assert f"`workbench samples {cfg.output_dir()} --step 8`" in tags["health/zero_variance"]  # the run's folder
