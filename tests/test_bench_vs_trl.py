"""benchmarks/bench_vs_trl.py without TRL or a model: the shared reward scores a completion the same
whether TRL or the workbench calls it, TRL trains on the workbench's training split, and the
comparison's figures are right on fixed numbers."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_vs_trl

    return bench_vs_trl


COMPLETIONS = ["7 + 5 = 12.", "The answer is 11", "12.0", "To add 7 and 5, you take 7 and"]
EXPECTED = [1.0, -1.0, 1.0, -1.0]  # the last number decides; a cut-off ramble ends on a wrong one


def test_the_reward_scores_the_same_called_by_trl_or_by_the_workbench(bench):
    from vs_trl import sum_correct

    from workbench.rl.reward_functions import RewardState, load_reward_functions, score_batch

    prompt = [{"role": "system", "content": bench.SYSTEM_PROMPT}, {"role": "user", "content": "What is 7 + 5?"}]
    conversational = [[{"role": "assistant", "content": c}] for c in COMPLETIONS]
    # GRPOTrainer's call: keywords only, the dataset's other columns among them
    by_trl = sum_correct(prompts=[prompt] * 4, completions=conversational, completion_ids=[[1]] * 4,
                         trainer_state=RewardState(0), answer=["12"] * 4)  # fmt: skip
    fns = load_reward_functions([{"fn": "vs_trl:sum_correct"}])  # TRL's shape: the only function decides, no flag
    by_workbench = score_batch(fns, [prompt] * 4, conversational, {"answer": ["12"] * 4, "task_passed": [False] * 4},
                               example_ids=[0, 1, 2, 3])  # fmt: skip
    assert by_trl == by_workbench.rewards == EXPECTED
    assert by_workbench.passed == [True, False, True, False]
    assert sum_correct([prompt] * 4, COMPLETIONS, ["12"] * 4) == EXPECTED  # plain-text completions too


def test_trl_trains_on_the_workbench_training_split_with_the_system_turn(bench, tmp_path):
    from workbench.config import run_config_from_dict
    from workbench.tasks.base import load_task

    a = argparse.Namespace(seed=0, cache=str(tmp_path), eval_prompts=16, backend="torch", tokens=16, prompts=4,
                           generations=4, steps=6, workbench_steps=12, lr=1e-5, eval_every=3, eval_samples=2, threads=2)  # fmt: skip
    settings = bench.run_settings(a, tmp_path / "model", bench.write_sums(tmp_path / "sums.jsonl"))
    spec = bench.trl_spec("trl", a, settings, tmp_path / "out")
    task = load_task(run_config_from_dict(settings).task)
    assert [r["prompt"][-1]["content"] for r in spec["train"]] == [ex.prompt for ex in task.train]
    assert all(r["prompt"][0] == {"role": "system", "content": bench.SYSTEM_PROMPT} for r in spec["train"])
    assert [r["answer"] for r in spec["train"]] == [ex.answer for ex in task.train]
    assert not {ex.prompt for ex in task.val} & {r["prompt"][-1]["content"] for r in spec["train"]}
    assert (spec["generations"], spec["prompts"], spec["tokens"], spec["save_steps"], spec["vllm"]) == (4, 4, 16, 3, False)
    assert (spec["steps"], settings["train"]["max_steps"]) == (6, 12)  # the workbench may run on past TRL's step N
    assert spec["eps_max"] == 4.0  # the workbench recipe's CISPO cap is TRL's epsilon_high


def test_the_comparison_on_fixed_numbers(bench):
    P, S = bench.Point, bench.Side
    trl = S("trl", [P(0, 0.20, 0.05, 0.0), P(5, 0.28, 0.05, 100.0), P(10, 0.40, 0.05, 200.0)])
    wb = S("workbench", [P(0, 0.20, 0.05, 0.0), P(5, 0.35, 0.05, 60.0), P(10, 0.45, 0.05, 90.0)])
    c = bench.compare(trl, wb)
    assert (c["target"], c["workbench_step"], c["workbench_s"], c["trl_s"]) == (0.40, 10, 90.0, 200.0)
    assert c["ratio"] == pytest.approx(0.45) and c["met"]
    assert bench.sequences_per_second(wb.points[1], 64) == pytest.approx(5 * 64 / 60.0)
    assert bench.sequences_per_second(wb.points[0], 64) is None
    slow = S("workbench", [P(0, 0.20, 0.05, 0.0), P(5, 0.41, 0.05, 150.0)])
    assert bench.compare(trl, slow)["ratio"] == pytest.approx(0.75) and not bench.compare(trl, slow)["met"]
    never = bench.compare(trl, S("workbench", [P(0, 0.2, 0.05, 0.0), P(5, 0.3, 0.05, 50.0)]))
    assert never["ratio"] is None and never["workbench_step"] is None
    flat = bench.compare(S("trl", [P(0, 0.20, 0.05, 0.0), P(5, 0.15, 0.05, 100.0)]), wb)
    assert not flat["gained"] and flat["ratio"] is None  # nothing to reach: not a ratio of 0
    printed = bench.table([trl, S("trl-vllm", error="AttributeError: x"), wb], 64)
    assert "ratio 0.45 (meets the target <= 0.5)" in printed and "trl-vllm   did not run: AttributeError: x" in printed
    assert [c["trl_side"] for c in bench.comparisons([trl, S("trl-vllm", error="x"), wb])] == ["trl"]


def test_trl_missing_is_one_line(bench, monkeypatch):
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit, match="TRL is not installed; pip install --no-deps trl==1.16.0"):
        bench.main(["--sides", "trl"])
