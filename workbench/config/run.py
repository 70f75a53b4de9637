"""The whole run configuration (`RunConfig`, one section per concern), built from defaults, YAML
and overrides (`load_run_config`, `run_config_from_dict`) and checked (`validate`): each section's
own check, in its module, then the checks across sections."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from workbench.config.checkpoint import CheckpointConfig
from workbench.config.evaluation import EvalConfig, validate_eval
from workbench.config.generation import GenerationConfig, validate_generation
from workbench.config.health import HealthConfig, validate_health
from workbench.config.model import ModelConfig, validate_model
from workbench.config.resources import ResourcesConfig, validate_gpu_shares, validate_resources
from workbench.config.reward import RewardConfig, validate_reward
from workbench.config.env import EnvConfig, check_env_run, validate_env
from workbench.config.samples import SamplesConfig, validate_samples
from workbench.config.task import TaskConfig, validate_task
from workbench.config.tracking import TrackingConfig, validate_tracking
from workbench.config.train import TrainConfig, validate_train
from workbench.configtools import ConfigError, from_dict, load_yaml, parse_override, set_dotted, to_dict
from workbench.rl.recipe import RecipeConfig, recipe_from_value, swap_recipe


@dataclass
class RunConfig:
    """A run's whole configuration, one section per concern. Build it with `load_run_config`; every
    key, its default and meaning are in the configuration reference (`workbench config show` prints a
    resolved one)."""

    name: str = "run"
    """The run's name: its folder (runs/<name>) and its MLflow run name."""
    seed: int = 0
    """Seed of the RL run (sampling, shuffles); the task split and the warm-up model come from task.seed."""
    out_dir: Optional[str] = None
    """The run folder (metrics.jsonl, checkpoints, fit); null: runs/<name>. Every trainer node must see it."""
    recipe: RecipeConfig = field(default_factory=RecipeConfig)
    """The RL recipe: a preset name (scalerl, qwen-dapo, ...) or {base: NAME, ...changes}."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model."""
    task: TaskConfig = field(default_factory=TaskConfig)
    """The task: prompts, answers and the checker."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """How completions are rewarded: the task's checker, or your reward functions."""
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    """The generators (rollouts)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """The trainer and its optimizer."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """The validation evaluations (the curve)."""
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    """Ray, devices and actors."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints (resume, fault recovery)."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """MLflow tracking (and Weights & Biases, `tracking.wandb`)."""
    samples: SamplesConfig = field(default_factory=SamplesConfig)
    """Completions kept in <run>/samples/ (and MLflow): `workbench samples`, `Session.samples`."""
    health: HealthConfig = field(default_factory=HealthConfig)
    """Run health: the rules that flag a run going wrong (summary.json's `health`, the report, MLflow tags)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """An environment's episodes (task.name env): turns, the episode's tokens, time limits, the pass threshold."""

    def output_dir(self) -> Path:
        return Path(self.out_dir or f"runs/{self.name}")

    def kept_versions(self) -> int:
        """Earlier policy versions the trainer keeps for the mismatch (engine/train/lagged.py): as
        many as a step's tokens can lag (the pipeline's max_ahead_steps, at most off_policy.k); 0 off."""
        if not self.train.lagged_rows(self.resources.trainer_workers):
            return 0
        return self.generation.ahead_cap(self.recipe.off_policy.k)


def _resolve_recipe(data: dict) -> dict:
    if "recipe" in data:
        data = dict(data)
        data["recipe"] = to_dict(recipe_from_value(data["recipe"]))
    return data


def run_config_from_dict(data: dict[str, Any], overrides: list[str] | dict[str, Any] | None = None) -> RunConfig:
    """Defaults <- `data` <- overrides. `recipe=NAME` as an override swaps the whole preset."""
    data = copy.deepcopy(dict(data))  # overrides write into nested sections: never into the caller's
    items = overrides.items() if isinstance(overrides, dict) else map(parse_override, overrides or [])
    items = list(items)
    # A whole-recipe swap goes first, so that recipe.x=y overrides apply on top of it.
    for key, value in items:
        if key == "recipe":
            # keep this config's own recipe tweaks that the new preset does not itself change
            data["recipe"] = swap_recipe(data.get("recipe"), value) if isinstance(value, str) else value
    recipe_problems: list[str] = []
    try:
        data = _resolve_recipe(data)
    except ConfigError as e:  # the other sections' problems are reported with the recipe's
        recipe_problems, data = e.problems, {k: v for k, v in data.items() if k != "recipe"}
    for key, value in items:
        if key != "recipe":
            if key.split(".")[0] == "recipe" and "recipe" not in data:
                data["recipe"] = to_dict(RecipeConfig())
            set_dotted(data, key, value)
    try:
        cfg = from_dict(RunConfig, data)
    except ConfigError as e:
        raise ConfigError.of(recipe_problems + e.problems) from None
    if recipe_problems:
        raise ConfigError.of(recipe_problems)
    validate(cfg)
    return cfg


def load_run_config(path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None) -> RunConfig:
    """The defaults, then the YAML file at `path` (if any), then `overrides` (["train.lr=1e-6"] or
    {"train.lr": 1e-6}; `recipe=NAME` swaps the whole preset), validated. A wrong key or value raises
    a ConfigError (a UserError) naming it, and whether the file or the overrides are to blame;
    several wrong keys are named all at once."""
    data = load_yaml(path) if path is not None else {}
    try:
        return run_config_from_dict(data, overrides)
    except ConfigError as e:
        err = e
    if not overrides:
        raise ConfigError(f"{path}: {err}" if path else str(err), err.problems) from None
    try:  # blame the file only when the file alone is wrong
        run_config_from_dict(data)
    except ConfigError as e:
        theirs = [p for p in err.problems if p not in e.problems]  # the overrides' own, beside the file's
        also = f" (and in the overrides: {'; '.join(theirs)})" if theirs else ""
        raise ConfigError(f"{path}: {e}{also}" if path else f"{e}{also}", e.problems + theirs) from None
    raise ConfigError(f"{err} (in the overrides: --set / overrides=)", err.problems) from None


def validate(cfg: RunConfig) -> None:
    """Each section's own check (in its module), then the checks across sections; the first
    problem raises a ConfigError, one line naming the key."""
    from workbench.rl.honoured import check_honoured
    from workbench.rl.recipe import validate_recipe

    validate_train(cfg.train, cfg.resources.trainer_workers)
    validate_generation(cfg.generation)
    validate_gpu_shares(cfg.resources, cfg.generation)
    validate_samples(cfg.samples)
    validate_health(cfg.health)
    validate_model(cfg.model, cfg.generation, cfg.resources)
    validate_resources(cfg.resources)
    validate_tracking(cfg.tracking)
    validate_eval(cfg.eval)
    validate_recipe(cfg.recipe)  # recipe.off_policy.k >= 1 among them
    check_honoured(cfg)  # settings the engine would not honour in this setup (rl/honoured.py)
    validate_task(cfg.task, cfg.eval.num_prompts)
    validate_reward(cfg.reward)
    validate_env(cfg.env)
    check_env_run(cfg)  # task.env's shape; its factory is imported before launch (config/env.check_env_factory)
