"""The attention's share of what a trainer's micro-batch keeps for the backward (the plan's terms).

    probs, mask = attention_bytes(layers=30, heads=9, pairs=4096 * 1280, compute_bytes=2, on_cpu=True,
                                  checkpointing=False)

On the CPU in bf16 or fp16 the trainer runs HF's eager attention (engine/model/kernels.attention_for),
which keeps every layer's heads x T x T probabilities twice (the fp32 softmax and its compute-dtype
copy): quadratic in the row. SDPA keeps none, only a mask. memory.py's trainer terms add these;
the formulas are in its docstring, the measurements in tests/engine/plan/test_attention_memory.py.
"""

from __future__ import annotations

SOFTMAX_BYTES = 4  # HF's eager attention: softmax(..., dtype=torch.float32), kept for its backward


def eager_attention(on_cpu: bool, compute_bytes: int) -> bool:
    """Whether the trainer runs HF's eager attention: bf16/fp16 compute on the CPU (the rule of
    engine/model/kernels.attention_for, which this pure-Python module does not import); SDPA otherwise."""
    return on_cpu and compute_bytes < 4


def attention_bytes(*, layers: int, heads: int, pairs: int, compute_bytes: int, on_cpu: bool,
                    checkpointing: bool) -> tuple[float, float]:  # fmt: skip
    """(attention probabilities, attention mask): what a micro-batch keeps for the backward that
    grows with its query/key `pairs` (rows x row^2, at most micro-batch tokens x row), in bytes, for a
    model of `layers` layers and `heads` attention heads (memory.py's docstring has the formulas)."""
    b = compute_bytes
    kept = 1 if checkpointing else layers  # layers whose attention is kept at once
    if eager_attention(on_cpu, b):
        per_pair = SOFTMAX_BYTES + (b if b != SOFTMAX_BYTES else 0)  # fp32 softmax + its compute-dtype copy
        mask = SOFTMAX_BYTES * pairs if checkpointing else 0.0  # the float mask: each layer's input
        return (kept + 1) * heads * pairs * per_pair, mask
    if on_cpu:  # SDPA: the float mask it makes from the boolean one, each layer (checkpointing: + the boolean input)
        return 0.0, kept * pairs * b + (pairs if checkpointing else 0)
    return 0.0, float(pairs)  # CUDA: the boolean mask
