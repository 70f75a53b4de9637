"""The run configuration: one dataclass per concern, each in its module beside its own checks,
merged from defaults, YAML and overrides.

    cfg = load_run_config("configs/quickstart.yaml", ["train.lr=3e-4", "recipe=qwen-dapo"])

    run.py         RunConfig (the sections below), run_config_from_dict, load_run_config, validate
    model.py       model: (ModelConfig);  lora.py  model.lora (LoraConfig, PEFT's config from it, vLLM's ranks)
    task.py        task: (TaskConfig, task.mix's MixSource)       reward.py   reward: (RewardConfig)
    generation.py  generation: (GenerationConfig)                 train.py    train: (TrainConfig)
    evaluation.py  eval: (EvalConfig)                             resources.py  resources: (ResourcesConfig, GPU shares)
    checkpoint.py  checkpoint: (CheckpointConfig)                 tracking.py   tracking: (TrackingConfig, WandbConfig)
    samples.py     samples: (SamplesConfig)                       health.py     health: (HealthConfig)
    env.py         env: (EnvConfig: an environment's episodes; the checks across it and task.env)

`recipe:` in YAML is a preset name (`scalerl`) or a mapping (`{base: scalerl, loss: {...}}`); its
dataclasses are in workbench/rl/recipe.py. Unknown keys anywhere fail with the dotted path of the key.

Every field's meaning is its attribute docstring: the string literal on the line under the field
(in these modules and in workbench/rl/recipe.py). That one line is the only place it is written:
the config reference page (docs/) and `workbench config show` read it from there, and
tests/test_config.py fails on a field without one. Give a new field its docstring.

Import from here (`from workbench.config import RunConfig, load_run_config`): the modules import
one way (run.py above the sections; lora.py and resources.py read generation.py), never this door.
"""

from __future__ import annotations

from workbench.config.checkpoint import CheckpointConfig
from workbench.config.env import EnvConfig, check_env_factory, env_settings
from workbench.config.evaluation import EvalConfig, validate_eval
from workbench.config.generation import GenerationConfig, validate_generation
from workbench.config.health import HealthConfig, validate_health
from workbench.config.lora import ALL_LINEAR, VLLM_LORA_RANKS, VLLM_MAX_LORA_RANK, LoraConfig, validate_lora
from workbench.config.model import ModelConfig, validate_model
from workbench.config.resources import VLLM_SHARE_MARGIN, ResourcesConfig, validate_gpu_shares, validate_resources
from workbench.config.reward import RewardConfig, validate_reward
from workbench.config.run import RunConfig, load_run_config, run_config_from_dict, validate
from workbench.config.samples import SamplesConfig, validate_samples
from workbench.config.task import MixSource, TaskConfig, validate_mix, validate_task
from workbench.config.tracking import TrackingConfig, WandbConfig, validate_tracking
from workbench.config.train import TrainConfig, validate_train
from workbench.configtools import ConfigError

__all__ = [
    "ALL_LINEAR", "VLLM_LORA_RANKS", "VLLM_MAX_LORA_RANK", "VLLM_SHARE_MARGIN",
    "CheckpointConfig", "ConfigError", "EnvConfig", "EvalConfig", "GenerationConfig", "HealthConfig", "LoraConfig",
    "MixSource", "ModelConfig", "ResourcesConfig", "RewardConfig", "RunConfig", "SamplesConfig",
    "TaskConfig", "TrackingConfig", "TrainConfig", "WandbConfig",
    "check_env_factory", "env_settings", "load_run_config", "run_config_from_dict", "validate",
    "validate_eval", "validate_generation", "validate_gpu_shares", "validate_health", "validate_lora",
    "validate_mix", "validate_model", "validate_resources", "validate_reward", "validate_samples",
    "validate_task", "validate_tracking", "validate_train",
]
