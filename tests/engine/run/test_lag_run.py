"""generation.max_ahead_steps auto on a real Ray run: a trainer far slower than generation gets no
lag (on-policy: every step trains rollouts of the current version), generation far slower than the
trainer gets steps ahead; the depth is logged each step (gen/ahead_steps) and the report says why."""

from __future__ import annotations

import pytest

from workbench.engine.run import launch as launch_module
from workbench.runs.report import engine_summary_line
from workbench.tracking.sink import read_jsonl

pytestmark = pytest.mark.slow

SLOW_TRAINER = {"generation.max_new_tokens": 2, "train.micro_batch_size": 1, "train.generations_per_prompt": 4}
# an untrained model rarely stops early: every completion decodes all 40 tokens, one forward each
# (and passes rarely, so most steps are skipped: the trainer's time per step is near 0)
SLOW_GENERATION = {"generation.max_new_tokens": 40, "train.micro_batch_size": 64, "model.sft_steps": 1, "model.sft_lr": 1e-9,
                   "model.sft_target_pass_rate": None}  # fmt: skip


def _auto_run(tiny_config, overrides: dict, name: str):
    cfg = tiny_config({"generation.max_ahead_steps": "auto", "recipe.off_policy.k": 3, "train.max_steps": 8,
                       "eval.every_steps": 8, **overrides}, name=name)  # fmt: skip
    summary = launch_module.run_to_end(cfg, timeout=300)
    assert summary["status"] == "finished", summary.get("error")
    rows = [r for r in read_jsonl(f"{cfg.out_dir}/metrics.jsonl") if "gen/ahead_steps" in r]  # every step's row
    return summary, rows


def test_a_slow_trainer_runs_on_policy(ray_cluster, tiny_config):
    summary, rows = _auto_run(tiny_config, SLOW_TRAINER, "lag-slow-trainer")
    p = summary["pipeline"]
    assert p["train_seconds_per_step"] > p["gen_seconds_per_step"] and p["depth"] == 0
    assert [r["gen/ahead_steps"] for r in rows][:2] == [1.0, 1.0] and rows[-1]["gen/ahead_steps"] == 0.0
    assert any("auto: 1 -> 0" in e and "the trainer is the bottleneck" in e for e in summary["events"])
    # on-policy after the switch: the last steps trained rollouts of the version they were sampled with
    assert all(r.get("train/staleness_max", 0) == 0 for r in rows[-2:])
    assert "pipeline depth auto: 0 step(s) ahead at the end (the trainer is the bottleneck" in engine_summary_line(summary)


def test_slow_generation_runs_steps_ahead(ray_cluster, tiny_config):
    summary, rows = _auto_run(tiny_config, SLOW_GENERATION, "lag-slow-gen")
    p = summary["pipeline"]
    assert p["gen_seconds_per_step"] > 2 * p["train_seconds_per_step"] and p["depth"] >= 2
    assert rows[-1]["gen/ahead_steps"] >= 2.0
    assert "generation is the bottleneck" in engine_summary_line(summary)
