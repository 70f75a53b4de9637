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
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

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
    """`model` with LoRA adapters on `lora.target_modules` (a `workbench.config_checks.LoraConfig`),
    every base weight frozen, the adapters fp32 and trainable; the model itself is returned, not
    PEFT's wrapper (module docstring). `gradient_checkpointing`: the checkpointed layers then get
    an input that requires a gradient (the frozen embeddings give none)."""
    import peft

    check_targets(model, lora)
    with warnings.catch_warnings():
        # GPT-2's Conv1D holds its weight transposed: PEFT sees it and sets fan_in_fan_out itself
        warnings.filterwarnings("ignore", message=".*fan_in_fan_out.*")
        wrapped = peft.get_peft_model(model, lora.to_peft(), autocast_adapter_dtype=True)
    inner = wrapped.get_base_model()
    for name, p in inner.named_parameters():
        if p.requires_grad and p.dtype != torch.float32:  # PEFT casts bf16/fp16 adapters up; anything else too
            p.data = p.data.float()
    if gradient_checkpointing:
        inner.enable_input_require_grads()
    return inner


def is_lora(model: Any) -> bool:
    """Whether `model` carries LoRA adapters (`apply_lora` ran on it)."""
    return getattr(model, "peft_config", None) is not None


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors (the trainable parameters), by their names in `model.state_dict()`."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def adapter_names(model: torch.nn.Module) -> set[str]:
    """The names of the adapter tensors, in any state (trainable or not: a generator's)."""
    return {n for n, _ in model.named_parameters() if ".lora_A." in n or ".lora_B." in n}


@torch.no_grad()
def load_adapter(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy a pushed adapter (`adapter_state`'s names, any float dtype) into `model`'s adapters;
    names that do not match exactly (another config, another base) fail in one line."""
    params = dict(model.named_parameters())
    want = adapter_names(model)
    if set(state) != want:
        odd = sorted(set(state) ^ want)[:3]
        raise UserError(f"the pushed adapter does not fit this generator's LoRA layers (differs at {odd}): "
                        "the trainer and the generators must wrap the same model with the same model.lora")
    for name, t in state.items():
        params[name].copy_(t)  # cast to the adapter's dtype, moved to its device
