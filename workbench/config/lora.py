"""`model.lora`: LoRA adapters over the frozen base, their check, and the config's translation to PEFT's.

`LoraConfig` is the section; `to_peft` / `peft_model` turn it into PEFT's own config and wrapper
(PEFT imported on use), the one wrapping the trainer, the generators (engine/model/lora.py) and
the export (runs/export.py, a room below the engine) share. `VLLM_LORA_RANKS` is vLLM's table of
the ranks it takes: the check below refuses a larger rank with the vLLM generator, and the memory
plan (engine/plan/lora.py) sizes vLLM's LoRA buffers by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from workbench.config.generation import GenerationConfig
from workbench.config.resources import ResourcesConfig
from workbench.configtools import ConfigError

ALL_LINEAR = "all-linear"  # PEFT's name for every linear layer but the output head
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM 0.32's max_lora_rank values (vllm.config.lora.MaxLoRARanks)
VLLM_MAX_LORA_RANK = max(VLLM_LORA_RANKS)


@dataclass
class LoraConfig:
    """`model.lora`: LoRA adapters trained over the frozen base (PEFT); `model.lora: null` is full
    fine-tuning. engine/model/lora.py applies it."""

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


def validate_lora(lora: Optional[LoraConfig], model_path: str, generation: GenerationConfig,
                  resources: ResourcesConfig) -> None:  # fmt: skip
    """`model.lora`: a rank, alpha and dropout LoRA can use, targets named, and the roles that cannot
    take them refused (the vLLM generator on GPT-2 or above vLLM's rank); several trainer workers
    (FSDP2) take them (engine/train/fsdp.py), so `resources` is no longer checked here."""
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
    if generation.backend != "vllm":
        return
    if model_path.startswith("builtin:"):  # vLLM's GPT-2 has no LoRA layers (not SupportsLoRA)
        raise ConfigError(f"model.lora with generation.backend=vllm: vLLM has no LoRA for GPT-2, the builtin model "
                          f"({model_path}); set generation.backend=torch, or a Llama or Qwen2 model as model.path "
                          "(e.g. SmolLM2-135M-Instruct: `workbench model import --smollm2`)")  # fmt: skip
    if lora.rank > VLLM_MAX_LORA_RANK:
        raise ConfigError(f"model.lora.rank={lora.rank} with generation.backend=vllm: vLLM takes ranks up to "
                          f"{VLLM_MAX_LORA_RANK}; lower it, or set generation.backend=torch")


def adapter_names(model: Any) -> set[str]:
    """The names of a PEFT-wrapped `model`'s adapter tensors, in any state (trainable or not: a
    generator's, an export's)."""
    return {n for n, _ in model.named_parameters() if ".lora_A." in n or ".lora_B." in n}
