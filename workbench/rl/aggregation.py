"""Loss aggregation as per-token weights over the whole optimizer batch.

The three ways the ScaleRL paper averages a per-token loss become one weight per token, computed
ONCE on the full optimizer batch (all micro-batches, all accumulation steps) before any
forward pass. Each micro-batch then contributes `sum(per_token_loss * weights)` and the summed
micro-batch gradients are exactly the full-batch gradient, whatever the split. (Dividing by a
micro-batch's own token count and averaging over micro-batches is NOT the full-batch mean: a
pitfall other engines fell into.)

    weights = aggregation_weights(mask, prompt_index, "prompt")     # [N, T], sums to 1
    for rows in micro_batches:
        loss, stats = policy_loss(cfg, logp[rows], ..., weights=weights[rows])
        loss.backward()                                        # accumulates the exact gradient

Modes, with len_i = number of valid tokens of sequence i and G(i) its prompt's group:
  prompt: w_it = 1 / (P * sum_{j in G(i)} len_j)   mean over a prompt's tokens, then over prompts
                                                  (ScaleRL)
  sample: w_it = 1 / (S * len_i)                   mean over a sequence's tokens, then over
                                                  sequences (GRPO)
  token:  w_it = 1 / sum_j len_j                   mean over all tokens of the batch (DAPO)
P and S count only the groups / sequences that have at least one valid token, so the weights
always sum to 1, and an all-masked sequence or group gets weight 0 (never NaN).

An empty batch (mask all zero, e.g. after zero-variance filtering removed every group) raises
`EmptyBatchError` (a `UserError`): there is nothing to train on and the caller must skip the
optimizer step explicitly (a zero-gradient AdamW step would still move the weights through
momentum and weight decay). Check `bool(mask.any())` first to skip without the exception.
"""

from __future__ import annotations

from typing import Literal

import torch

from workbench.errors import UserError
from workbench.rl._checks import EmptyBatchError, as_mask, check_per_sequence, group_ids

AggregationMode = Literal["prompt", "sample", "token"]
MODES = ("prompt", "sample", "token")


def aggregation_weights(mask: torch.Tensor, prompt_index: torch.Tensor, mode: AggregationMode) -> torch.Tensor:
    """Per-token float32 weights [N, T] summing to 1 over the batch (0 where mask is 0).

    mask: [N, T] 0/1 or bool, 1 on tokens that enter the loss (sampled completion tokens).
    prompt_index: [N] integer id of each sequence's prompt (any ids; sequences of one prompt
    share an id). Raises EmptyBatchError when no token is valid.
    """
    if mode not in MODES:
        raise UserError(f"aggregation mode {mode!r} is not one of {list(MODES)}")
    m = as_mask("mask", mask)
    n = m.shape[0]
    check_per_sequence("prompt_index", prompt_index, n)
    if n == 0 or not bool(m.any()):
        raise EmptyBatchError(
            f"aggregation_weights: the batch has no valid token (mask shape {tuple(m.shape)} is all zero); "
            "skip this update"
        )
    lengths = m.sum(dim=1)  # [N]
    if mode == "token":
        return m / lengths.sum()
    if mode == "sample":
        n_seqs = (lengths > 0).sum()
        # clamp: an empty sequence has mask 0 everywhere, so its row stays 0 instead of 0/0
        return m / (n_seqs * lengths.clamp(min=1.0)).unsqueeze(1)
    gid, n_groups = group_ids(prompt_index.to(m.device))
    group_tokens = torch.zeros(n_groups, dtype=torch.float32, device=m.device).index_add_(0, gid, lengths)
    n_prompts = (group_tokens > 0).sum()
    denom = n_prompts * group_tokens.clamp(min=1.0)[gid]
    return m / denom.unsqueeze(1)


def micro_batch_slices(n: int, micro_batch_size: int) -> list[slice]:
    """Contiguous row slices of at most `micro_batch_size` sequences covering 0..n-1."""
    if micro_batch_size < 1:
        raise UserError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    return [slice(i, min(i + micro_batch_size, n)) for i in range(0, n, micro_batch_size)]
