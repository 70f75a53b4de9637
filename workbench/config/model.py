"""`model:`: the policy model (a hub id, a local folder, a .gguf file or the builtin tiny GPT), and its check.

LoRA's own section, `model.lora`, and its check are in config/lora.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from workbench.config.generation import GenerationConfig
from workbench.config.lora import LoraConfig, validate_lora
from workbench.config.resources import ResourcesConfig
from workbench.configtools import ConfigError


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
    chat_template: Optional[str] = None
    """A Jinja chat template used instead of the tokenizer's own: a .jinja file or the template's text (e.g. TRL's chat_templates/qwen2_5.jinja gives SmolLM2 Qwen's tool calls); null: the model's."""
    lora: Optional[LoraConfig] = None
    """LoRA adapters over the frozen base ({rank, alpha, dropout, target_modules}; `model.lora.rank=8` turns them on with the other defaults); null: full fine-tuning."""


def validate_model(model: ModelConfig, generation: GenerationConfig, resources: ResourcesConfig) -> None:
    """A dtype the trainer can train in, and `model.lora` (with the roles that run it)."""
    if model.dtype == "float16":
        raise ConfigError(
            "model.dtype: float16 is not supported for training (no loss scaling: per-token gradients "
            "of ~1e-6 underflow in fp16); use bfloat16, float32 or auto"
        )
    if model.chat_template is not None:
        if model.path.startswith("builtin:"):
            raise ConfigError("model.chat_template is for a Hugging Face model's tokenizer; builtin:tiny has no chat template")
        if not is_template_text(model.chat_template) and not Path(model.chat_template).expanduser().is_file():
            raise ConfigError(f"model.chat_template: no such file: {model.chat_template} (a .jinja file, or the template's text)")
    validate_lora(model.lora, model.path, generation, resources)


def is_template_text(value: str) -> bool:
    """Whether model.chat_template holds the template itself rather than a file's path."""
    return "{%" in value or "{{" in value


def template_text(value: str) -> str:
    """model.chat_template's template: its text, or the .jinja file's (one line when unreadable)."""
    if is_template_text(value):
        return value
    try:
        return Path(value).expanduser().read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"model.chat_template: cannot read {value}: {e.strerror or e}") from None


_COMMIT = re.compile(r"[0-9a-f]{40}")


def snapshot_id(folder: str | Path) -> Optional[tuple[str, str]]:
    """(repo id, commit) when `folder` is a model snapshot in a hub cache's layout
    (.../models--ORG--NAME/snapshots/<commit>), else None: what model.path's hub id resolved to,
    read back by the engine (engine/model/hub.py) and by an export naming its base (runs/export.py)."""
    p = Path(folder)
    if not (_COMMIT.fullmatch(p.name) and p.parent.name == "snapshots" and p.parent.parent.name.startswith("models--")):
        return None
    return "/".join(p.parent.parent.name.split("--")[1:]), p.name  # hub ids never hold "--"
