"""vLLM-CPU's LoRA ops, one matrix product per adapter instead of one adapter copy per token.

vLLM 0.32 runs LoRA on the CPU through `vllm/lora/ops/torch_ops` (called by
`punica_wrapper/punica_cpu.py`): every op gathers `weights[token_lora_indices]`, a copy of the
whole adapter matrix for each token of the batch, then multiplies token by token (`einsum("bi,
boi->bo")`). With one adapter serving every request, as the generator's (adapter.py), that copy is
most of the work: 64 sequences x 32 tokens of SmolLM2-135M took 4.4x as long as without LoRA (3.2x faster grouped)
(benchmarks/bench_vllm_lora.py prints the figure). Here, when every token names the same
slot, the op is `x @ weights[slot].T`, the same product without the copies; any other batch (mixed
slots, broadcast shapes) falls through to vLLM's own op unchanged.

    llm.collective_rpc("workbench_cpu_lora")   # -> "patched" / "unavailable (...)"; extension.py

The GPU build runs Triton punica kernels and is never patched (the generator asks only on the CPU).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice", "sgmv_shrink", "sgmv_expand", "sgmv_expand_slice")


def one_slot(inputs: torch.Tensor, indices: torch.Tensor) -> int | None:
    """The slot every token names, or None (a mixed batch, or shapes vLLM broadcasts)."""
    if inputs.dim() != 2 or indices.dim() != 1 or indices.numel() != inputs.shape[0] or indices.numel() == 0:
        return None
    first = indices[0]
    return int(first) if bool((indices == first).all()) else None


def slot_product(inputs: torch.Tensor, weights: torch.Tensor, slot: int, dtype: torch.dtype) -> torch.Tensor:
    """`inputs @ weights[slot].T` in `dtype`: what vLLM's einsum gives every token of one slot."""
    w = weights[slot]
    if w.dim() == 3:  # [1, out, in]: vLLM's stacked layout keeps a singleton dimension
        w = w.squeeze(0)
    return inputs.to(dtype) @ w.to(dtype).t()


def grouped_shrink(original: Callable) -> Callable:
    def bgmv_shrink(inputs, lora_a_weights, output_tensor, lora_indices_tensor, scaling=1.0):  # type: ignore[no-untyped-def]
        slot = one_slot(inputs, lora_indices_tensor)
        if slot is None:
            return original(inputs, lora_a_weights, output_tensor, lora_indices_tensor, scaling)
        out = slot_product(inputs, lora_a_weights, slot, output_tensor.dtype)
        output_tensor[:, : out.shape[1]] = scaling * out

    return bgmv_shrink


def grouped_expand(original: Callable) -> Callable:
    def bgmv_expand(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs=True):  # type: ignore[no-untyped-def]
        slot = one_slot(inputs, lora_indices_tensor)
        if slot is None or output_tensor.shape[0] != inputs.shape[0]:
            return original(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs)
        out = slot_product(inputs, lora_b_weights, slot, output_tensor.dtype)
        n = min(out.shape[1], output_tensor.shape[1])  # adapter and model may pad differently
        if add_inputs:
            output_tensor[:, :n] += out[:, :n]
        else:
            output_tensor[:, :n] = out[:, :n]

    return bgmv_expand


def grouped_expand_slice(original: Callable) -> Callable:
    def bgmv_expand_slice(inputs, lora_b_weights, output_tensor, lora_indices_tensor, slice_offset, slice_size,  # type: ignore[no-untyped-def]
                          add_inputs=True):  # fmt: skip
        slot = one_slot(inputs, lora_indices_tensor)
        if slot is None:
            return original(inputs, lora_b_weights, output_tensor, lora_indices_tensor, slice_offset, slice_size, add_inputs)
        out = slot_product(inputs, lora_b_weights, slot, output_tensor.dtype)
        if add_inputs:
            output_tensor[:, slice_offset : slice_offset + slice_size] += out
        else:
            output_tensor[:, slice_offset : slice_offset + slice_size] = out

    return bgmv_expand_slice


def per_token(indices: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """The prefill ops' per-sequence slots spread over their tokens (what vLLM's sgmv_* do first)."""
    return torch.repeat_interleave(indices, seq_lens)


def grouped_ops(torch_ops: Any) -> dict[str, Callable]:
    """The six ops of `vllm.lora.ops.torch_ops`, each taking the one-slot path where it can."""
    shrink = grouped_shrink(torch_ops.bgmv_shrink)
    expand = grouped_expand(torch_ops.bgmv_expand)
    expand_slice = grouped_expand_slice(torch_ops.bgmv_expand_slice)

    def sgmv_shrink(inputs, w, out, b_seq_start_loc, seq_len_tensor, lora_indices_tensor, batches, max_seq_length,  # type: ignore[no-untyped-def]
                    token_nums, scaling):  # fmt: skip
        shrink(inputs, w, out, per_token(lora_indices_tensor, seq_len_tensor), scaling)

    def sgmv_expand(inputs, w, out, b_seq_start_loc, seq_len_tensor, lora_indices_tensor, batches, max_seq_length,  # type: ignore[no-untyped-def]
                    token_nums, add_inputs=False):  # fmt: skip
        expand(inputs, w, out, per_token(lora_indices_tensor, seq_len_tensor), add_inputs)

    def sgmv_expand_slice(inputs, w, out, b_seq_start_loc, seq_len_tensor, lora_indices_tensor, batches,  # type: ignore[no-untyped-def]
                          max_seq_length, token_nums, slice_offset, slice_size, add_inputs=False):  # fmt: skip
        expand_slice(inputs, w, out, per_token(lora_indices_tensor, seq_len_tensor), slice_offset, slice_size, add_inputs)

    return {"bgmv_shrink": shrink, "bgmv_expand": expand, "bgmv_expand_slice": expand_slice,
            "sgmv_shrink": sgmv_shrink, "sgmv_expand": sgmv_expand, "sgmv_expand_slice": sgmv_expand_slice}  # fmt: skip


def patch_punica_cpu() -> str:
    """Point vLLM's CPU punica wrapper at the grouped ops (idempotent); the mode it reports."""
    try:
        from vllm.lora.ops import torch_ops
        from vllm.lora.punica_wrapper import punica_cpu
    except ImportError as e:
        return f"unavailable ({e})"
    if getattr(punica_cpu, "_wb_grouped", False):
        return "patched"
    if not all(callable(getattr(punica_cpu, name, None)) and callable(getattr(torch_ops, name, None)) for name in OPS):
        return "unavailable (this vLLM's punica_cpu does not call the six torch ops by name)"
    for name, fn in grouped_ops(torch_ops).items():
        setattr(punica_cpu, name, fn)
    punica_cpu._wb_grouped = True
    return "patched"
