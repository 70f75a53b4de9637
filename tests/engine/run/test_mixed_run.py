"""A tiny math + code run on a real Ray local cluster: per-domain metrics, verdicts, the reward pool."""

from __future__ import annotations

import json

import pytest

from workbench.engine.run.launch import run_to_end
from workbench.tracking.sink import read_jsonl

pytestmark = pytest.mark.slow

MIX = [
    {"name": "addition", "difficulty": 1, "domain": "math", "num_train": 60, "num_val": 10},
    {"name": "pyexpr", "difficulty": 1, "domain": "code", "num_train": 60, "num_val": 10},
]
VERDICTS = ("pass", "fail", "timeout", "error", "sandbox_error")


def test_a_mixed_run_records_each_domain_and_every_verdict(ray_cluster, tiny_config):
    cfg = tiny_config({"task.mix": MIX, "train.max_steps": 4, "train.prompts_per_step": 8, "eval.every_steps": 2,
                       "generation.max_new_tokens": 5}, name="mixed")  # fmt: skip
    summary = run_to_end(cfg, resume=False, timeout=300)
    assert summary["status"] == "finished" and summary["steps"] == 4
    rows = read_jsonl(f"{cfg.out_dir}/metrics.jsonl")
    train = [r for r in rows if "train/reward_mean" in r]
    evals = [r for r in rows if "val/pass_rate" in r]
    assert len(train) == 4 and [r["step"] for r in evals] == [0, 2, 4]
    for r in evals:
        for d in ("math", "code"):
            assert 0.0 <= r[f"val/pass_rate/{d}"] <= 1.0 and r[f"val/pass_rate_se/{d}"] >= 0.0
            assert r[f"val/prompts/{d}"] == 10.0
        assert r["val/pass_rate"] == pytest.approx((r["val/pass_rate/math"] + r["val/pass_rate/code"]) / 2)
        # every validation sample got a verdict: 2 domains x 10 prompts x 2 samples
        assert sum(r[f"val/verdict/{v}"] for v in VERDICTS) == 40
    samples = cfg.train.prompts_per_step * cfg.train.generations_per_prompt
    checked = 0
    for r in train:
        assert {f"reward/verdict/{v}" for v in VERDICTS} <= set(r) and "time/reward_wait" in r
        assert r["reward/verdict/sandbox_error"] == 0.0
        checked += sum(r[f"reward/verdict/{v}"] for v in VERDICTS)
        domains = {k.rsplit("/", 1)[1] for k in r if k.startswith("train/reward_mean/")}
        assert domains <= {"math", "code"} and domains  # a step has samples of at least one domain
        assert all(f"gen/length_mean/{d}" in r for d in domains)
    assert checked >= 4 * samples  # every generated sample was checked (more may wait in the buffer)
    assert summary["domains"] == ["math", "code"]
    assert sum(summary["reward_verdicts"].values()) == checked
    assert 0.0 <= summary["reward_wait_share"] < 1.0
    assert summary["val_pass_rate_first/code"] == evals[0]["val/pass_rate/code"]
    on_disk = json.loads((cfg.output_dir() / "summary.json").read_text())
    assert on_disk["domains"] == ["math", "code"] and "reward_wait_seconds" in on_disk


def test_a_single_task_run_keeps_its_metric_names(ray_cluster, tiny_config):
    cfg = tiny_config({"train.max_steps": 2}, name="single")
    summary = run_to_end(cfg, resume=False, timeout=300)
    rows = read_jsonl(f"{cfg.out_dir}/metrics.jsonl")
    names = {k for r in rows for k in r}
    assert {"val/pass_rate", "val/pass_rate_se", "train/reward_mean", "reward/verdict/pass"} <= names
    assert not any(k.startswith(("val/pass_rate/", "train/reward_mean/", "gen/length_mean/")) for k in names)
    assert summary["domains"] == [] and summary["reward_verdicts"]["pass"] + summary["reward_verdicts"]["fail"] > 0
