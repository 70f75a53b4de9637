"""Faster kernels for the same model: swaps that change the speed, not the function computed.

On the quickstart's trainer step (2 layers, 128 wide, 512 sequences of ~13 tokens, one
AVX512-BF16 core), `benchmarks/bench_trainer_step.py --profile` shows what each buys:

- GPT-2's `gelu_new` is Python arithmetic in transformers (`NewGELUActivation`: pow, mul, tanh,
  five passes over the MLP's activations and as many in the backward: 22% of the step's operator
  time). `torch.nn.GELU(approximate="tanh")` is the same formula in one kernel (294 -> 230 ms a step).
- In bf16 on the CPU, SDPA's flash kernel ran its backward about 6x slower than in fp32 here (a
  one-off torch.profiler reading while choosing this); the eager attention (matmul, softmax,
  matmul) does not, and at the short sequences CPU runs train it is as fast as SDPA in fp32. So
  bf16 compute on the CPU uses eager attention; CUDA and fp32 keep SDPA.

Both the trainer and the torch generators load through `load_policy`, which applies these, so
their log-probs come from the same kernels.

    model = fast_kernels(model, compute=torch.bfloat16, device="cpu")
"""

from __future__ import annotations

from typing import Any

import torch


def fused_gelu(model: torch.nn.Module) -> int:
    """Replace every `NewGELUActivation` (transformers' Python tanh-GELU) with the fused tanh-GELU
    kernel; returns how many were replaced."""
    try:
        from transformers.activations import NewGELUActivation
    except ImportError:  # a transformers without it has nothing to replace
        return 0
    swaps = [(parent, name) for parent in model.modules() for name, child in parent.named_children()
             if isinstance(child, NewGELUActivation)]  # fmt: skip
    for parent, name in swaps:
        setattr(parent, name, torch.nn.GELU(approximate="tanh"))
    return len(swaps)


def attention_for(compute: torch.dtype, device: str | torch.device) -> str | None:
    """The attention implementation for this compute dtype and device: "eager" for bf16/fp16 on
    the CPU (SDPA's flash backward is slow there), None (keep the model's, SDPA) otherwise."""
    low = compute in (torch.bfloat16, torch.float16)
    return "eager" if low and torch.device(device).type == "cpu" else None


def fast_kernels(model: Any, compute: torch.dtype, device: str | torch.device) -> Any:
    """`model` with the fused GELU and the attention that is fastest for `compute` on `device`."""
    fused_gelu(model)
    attention = attention_for(compute, device)
    if attention is not None and getattr(model.config, "_attn_implementation", None) != attention:
        model.set_attn_implementation(attention)
    return model
