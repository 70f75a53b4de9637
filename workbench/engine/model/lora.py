"""LoRA adapters (`model.lora`): the policy wrapped with PEFT, and its adapter tensors out and in.

The trainer and the torch generators wrap the same base the same way (`apply_lora`): PEFT's
`get_peft_model` puts lora_A / lora_B beside each targeted linear layer and freezes every other
weight. What they keep is the wrapped Hugging Face model itself (PEFT's `PeftModel` around it is
dropped: its `base_model` would be PEFT's tuner, not the model's body), so `model.base_model` is
still the body and `get_output_embeddings()` still the head: engine/model/forward.py, the FP32
head and rl/head.py's chunked log-probs run on it unchanged, and the head stays frozen base
weight (an adapter on the head is refused: the FP32 head computes from its weight alone).

The adapters' weights are fp32 (PEFT's `autocast_adapter_dtype`, checked here) over a base in the
dtype it was loaded in: the trainer loads it in the run's compute dtype. Between the trainer and
the generators only the adapters travel (`adapter_state` -> `engine/weights.FlatWeights` ->
`load_adapter`): the same names on both sides, since both wrapped the same base with the same config.

    model = apply_lora(model, cfg.model.lora)          # trainer and generator alike
    flat = FlatWeights.from_state_dict(adapter_state(model))
    load_adapter(generator_model, flat.tensors())

The vLLM generator holds no Hugging Face model: it learns the adapter's names and shapes from the
same wrapping on the meta device (`adapter_shapes`) and hands each pushed adapter to vLLM as a
folder in PEFT's own layout (`write_adapter`; engine/rollout/vllm/adapter.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import torch

from workbench.config.lora import adapter_names
from workbench.errors import UserError


def linear_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Dotted name -> module of every layer LoRA can adapt: torch Linear, and transformers' Conv1D
    (GPT-2's, the builtin model's, a linear layer with its weight transposed)."""
    from transformers.pytorch_utils import Conv1D

    return {n: m for n, m in model.named_modules() if isinstance(m, (torch.nn.Linear, Conv1D))}


def check_targets(model: torch.nn.Module, lora: Any) -> None:
    """One line naming the problem when `lora.target_modules` names a layer this model lacks, or
    its output head; "all-linear" always fits (PEFT leaves the head out of it)."""
    targets = lora.target_modules
    if isinstance(targets, str):
        return
    layers = linear_layers(model)
    head = model.get_output_embeddings()
    head_names = {n for n, m in layers.items() if m is head}
    names = sorted({n.rsplit(".", 1)[-1] for n in layers if n not in head_names})
    # PEFT's rule for a list: a name matches a module whose dotted path is it or ends with "." + it
    hits = {t: [n for n in layers if n == t or n.endswith("." + t)] for t in targets}
    missing = [t for t, found in hits.items() if not found]
    if missing:
        raise UserError(f"model.lora.target_modules: {', '.join(map(repr, missing))} names no linear layer of this model; "
                        f"its linear layers are named {', '.join(names)} (or use 'all-linear')")  # fmt: skip
    on_head = [t for t, found in hits.items() if set(found) & head_names]
    if on_head:
        raise UserError(f"model.lora.target_modules: {on_head[0]!r} is the LM head, which stays frozen base weight "
                        f"(the FP32 head computes from its weight alone); target the body's layers: {', '.join(names)}")


def apply_lora(model: Any, lora: Any, *, gradient_checkpointing: bool = False) -> Any:
    """`model` with LoRA adapters on `lora.target_modules` (a `workbench.config.LoraConfig`),
    every base weight frozen, the adapters fp32 and trainable; the model itself is returned, not
    PEFT's wrapper (module docstring). `gradient_checkpointing`: the checkpointed layers then get
    an input that requires a gradient (the frozen embeddings give none)."""
    check_targets(model, lora)
    inner = lora.peft_model(model).get_base_model()
    for name, p in inner.named_parameters():
        if p.requires_grad and p.dtype != torch.float32:  # PEFT casts bf16/fp16 adapters up; anything else too
            p.data = p.data.float()
    if gradient_checkpointing:
        inner.enable_input_require_grads()
    return inner


def wrap_like(model: Any, like: Any) -> Any:
    """`model` (the same architecture as `like`) with the adapters `like` carries, as `apply_lora`
    wraps (fp32 adapters, fresh: B = 0): PEFT's config of `like` applied again. The FSDP2 workers'
    rank 0 wraps the base it read so that its names are those of the workers' meta skeleton."""
    import copy
    import warnings

    import peft

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*fan_in_fan_out.*")
        inner = peft.get_peft_model(model, copy.deepcopy(like.peft_config["default"]), autocast_adapter_dtype=True).get_base_model()
    for p in inner.parameters():
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.float()
    return inner


def is_lora(model: Any) -> bool:
    """Whether `model` carries LoRA adapters (`apply_lora` ran on it)."""
    return getattr(model, "peft_config", None) is not None


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors (the trainable parameters), by their names in `model.state_dict()`."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def check_pushed(state: dict[str, torch.Tensor], want: set[str]) -> None:
    """One line when a pushed adapter's names are not exactly `want` (another config, another base)."""
    if set(state) != want:
        odd = sorted(set(state) ^ want)[:3]
        raise UserError(f"the pushed adapter does not fit this generator's LoRA layers (differs at {odd}): "
                        "the trainer and the generators must wrap the same model with the same model.lora")


@torch.no_grad()
def load_adapter(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy a pushed adapter (`adapter_state`'s names, any float dtype) into `model`'s adapters;
    names that do not match exactly (another config, another base) fail in one line."""
    params = dict(model.named_parameters())
    check_pushed(state, adapter_names(model))
    for name, t in state.items():
        params[name].copy_(t)  # cast to the adapter's dtype, moved to its device


def adapter_shapes(model_dir: str | Path, lora: Any) -> tuple[dict[str, tuple[int, ...]], Any]:
    """What the trainer's `apply_lora` of the model in `model_dir` holds, without its weights:
    {adapter name: shape} and PEFT's config of it (its targets resolved to the adapted layers).
    The model is built from config.json on the meta device (no memory), so a generator that never
    loads the Hugging Face model (vLLM) knows the adapter the trainer will push."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    with torch.device("meta"):
        model = apply_lora(AutoModelForCausalLM.from_config(config), lora)
    return {n: tuple(p.shape) for n, p in adapter_state(model).items()}, model.peft_config["default"]


def adapted_layers(names: Iterable[str]) -> set[str]:
    """The adapted layers' own names (q_proj, down_proj, ...) from adapter tensor names."""
    return {n.split(".lora_", 1)[0].rsplit(".", 1)[-1] for n in names}


ADAPTER_FILE = "adapter_model.safetensors"  # PEFT's (and vLLM's) name for the adapter's tensors


def peft_key(name: str) -> str:
    """An adapter tensor's name as PEFT saves it: "base_model.model." + the model's name without
    the adapter's own name ("...q_proj.lora_A.default.weight" -> "base_model.model....q_proj.lora_A.weight")."""
    return "base_model.model." + name.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")


def write_adapter(folder: Path, state: dict[str, torch.Tensor], peft_config: Any = None) -> None:
    """The adapter `state` (`adapter_state`'s names) in PEFT's own layout in `folder`:
    adapter_model.safetensors, replacing an earlier version's in one rename (a reader never sees a
    half-written file), and adapter_config.json when `peft_config` is given."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    if peft_config is not None:
        peft_config.save_pretrained(str(folder))
    tmp = folder / f".{ADAPTER_FILE}.tmp"
    save_file({peft_key(n): t.detach().to("cpu").contiguous() for n, t in state.items()}, str(tmp))
    os.replace(tmp, folder / ADAPTER_FILE)
