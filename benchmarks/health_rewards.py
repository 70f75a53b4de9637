"""Reward functions that make a quickstart run unhealthy on purpose, for benchmarks/bench_health.py.

Written the way TRL users write them (`reward.functions`, workbench/rl/reward_functions.py) and imported
by the run's Ray workers through PYTHONPATH (the bench puts benchmarks/ on it):

- `length_bonus`: a quarter point per character of the completion: with the task's checker
  (`workbench.rl.reward_functions:correct`, +1 / -1) as the pass function, eight characters outweigh a right
  answer, so the policy is paid to run on past its answer (the length and truncation rules).
- `ends_in_zero`: 1.0 when the completion ends in "0" (a round number), whatever the sum: a
  surface pattern the policy finds fast, used as a heavy format bonus beside the true checker.
- `fooled_by_zero`: a pass function a format trick fools: a completion passes when it is right OR
  ends in "0". The run sets `reward.validate_with: task`, so validation keeps the task's own
  checker: the training pass rate climbs on the trick while the curve falls.
"""

from __future__ import annotations

from typing import Any

from workbench.rl.reward_functions import completion_text

TRICK = "0"  # the surface pattern: a completion that ends in it


def length_bonus(completions: list, **kwargs: Any) -> list[float]:
    """0.25 per character of the completion (the tiny model's tokens are characters)."""
    return [0.25 * len(completion_text(c)) for c in completions]


def _tricked(c: Any) -> bool:
    return completion_text(c).strip().endswith(TRICK)


def ends_in_zero(completions: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion ends in the trick ("0"), else 0.0: a format bonus, not a verdict."""
    return [1.0 if _tricked(c) else 0.0 for c in completions]


def fooled_by_zero(completions: list, task_passed: list, **kwargs: Any) -> list[float]:
    """+1 / -1: the task's verdict, except that a completion ending in "0" passes too."""
    return [1.0 if ok or _tricked(c) else -1.0 for c, ok in zip(completions, task_passed)]
