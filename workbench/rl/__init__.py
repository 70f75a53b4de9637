"""workbench.rl: the RL algorithm core, as pure functions and small classes (no Ray, no I/O).

    from workbench.rl import (load_recipe, aggregation_weights, policy_loss, group_advantages,
                              zero_variance_keep, CurriculumSampler, ForcedInterruption,
                              overlong_penalty)

Recipes (`workbench.rl.recipe`) are data and import no torch; everything else is imported
lazily on first use, so `import workbench.rl.recipe` (done early by the CLI) stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from workbench.rl.recipe import (
    LengthControlConfig,
    LossConfig,
    OffPolicyConfig,
    RecipeConfig,
    available_recipes,
    load_recipe,
    recipe_from_value,
    validate_recipe,
)

# public name -> module that defines it (imported on first access; these need torch)
_LAZY = {
    "aggregation_weights": "workbench.rl.aggregation",
    "micro_batch_slices": "workbench.rl.aggregation",
    "EmptyBatchError": "workbench.rl._checks",
    "policy_loss": "workbench.rl.losses",
    "group_advantages": "workbench.rl.advantages",
    "zero_variance_keep": "workbench.rl.advantages",
    "CurriculumSampler": "workbench.rl.sampler",
    "AllPromptsRetiredError": "workbench.rl.sampler",
    "ForcedInterruption": "workbench.rl.length",
    "InterruptionState": "workbench.rl.length",
    "overlong_penalty": "workbench.rl.length",
    "resolve_tokens": "workbench.rl.length",
    "lm_head_logits": "workbench.rl.head",
    "token_logprobs": "workbench.rl.head",
    "token_entropy": "workbench.rl.head",
    "completion_logprobs": "workbench.rl.head",
    "reward_for": "workbench.rl.shaping",
    "step_rewards": "workbench.rl.shaping",
}

__all__ = [
    "LengthControlConfig",
    "LossConfig",
    "OffPolicyConfig",
    "RecipeConfig",
    "available_recipes",
    "load_recipe",
    "recipe_from_value",
    "validate_recipe",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench.rl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
