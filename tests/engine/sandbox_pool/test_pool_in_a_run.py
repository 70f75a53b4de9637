"""A code run whose reward actor is killed mid-run: the run completes, every step once, and no check
is scored on the failure (its checks re-run on a fresh actor), as the trainer and generator kills
are tested (tests/engine/run/test_coordinator.py)."""

from __future__ import annotations

import time

import pytest

from workbench.engine.sandbox_pool.pool import ACTOR_PREFIX
from workbench.engine.run.launch import launch
from workbench.tracking.sink import read_jsonl

pytestmark = pytest.mark.slow


def test_a_reward_actor_killed_mid_run_loses_no_step_and_scores_nothing_on_the_failure(ray_cluster, tiny_config):
    import ray

    cfg = tiny_config({"task.name": "pyexpr", "task.difficulty": 1, "task.num_train": 60, "task.num_val": 10,
                       "train.max_steps": 6, "generation.max_new_tokens": 5}, name="rewardkill")  # fmt: skip
    handle = launch(cfg)
    try:
        handle.start()
        deadline = time.time() + 240
        while handle.status()["step"] < 2 and time.time() < deadline:
            time.sleep(0.05)
        names = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(ACTOR_PREFIX)]
        assert names, "no reward actor to kill"
        ray.kill(ray.get_actor(names[0]["name"], namespace=names[0]["namespace"]), no_restart=True)
        summary = handle.wait(timeout=300)
    finally:
        handle.kill()
    assert summary["status"] == "finished" and summary["steps"] == 6, summary.get("events")
    train = [r for r in read_jsonl(f"{cfg.out_dir}/metrics.jsonl") if "train/loss" in r or "train/skipped" in r]
    assert [r["step"] for r in train] == list(range(1, 7))
    assert all(r["reward/verdict/sandbox_error"] == 0.0 and r["reward/dropped_groups"] == 0.0 for r in train)
    assert summary["reward_verdicts"]["sandbox_error"] == 0
