"""The memory plan's LoRA arithmetic (`model.lora`): the adapters' size from the model's shape, and
the buffers vLLM allocates for them. Pure Python, like memory.py, which uses it.

    n = adapter_params(shape, rank=16, targets=("all-linear",))     # what the trainer trains
    b = vllm_lora_bytes(shape, rank=16, targets=("all-linear",), dtype_bytes=2, tp=1)

The adapted layers of one decoder layer (in x out; q = heads x head dim, kv = kv heads x head dim,
I the MLP width): Llama / Qwen2 / Qwen3 / Mistral q_proj H x q, k_proj and v_proj H x kv, o_proj
q x H, gate_proj and up_proj H x I, down_proj I x H; GPT-2 attn.c_attn H x 3H, attn.c_proj H x H,
mlp.c_fc H x I, mlp.c_proj I x H. "all-linear" is all of them (PEFT leaves out the LM head); a
name adapts every layer whose name is it or ends with "." + it (PEFT's rule: GPT-2's c_proj is both).
Each adapted layer holds A (r x in) and B (out x r): r x (in + out) parameters, in every layer.
"""

from __future__ import annotations

from typing import Any, Sequence

from workbench.config import ALL_LINEAR, VLLM_LORA_RANKS

# vLLM fuses these layers into one, with one LoRA slice per part (its packed_modules_mapping)
VLLM_FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
VLLM_ROW_PARALLEL = ("o_proj", "down_proj")  # their input is split over the TP ranks, the others' output


def decoder_linears(m: Any) -> dict[str, tuple[int, int]]:
    """Each linear layer of one decoder layer of `m` (a memory.ModelShape): name -> (in, out)."""
    h, i, q, kv = m.hidden, m.intermediate, m.heads * m.head_dim, m.kv_width
    if m.model_type == "gpt2":
        return {"attn.c_attn": (h, 3 * h), "attn.c_proj": (h, h), "mlp.c_fc": (h, i), "mlp.c_proj": (i, h)}
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, i),
            "up_proj": (h, i), "down_proj": (i, h)}  # fmt: skip


def adapted(m: Any, targets: Sequence[str]) -> list[str]:
    """The decoder's linear layers that `targets` (model.lora.target_modules) adapt; ValueError
    naming a target that matches none (the model load refuses it too: engine/model/lora.py)."""
    layers = decoder_linears(m)
    if list(targets) == [ALL_LINEAR]:
        return list(layers)
    hit = {t: [k for k in layers if k == t or k.endswith("." + t)] for t in targets}
    missing = [t for t, found in hit.items() if not found]
    if missing:
        raise ValueError(f"model.lora.target_modules: {', '.join(map(repr, missing))} names no linear layer of a "
                         f"{m.model_type} decoder layer ({', '.join(k.rsplit('.', 1)[-1] for k in layers)})")  # fmt: skip
    return [k for k in layers if any(k in found for found in hit.values())]


def adapter_params(m: Any, rank: int, targets: Sequence[str]) -> int:
    """The adapters' parameter count: rank x (in + out) per adapted layer, in every decoder layer."""
    layers = decoder_linears(m)
    return m.layers * sum(rank * sum(layers[k]) for k in adapted(m, targets))


def vllm_max_rank(rank: int) -> int:
    """vLLM's max_lora_rank for an adapter of `rank` (the generator asks for the same: vllm/adapter.py)."""
    return min(r for r in VLLM_LORA_RANKS if r >= rank)


def vllm_lora_bytes(m: Any, rank: int, targets: Sequence[str], dtype_bytes: int, tp: int) -> float:
    """What `enable_lora` allocates per TP rank, counted from vLLM 0.32's LoRA layers
    (vllm/lora/layers/*.py `create_lora_weights`): every layer it wraps holds, per slot
    (`max_loras`: 1 here) and per slice, lora_a_stacked [max_lora_rank x in] and lora_b_stacked
    [out x max_lora_rank] in the LoRA dtype (the model's). A fused layer (qkv_proj, gate_up_proj)
    is wrapped whole, every slice, when any of its parts is a target; a column-parallel layer's
    out and a row-parallel one's (o_proj, down_proj) in are 1/TP. max_lora_rank is the smallest
    value vLLM allows that holds the rank (16 -> 16, 4 -> 8). Left out as negligible: the punica
    index tensors (a few int64 per batched token) and the forward's shrink buffer (slices x tokens
    x rank fp32, freed after each layer)."""
    r, tp = vllm_max_rank(rank), max(1, tp)
    layers, chosen = decoder_linears(m), set(adapted(m, targets))
    if m.model_type == "gpt2":  # vLLM has no LoRA for GPT-2 (config/lora.py refuses it): as if every layer were plain
        return float(m.layers * sum(r * (i + o) for k, (i, o) in layers.items() if k in chosen) * dtype_bytes)
    wrapped = [p for parts in VLLM_FUSED.values() if chosen & set(parts) for p in parts]
    wrapped += [k for k in VLLM_ROW_PARALLEL if k in chosen]
    per_layer = 0.0
    for k in wrapped:
        i, o = layers[k]
        per_layer += r * i / tp + r * o if k in VLLM_ROW_PARALLEL else r * i + r * o / tp
    return m.layers * per_layer * dtype_bytes
