"""Reward shaping, in one place: what a completion scores and the penalties the step adds to it.

    reward = reward_for(verdict.passed)                       # the generators score (rollout/scoring.py)
    rewards = step_rewards(batch.rewards, batch.lengths, recipe, max_new_tokens)   # rl/step.prepare_step

- Scoring: ScaleRL's +1 for a correct completion, -1 for a wrong one, from the task's verdict;
  with `reward.functions` the weighted sum of the user's functions instead (rl/reward_functions.py).
- Penalties: with `recipe.length_control.type == "penalty"` the DAPO overlong penalty
  (its formula: rl/length.overlong_penalty, in [-1, 0]) is added to each completion's reward
  when the step is prepared, before zero-variance filtering and advantages. The rollouts keep
  the plain score (what `train/reward_mean` and the sampler see).
"""

from __future__ import annotations

import torch

from workbench.rl.length import overlong_penalty
from workbench.rl.recipe import RecipeConfig


def reward_for(correct: bool) -> float:
    """ScaleRL rewards: +1 correct, -1 incorrect."""
    return 1.0 if correct else -1.0


def step_rewards(rewards: torch.Tensor, lengths: torch.Tensor, recipe: RecipeConfig, max_new_tokens: int) -> torch.Tensor:
    """The rewards one step trains on: the scores plus the recipe's penalties (completion `lengths` [N])."""
    lc = recipe.length_control
    if lc.type == "penalty":
        return rewards + overlong_penalty(lengths.float(), max_new_tokens, lc.l_max, lc.l_cache)
    return rewards
