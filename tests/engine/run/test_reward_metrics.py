"""The run's reward records: the pool's size, each step's reward row, the summary's reward facts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workbench.config import load_run_config
from workbench.engine.batch import Chunk, Group, PackedGroups
from workbench.engine.model.sampling import Completion
from workbench.engine.run.reward_metrics import add_chunk, fresh_reward_stats, reward_pool_size, reward_summary, step_reward_row
from workbench.tasks.types import Example


def test_the_pool_takes_the_cpus_the_run_leaves_free():
    cfg = load_run_config(None, {"resources.generator_cpus": 1, "resources.trainer_cpus": 1})
    assert reward_pool_size(cfg, 2.0) == (1, 0.0)  # none free: one worker sharing the cores
    assert reward_pool_size(cfg, 2.5) == (1, 0.5)
    assert reward_pool_size(cfg, 10.0) == (8, 1.0)
    fixed = load_run_config(None, {"resources.reward_workers": 3, "resources.generator_cpus": 1, "resources.trainer_cpus": 1})
    assert reward_pool_size(fixed, 4.0) == (3, pytest.approx(2 / 3, abs=1e-3))


def group(pid: int, rewards: list[float], length: int) -> Group:
    comps = [Completion([1], [2] * length, [-0.1] * length, [0] * length, [True] * length, True) for _ in rewards]
    return Group(pid, 0, comps, [r > 0 for r in rewards], rewards)


def test_a_step_row_has_per_domain_rewards_lengths_verdicts_and_the_reward_wait():
    task = SimpleNamespace(
        train=[Example(0, "a", "", "math"), Example(1, "b", "", "code"), Example(2, "c", "", "code")],
        parts={"math": None, "code": None, "humaneval": None},
    )
    stats = fresh_reward_stats()
    add_chunk(stats, Chunk(0, [], 0, 1.0, 0, 0, verdicts={"pass": 3, "fail": 5, "error": 1}, reward_wait=0.4, dropped_groups=1))
    add_chunk(stats, Chunk(1, [], 0, 1.0, 0, 0, verdicts={"pass": 1}, reward_wait=0.2))
    batch = PackedGroups.from_groups([group(0, [1.0, -1.0], 3), group(1, [-1.0, -1.0], 5), group(2, [1.0, 1.0], 7)])
    row = step_reward_row(task, batch, stats, waited=1.0)
    assert row["reward/verdict/pass"] == 4.0 and row["reward/verdict/error"] == 1.0 and row["reward/verdict/timeout"] == 0.0
    assert row["reward/dropped_groups"] == 1.0 and row["reward/latency"] == pytest.approx(0.6)
    assert row["time/reward_wait"] == pytest.approx(0.6)  # waited 1.0 s, rewards held the chunks 0.6 s
    assert row["train/reward_mean/math"] == 0.0 and row["train/reward_mean/code"] == 0.0
    assert row["gen/length_mean/math"] == 3.0 and row["gen/length_mean/code"] == 6.0
    assert "train/reward_mean/humaneval" not in row  # no samples of it: no point, not a zero
    assert step_reward_row(task, batch, stats, waited=0.0)["time/reward_wait"] == 0.0  # the trainer never waited
    single = SimpleNamespace(train=task.train, parts={})
    assert not any("/math" in k or "/code" in k for k in step_reward_row(single, batch, stats, 1.0))


def test_a_step_row_has_each_reward_functions_mean_std_and_nones_over_its_chunks():
    """TRL's rewards/<name>/mean and /std, over every sample of the step's chunks the function gave a value."""
    from workbench.rl.reward_functions import ValueStats

    nan = float("nan")
    stats = fresh_reward_stats()
    add_chunk(stats, Chunk(0, [], 0, 1.0, 0, 0, reward_values={"acc": ValueStats.of([1.0, 0.0, nan]), "fmt": ValueStats.of([1.0, 1.0, 1.0])}))
    add_chunk(stats, Chunk(1, [], 0, 1.0, 0, 0, reward_values={"acc": ValueStats.of([1.0, 1.0, nan]), "fmt": ValueStats.of([0.0, 1.0, 1.0])}))
    row = step_reward_row(SimpleNamespace(train=[], parts={}), PackedGroups.from_groups([]), stats, waited=0.0)
    assert row["rewards/acc/mean"] == pytest.approx(0.75) and row["rewards/acc/none"] == 2.0
    assert row["rewards/acc/std"] == pytest.approx(0.5)  # [1, 0, 1, 1], Bessel-corrected as TRL's nanstd
    assert row["rewards/fmt/mean"] == pytest.approx(5 / 6) and row["rewards/fmt/none"] == 0.0
    assert "reward_values" not in row and not any(k.startswith("rewards/") for k in step_reward_row(
        SimpleNamespace(train=[], parts={}), PackedGroups.from_groups([]), fresh_reward_stats(), 0.0))  # no functions: no rows


def test_the_summary_records_domains_verdicts_and_the_wait_share():
    task = SimpleNamespace(parts={"math": None, "code": None})
    rows = [
        {"step": 0, "val/pass_rate/math": 0.1, "val/pass_rate/code": 0.2},
        {"step": 1, "time/reward_wait": 0.5, "reward/verdict/pass": 2.0, "reward/verdict/sandbox_error": 1.0},
        {"step": 2, "time/reward_wait": 1.5, "reward/verdict/pass": 3.0},
        {"step": 2, "val/pass_rate/math": 0.3, "val/pass_rate/code": 0.25},
    ]
    s = reward_summary(task, rows, trainer_wall_seconds=20.0)
    assert s["domains"] == ["math", "code"]
    assert s["reward_verdicts"]["pass"] == 5 and s["reward_verdicts"]["sandbox_error"] == 1
    assert s["reward_wait_seconds"] == 2.0 and s["reward_wait_share"] == pytest.approx(0.1)
    assert s["val_pass_rate_first/math"] == 0.1 and s["val_pass_rate_last/code"] == 0.25
    assert reward_summary(SimpleNamespace(parts={}), rows, 0.0)["domains"] == []
