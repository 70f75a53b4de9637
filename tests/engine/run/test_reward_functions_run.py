"""reward.functions end to end: a short real run (builtin model, Ray local cluster, CPU) scored by a
TRL-style function and a graded bonus; a function that fails mid-run stops it with one line; a bad
path is refused before Ray starts."""

from __future__ import annotations

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


def test_a_run_trains_on_the_weighted_rewards_and_validates_on_the_pass_function(ray_cluster, tiny_config):
    cfg = tiny_config({"reward.functions": FUNCTIONS, "train.max_steps": 3, "eval.every_steps": 3}, name="rewardfns")
    summary = run_to_end(cfg, resume=False, timeout=300)
    assert summary["status"] == "finished" and summary["steps"] == 3
    rows = read_jsonl(f"{cfg.out_dir}/metrics.jsonl")
    train = [r for r in rows if "train/reward_mean" in r]
    evals = [r for r in rows if "val/pass_rate" in r]
    assert len(train) == 3 and [r["step"] for r in evals] == [0, 3]
    for r in train:
        # correct_number gives 0 or 1 and the bonus 0.5 / (1 + length) > 0: never the +1 / -1 of the task's checker
        assert 0.0 < r["train/reward_mean"] < 1.5
    for r in evals:
        assert 0.0 <= r["val/pass_rate"] <= 1.0
        assert r["val/verdict/pass"] + r["val/verdict/fail"] == 20.0  # 10 prompts x 2 samples, each judged by the pass function


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
