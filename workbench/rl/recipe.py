"""RL recipes as data: every choice the ScaleRL paper ablates, in one dataclass tree.

A recipe is a named YAML preset under `workbench/rl/recipes/` (scalerl, deepseek-grpo, ...).
A preset may start from another with `base: NAME` and change some fields. Unknown keys fail,
in the preset and in every file it inherits from. A preset's `name` defaults to its file name.
This module imports no torch: the CLI loads configs before anything heavy.

    recipe = load_recipe("scalerl")
    recipe = load_recipe("scalerl", overrides={"loss.type": "ppo_clip"})
    validate_recipe(recipe)   # cross-field checks (load_recipe runs them)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from workbench.configtools import ConfigError, apply_overrides, from_dict, load_yaml
from workbench.rl.sampler import NPR_MAX_EPOCHS, NPR_MAX_RETIRED_SHARE

RECIPE_DIR = Path(__file__).parent / "recipes"


@dataclass
class LossConfig:
    type: Literal["cispo", "ppo_clip", "gspo"] = "cispo"
    """The policy loss: cispo (ScaleRL), ppo_clip (GRPO, DAPO) or gspo (sequence-level ratio)."""
    eps_max: float = 4.0  # CISPO: weight = sg(min(rho, eps_max))
    """CISPO: the importance weight is sg(min(rho, eps_max))."""
    clip_low: float = 0.2  # PPO-clip: ratio kept in [1 - clip_low, 1 + clip_high]
    """PPO-clip: the ratio is kept in [1 - clip_low, 1 + clip_high]."""
    clip_high: float = 0.28
    """PPO-clip: the upper clip (DAPO's clip-higher: 0.28; GRPO: 0.2)."""
    gspo_clip_low: float = 3e-3  # GSPO: sequence ratio kept in [1 - low, 1 + high]
    """GSPO: the sequence ratio is kept in [1 - gspo_clip_low, 1 + gspo_clip_high]."""
    gspo_clip_high: float = 5e-3  # the ScaleRL paper's GSPO runs: ~3e-3 / 5e-3
    """GSPO: the upper clip of the sequence ratio."""
    tis_cap: Optional[float] = None  # truncated importance sampling cap c; None = off
    """Truncated importance sampling: cap c on each token's weight pi_old / pi_gen (generator/trainer mismatch); null: off."""
    kl_coef: float = 0.0
    """Weight of a KL penalty (k3 estimator) to the frozen starting weights, which the trainer then holds (0: off)."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (0: off)."""


@dataclass
class LengthControlConfig:
    type: Literal["interrupt", "penalty", "none"] = "interrupt"
    """Length control: interrupt (forced interruption), penalty (DAPO overlong penalty) or none."""
    # Forced interruption: after a thinking budget drawn from [budget_min, budget_max] tokens
    # (fractions of max_new_tokens when <= 1.0), append `phrase` and continue into the answer.
    budget_min: float = 0.625  # paper: 10k of 16k
    """Interrupt: the thinking budget is drawn from [budget_min, budget_max] tokens (fractions of max_new_tokens when <= 1)."""
    budget_max: float = 0.75  # paper: 12k of 16k
    """Interrupt: the largest thinking budget (a fraction of max_new_tokens when <= 1)."""
    answer_budget: float = 0.125  # paper: 2k of 16k
    """Interrupt: tokens left for the answer after the phrase (a fraction of max_new_tokens when <= 1)."""
    phrase: str = "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"
    """Interrupt: the text appended when the thinking budget runs out (left out of the loss)."""
    end_think: str = "</think>"  # marker that closes thinking; no interruption once it appeared
    """The marker that closes thinking; no interruption once it appeared."""
    # DAPO overlong penalty: linear from 0 at (l_max - l_cache) to -1 at l_max (fractions allowed).
    l_max: float = 0.875  # paper: 14k of 16k
    """Penalty: the reward falls linearly to -1 at l_max tokens (a fraction of max_new_tokens when <= 1)."""
    l_cache: float = 0.125  # paper: 2k
    """Penalty: the penalty starts at l_max - l_cache tokens."""


@dataclass
class OffPolicyConfig:
    algorithm: Literal["pipeline", "ppo-off-policy", "sync"] = "pipeline"
    """pipeline (PipelineRL-k: weights pushed to generators mid-generation), ppo-off-policy (k steps per round) or sync."""
    k: int = 8
    """Staleness bound: the most policy versions a trained sample may lag (pipeline), or steps per round (ppo-off-policy)."""


@dataclass
class RecipeConfig:
    name: str = "scalerl"
    """The recipe's name (a preset's file name by default); logged as the MLflow param recipe.name."""
    loss: LossConfig = field(default_factory=LossConfig)
    """The policy loss and its terms."""
    aggregation: Literal["prompt", "sample", "token"] = "prompt"
    """How token losses are averaged: per prompt (ScaleRL), per sample or per token, over the whole step."""
    advantage_norm: Literal["batch", "prompt", "none"] = "batch"
    """Group-centred advantages divided by the batch's std (ScaleRL), the prompt's (GRPO), or not at all."""
    zero_variance_filter: bool = True
    """Drop groups whose completions all passed or all failed (no learning signal)."""
    no_positive_resampling: bool = True
    """No-Positive-Resampling: retire a prompt once a group's pass rate reaches resample_threshold."""
    resample_threshold: float = 0.9
    """No-Positive-Resampling: the group pass rate at which a prompt retires."""
    # At most this share of the training prompts retired at once (the longest-retired goes back to
    # the pool); null: unbounded, as in the paper (workbench/rl/sampler.py says why it is bounded).
    npr_max_retired_share: Optional[float] = NPR_MAX_RETIRED_SHARE
    """No-Positive-Resampling: the most of the training set retired at once; null: unbounded, as in the paper."""
    # The rule is off for a run that draws its training set more than this many times (the run says
    # so when it starts); null: always on (workbench/rl/sampler.py, NPR_MAX_EPOCHS, says why).
    npr_max_epochs: Optional[float] = NPR_MAX_EPOCHS
    """No-Positive-Resampling is off for a run that draws its training set more than this many times; null: always on."""
    fp32_head: bool = True
    """Compute the LM head in fp32 on generators and trainer."""
    length_control: LengthControlConfig = field(default_factory=LengthControlConfig)
    """Forced interruption or the overlong penalty."""
    off_policy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    """The off-policy algorithm and its staleness bound k."""


def available_recipes() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def _recipe_dict(name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(name, str) or not (RECIPE_DIR / f"{name}.yaml").is_file():
        where = f" (base of '{seen[-1]}')" if seen else ""
        raise ConfigError(f"unknown recipe {name!r}{where}; available: {', '.join(available_recipes())}")
    if name in seen:
        raise ConfigError(f"recipe '{name}' inherits from itself via {' -> '.join(seen + (name,))}")
    data = load_yaml(RECIPE_DIR / f"{name}.yaml")
    data.setdefault("name", name)
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


def validate_recipe(recipe: RecipeConfig) -> RecipeConfig:
    """Cross-field checks a dataclass type cannot express; returns the recipe unchanged."""
    loss = recipe.loss
    if not loss.eps_max > 0:
        raise ConfigError(f"recipe.loss.eps_max must be > 0, got {loss.eps_max}")
    for key in ("clip_low", "gspo_clip_low"):
        if not 0 <= getattr(loss, key) < 1:
            raise ConfigError(f"recipe.loss.{key} must be in [0, 1), got {getattr(loss, key)}")
    for key in ("clip_high", "gspo_clip_high", "kl_coef", "entropy_coef"):
        if getattr(loss, key) < 0:
            raise ConfigError(f"recipe.loss.{key} must be >= 0, got {getattr(loss, key)}")
    if loss.tis_cap is not None and not loss.tis_cap > 0:
        raise ConfigError(f"recipe.loss.tis_cap must be > 0 or null, got {loss.tis_cap}")
    if not 0 < recipe.resample_threshold <= 1:
        raise ConfigError(f"recipe.resample_threshold must be in (0, 1], got {recipe.resample_threshold}")
    cap = recipe.npr_max_retired_share
    if cap is not None and not 0 < cap <= 1:
        raise ConfigError(f"recipe.npr_max_retired_share must be in (0, 1] or null, got {cap}")
    if recipe.npr_max_epochs is not None and not recipe.npr_max_epochs > 0:
        raise ConfigError(f"recipe.npr_max_epochs must be > 0 or null, got {recipe.npr_max_epochs}")
    if recipe.off_policy.k < 1:
        raise ConfigError(f"recipe.off_policy.k must be >= 1, got {recipe.off_policy.k}")
    lc = recipe.length_control
    for key in ("budget_min", "budget_max", "answer_budget", "l_max", "l_cache"):
        if not getattr(lc, key) > 0:
            raise ConfigError(f"recipe.length_control.{key} must be > 0, got {getattr(lc, key)}")
    # Fractions (<= 1) and token counts (> 1) only compare when both are of the same kind.
    if (lc.budget_min <= 1) == (lc.budget_max <= 1) and lc.budget_min > lc.budget_max:
        raise ConfigError(f"recipe.length_control.budget_min ({lc.budget_min}) exceeds budget_max ({lc.budget_max})")
    if (lc.l_cache <= 1) == (lc.l_max <= 1) and lc.l_cache > lc.l_max:
        raise ConfigError(f"recipe.length_control.l_cache ({lc.l_cache}) exceeds l_max ({lc.l_max})")
    if lc.type == "interrupt" and lc.end_think not in lc.phrase:
        raise ConfigError(
            f"recipe.length_control.phrase must contain the end-of-thinking marker {lc.end_think!r}"
        )
    return recipe


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
        return validate_recipe(from_dict(RecipeConfig, data, "recipe"))
    raise ConfigError(f"recipe: expected a preset name or a mapping, got {value!r}")


def load_recipe(name: str, overrides: dict[str, Any] | None = None) -> RecipeConfig:
    """The preset `name` (file recipes/NAME.yaml, with its `base:` chain), plus dotted overrides."""
    recipe = from_dict(RecipeConfig, _recipe_dict(name), f"recipe '{name}'")
    return validate_recipe(apply_overrides(recipe, overrides or {}))


def swap_recipe(file_recipe: Any, name: str) -> Any:
    """The `recipe` value that puts preset `name` under a config file's own recipe adjustments.

    quickstart.yaml says `recipe: {base: scalerl, length_control: {type: none}}`. Swapping in
    `scalerl-loo-no-fp32` keeps `length_control: none` (that preset leaves it as scalerl has it),
    while `scalerl-loo-length-penalty` wins on length_control (changing it is its point). A file
    recipe that is a plain preset name is simply replaced.
    """
    from workbench.configtools import flatten, set_dotted, to_dict

    if not isinstance(file_recipe, dict) or "base" not in file_recipe:
        return name
    old, new = flatten(to_dict(load_recipe(file_recipe["base"]))), flatten(to_dict(load_recipe(name)))
    out: dict[str, Any] = {"base": name}
    for key, value in flatten({k: v for k, v in file_recipe.items() if k not in ("base", "name")}).items():
        if new.get(key) == old.get(key):
            set_dotted(out, key, value)
    return out
