"""Reward functions that make a quickstart run unhealthy on purpose, for benchmarks/bench_health.py.

Written the way TRL users write them (`reward.functions`, workbench/rl/rewards.py) and imported
by the run's Ray workers through PYTHONPATH (the bench puts benchmarks/ on it):

- `length_bonus`: a quarter point per character of the completion: with the task's checker
  (`workbench.rl.rewards:correct`, +1 / -1) as the pass function, eight characters outweigh a right
  answer, so the policy is paid to run on past its answer (the length and truncation rules).
- `ends_in_zero`: 1.0 when the completion ends in "0" (a round number), whatever the sum: a
  surface pattern the policy finds fast, used as a heavy format bonus beside the true checker.
- `fooled_in_training`: a pass function a format trick fools, but only on training prompts: a
  training completion passes when it is right OR ends in "0"; a validation prompt (the quickstart
  task's own validation split, rebuilt here) gets the task's true verdict. The config has one pass
  function for both (its verdict feeds train/pass_rate and val/pass_rate alike), so this is how a
  training checker that is fooled while validation stays honest can be built at all.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from workbench.rl.rewards import completion_text

# The quickstart's task (configs/quickstart.yaml; task.seed defaults to 0): bench_health checks
# that the run's config builds this very task, so the validation split below is the run's.
QUICKSTART_TASK: dict[str, Any] = {"name": "addition", "difficulty": 2, "num_train": 4000, "num_val": 200, "seed": 0}
TRICK = "0"  # the surface pattern: a completion that ends in it


def length_bonus(completions: list, **kwargs: Any) -> list[float]:
    """0.25 per character of the completion (the tiny model's tokens are characters)."""
    return [0.25 * len(completion_text(c)) for c in completions]


def _tricked(c: Any) -> bool:
    return completion_text(c).strip().endswith(TRICK)


def ends_in_zero(completions: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion ends in the trick ("0"), else 0.0: a format bonus, not a verdict."""
    return [1.0 if _tricked(c) else 0.0 for c in completions]


@lru_cache(maxsize=1)
def validation_prompts() -> frozenset[str]:
    """The quickstart task's validation prompts (the same seeded split the run draws)."""
    from workbench.tasks.synthetic import make_task

    t = QUICKSTART_TASK
    task = make_task(t["name"], t["difficulty"], num_train=t["num_train"], num_val=t["num_val"], seed=t["seed"])
    return frozenset(ex.prompt for ex in task.val)


def fooled_in_training(prompts: list, completions: list, task_passed: list, **kwargs: Any) -> list[float]:
    """+1 / -1: the task's verdict, except that a training completion ending in "0" passes too."""
    val = validation_prompts()
    return [1.0 if ok or (p not in val and _tricked(c)) else -1.0 for p, c, ok in zip(prompts, completions, task_passed)]
