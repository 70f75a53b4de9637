"""RL recipes as data: every choice the ScaleRL paper ablates, in one dataclass tree.

A recipe is a named YAML preset under `workbench/rl/recipes/` (scalerl, deepseek-grpo, ...).
A preset may start from another with `base: NAME` and change some fields. Unknown keys fail.

    recipe = load_recipe("scalerl")
    recipe = load_recipe("scalerl", overrides={"loss.type": "ppo_clip"})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from workbench.configtools import ConfigError, apply_overrides, from_dict, load_yaml

RECIPE_DIR = Path(__file__).parent / "recipes"


@dataclass
class LossConfig:
    type: Literal["cispo", "ppo_clip", "gspo"] = "cispo"
    eps_max: float = 4.0  # CISPO: weight = sg(min(rho, eps_max))
    clip_low: float = 0.2  # PPO-clip: ratio kept in [1 - clip_low, 1 + clip_high]
    clip_high: float = 0.28
    gspo_clip_low: float = 3e-3  # GSPO: sequence ratio kept in [1 - low, 1 + high]
    gspo_clip_high: float = 4e-3
    tis_cap: Optional[float] = None  # truncated importance sampling cap c; None = off
    kl_coef: float = 0.0
    entropy_coef: float = 0.0


@dataclass
class LengthControlConfig:
    type: Literal["interrupt", "penalty", "none"] = "interrupt"
    # Forced interruption: after a thinking budget drawn from [budget_min, budget_max] tokens
    # (fractions of max_new_tokens when <= 1.0), append `phrase` and continue into the answer.
    budget_min: float = 0.625  # paper: 10k of 16k
    budget_max: float = 0.75  # paper: 12k of 16k
    answer_budget: float = 0.125  # paper: 2k of 16k
    phrase: str = "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"
    # DAPO overlong penalty: linear from 0 at (l_max - l_cache) to -1 at l_max (fractions allowed).
    l_max: float = 0.875  # paper: 14k of 16k
    l_cache: float = 0.125  # paper: 2k


@dataclass
class OffPolicyConfig:
    algorithm: Literal["pipeline", "ppo-off-policy", "sync"] = "pipeline"
    k: int = 8


@dataclass
class RecipeConfig:
    name: str = "scalerl"
    loss: LossConfig = field(default_factory=LossConfig)
    aggregation: Literal["prompt", "sample", "token"] = "prompt"
    advantage_norm: Literal["batch", "prompt", "none"] = "batch"
    zero_variance_filter: bool = True
    no_positive_resampling: bool = True
    resample_threshold: float = 0.9
    fp32_head: bool = True
    length_control: LengthControlConfig = field(default_factory=LengthControlConfig)
    off_policy: OffPolicyConfig = field(default_factory=OffPolicyConfig)


def available_recipes() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def _recipe_dict(name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    path = RECIPE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown recipe '{name}'; available: {available_recipes()}")
    if name in seen:
        raise ConfigError(f"recipe '{name}' inherits from itself via {' -> '.join(seen)}")
    data = load_yaml(path)
    base = data.pop("base", None)
    if base is None:
        return data
    merged = _recipe_dict(base, seen + (name,))
    return _deep_merge(merged, data)


def _deep_merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def recipe_from_value(value: Any) -> RecipeConfig:
    """A run config's `recipe:` is a preset name, or a mapping with optional `base:`."""
    if isinstance(value, RecipeConfig):
        return value
    if isinstance(value, str):
        return load_recipe(value)
    if isinstance(value, dict):
        data = dict(value)
        base = data.pop("base", None)
        if base is not None:
            data = _deep_merge(_recipe_dict(base), data)
        return from_dict(RecipeConfig, data, "recipe")
    raise ConfigError(f"recipe: expected a preset name or a mapping, got {value!r}")


def load_recipe(name: str, overrides: dict[str, Any] | None = None) -> RecipeConfig:
    recipe = from_dict(RecipeConfig, _recipe_dict(name), f"recipe '{name}'")
    return apply_overrides(recipe, overrides or {})
