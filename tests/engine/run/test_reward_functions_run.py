"""reward.functions end to end: a short real run (builtin model, Ray local cluster, CPU) scored by a
TRL-style function and a graded bonus; a TRL-shaped function set that runs unchanged (one function
without a pass flag, None for a gold solution it cannot parse, trainer_state.max_steps read) and
the per-function metrics it logs; a function that fails mid-run stops it with one line; a bad path
is refused before Ray starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.engine.run.handle import RunFailed
from workbench.engine.run.launch import run_to_end
from workbench.engine.run.preflight import preflight
from workbench.errors import UserError
from workbench.tracking.sink import read_jsonl

pytestmark = pytest.mark.slow

HELPERS = Path(__file__).resolve().parents[2] / "helpers"
FUNCTIONS = [{"fn": "trl_rewards:correct_number", "weight": 1.0, "pass": True},
             {"fn": "trl_rewards:short_bonus", "weight": 0.5}]  # fmt: skip


@pytest.fixture(autouse=True)
def _helpers_importable(monkeypatch):
    """The driver imports the functions too (preflight), as the actors do through PYTHONPATH."""
    monkeypatch.syspath_prepend(str(HELPERS))


def _three_steps(cfg) -> tuple[list[dict], list[dict]]:
    """A 3-step run to its end: its train rows (3) and its evaluations (steps 0 and 3)."""
    summary = run_to_end(cfg, resume=False, timeout=300)
    assert summary["status"] == "finished" and summary["steps"] == 3
    rows = read_jsonl(f"{cfg.out_dir}/metrics.jsonl")
    train = [r for r in rows if "train/reward_mean" in r]
    evals = [r for r in rows if "val/pass_rate" in r]
    assert len(train) == 3 and [r["step"] for r in evals] == [0, 3]
    return train, evals


def test_a_run_trains_on_the_weighted_rewards_and_validates_on_the_pass_function(ray_cluster, tiny_config):
    cfg = tiny_config({"reward.functions": FUNCTIONS, "train.max_steps": 3, "eval.every_steps": 3}, name="rewardfns")
    train, evals = _three_steps(cfg)
    for r in train:
        # correct_number gives 0 or 1 and the bonus 0.5 / (1 + length) > 0: never the +1 / -1 of the task's checker
        assert 0.0 < r["train/reward_mean"] < 1.5
    for r in evals:
        assert 0.0 <= r["val/pass_rate"] <= 1.0
        assert r["val/verdict/pass"] + r["val/verdict/fail"] == 20.0  # 10 prompts x 2 samples, each judged by the pass function


def _solution_task(tmp_path: Path) -> dict:
    """A JSONL addition task with TRL's `solution` column; every third gold solution unparseable."""
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b), "solution": "see the figure" if (a * 7 + b) % 3 == 0 else str(a + b)}
            for a in range(10) for b in range(10)]  # fmt: skip
    path = tmp_path / "solutions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"name": "jsonl", "path": str(path), "num_val": 20, "checker": "exact"}


def test_a_trl_function_set_runs_unchanged_and_logs_each_functions_metrics(ray_cluster, tiny_config, tmp_path):
    """TRL's habits: the only function decides without a flag, its None (an unparseable gold
    solution) makes the sample not applicable (left out of val/pass_rate, counted), and TRL's
    rewards/<name>/mean and /std are logged for training and validation."""
    from workbench.tasks.base import load_task

    cfg = tiny_config({"task": _solution_task(tmp_path), "reward.functions": [{"fn": "trl_rewards:accuracy_reward"}],
                       "train.max_steps": 3, "eval.every_steps": 3}, name="trlset")  # fmt: skip
    train, evals = _three_steps(cfg)
    for r in train:
        assert 0.0 <= r["rewards/accuracy_reward/mean"] <= 1.0 and r["rewards/accuracy_reward/std"] >= 0.0
        given = r["reward/verdict/pass"] + r["reward/verdict/fail"]
        assert r["rewards/accuracy_reward/mean"] == pytest.approx(r["reward/verdict/pass"] / given)  # 1.0 pass, 0.0 fail
        assert r["rewards/accuracy_reward/none"] == r["reward/verdict/not_applicable"]
    assert sum(r["reward/verdict/not_applicable"] for r in train) > 0  # a third of the prompts: some were drawn
    unparsed = sum(ex.columns["solution"] == "see the figure" for ex in load_task(cfg.task).val[:10])  # eval.num_prompts
    assert 0 < unparsed < 10
    for r in evals:
        assert r["val/verdict/not_applicable"] == 2.0 * unparsed and r["val/prompts"] == 10.0 - unparsed
        assert r["val/verdict/pass"] + r["val/verdict/fail"] == 2.0 * (10 - unparsed)
        assert r["val/rewards/accuracy_reward/mean"] == pytest.approx(r["val/verdict/pass"] / (2.0 * (10 - unparsed)))
        assert r["val/rewards/accuracy_reward/none"] == 2.0 * unparsed


def test_trainer_state_carries_the_optimizer_step_and_max_steps(ray_cluster, tiny_config, tmp_path):
    """Two functions, none marked: the task's checker decides; `progress` reads
    trainer_state.global_step / max_steps. Under `sync` each step's rollouts are scored by the
    policy of the step before, so its value at step s is (s - 1) / max_steps."""
    functions = [{"fn": "trl_rewards:accuracy_reward"}, {"fn": "trl_rewards:progress", "weight": 0.0}]
    cfg = tiny_config({"task": _solution_task(tmp_path), "reward.functions": functions, "train.max_steps": 3,
                       "eval.every_steps": 3, "recipe.off_policy.algorithm": "sync", "recipe.off_policy.k": 1}, name="trlstate")  # fmt: skip
    summary = run_to_end(cfg, resume=False, timeout=300)
    assert summary["status"] == "finished"
    rows = read_jsonl(f"{cfg.out_dir}/metrics.jsonl")
    train = [r for r in rows if "train/reward_mean" in r]
    assert [r["rewards/progress/mean"] for r in train] == pytest.approx([0.0, 1 / 3, 2 / 3])
    assert all(r["reward/verdict/not_applicable"] == 0.0 for r in train)  # the checker decides: never not applicable
    assert all(r["val/verdict/pass"] + r["val/verdict/fail"] == 20.0 for r in rows if "val/pass_rate" in r)


def test_a_function_failing_mid_run_stops_it_with_one_line(ray_cluster, tiny_config):
    functions = [FUNCTIONS[0], {"fn": "trl_rewards:always_raises", "weight": 1.0}]
    cfg = tiny_config({"reward.functions": functions, "train.max_steps": 3, "eval.at_start": False}, name="rewardfail")
    with pytest.raises(RunFailed) as e:
        run_to_end(cfg, resume=False, timeout=300)
    msg = str(e.value).splitlines()[0]
    assert "reward function trl_rewards:always_raises raised RuntimeError: the scoring service is down on example" in msg
    assert "the batch is not trained on" in msg
    assert not [r for r in read_jsonl(f"{cfg.out_dir}/metrics.jsonl") if "train/loss" in r]  # no step trained


def test_a_bad_path_is_refused_before_ray(tiny_config):
    cfg = tiny_config({"reward.functions": [{"fn": "trl_rewards:nope", "pass": True}]}, name="badpath")
    with pytest.raises(UserError, match=r"^reward.functions: cannot import 'trl_rewards:nope'"):
        preflight(cfg, build_model=False)
