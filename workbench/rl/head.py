"""The FP32 LM head and the log-probs / entropy computed from it, shared by SFT, generator and trainer.

ScaleRL keeps the final projection and the logits in float32 on both the generator and the
trainer (A rose from 0.52 to 0.61 in the paper). The body may run in bf16/fp16 (the model's
forward, with position ids from the mask, is `workbench.engine.model.forward`).

    logits = lm_head_logits(model, hidden, fp32_head=True)
    logp = token_logprobs(logits[:, :-1], ids[:, 1:])

Training never builds that full [batch, length, vocab] tensor: `completion_logprobs` applies
the head only to the positions trained on (completion tokens, never the prompt) and computes
log-probs and entropy chunk by chunk from one logsumexp, recomputing each chunk's logits in
the backward (`HEAD_CHUNK_BYTES` bounds the fp32 logits alive at once; the gradients are the
exact ones of the full computation):

    hidden = body_hidden(model, ids, mask)                     # [N, L, H]
    pos = loss_mask > 0                                        # [N, L-1]
    logp, ent = completion_logprobs(model, hidden[:, :-1][pos], ids[:, 1:][pos])
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def lm_head_logits(model: Any, hidden: torch.Tensor, fp32_head: bool) -> torch.Tensor:
    """Project hidden states to logits; in float32 when `fp32_head`.

    The matmul is done from the head's own weight cast on the fly, so a model with tied
    input/output embeddings keeps its embedding in the body's dtype (casting the shared module
    in place would silently change the embedding too). It runs with autocast disabled: under
    `torch.autocast(dtype=bf16)` a plain F.linear would be computed in bf16.
    """
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings (LM head)")
    if not fp32_head:
        return head(hidden)
    # autocast (bf16 compute over fp32 master weights) would downcast this matmul: keep it fp32
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        if head.weight.dtype == torch.float32 and (getattr(head, "bias", None) is None or head.bias.dtype == torch.float32):
            # call the module itself, so hooks on it (an FSDP2 unit holding the head) run
            return head(hidden.float())
        weight = head.weight.float()
        bias = head.bias.float() if getattr(head, "bias", None) is not None else None
        return F.linear(hidden.float(), weight, bias)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[token], computed in float32 without materialising all log-probs twice."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / T) per position (float32)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


# The fp32 logits of one chunk of rows: the head's forward holds 2 such tensors at once and its
# backward 3, so a 151,936-token vocabulary runs ~440 rows per chunk (~0.8 GB transient).
HEAD_CHUNK_BYTES = 256 * 2**20


def head_chunk_rows(vocab: int, chunk_bytes: int | None = None) -> int:
    """Rows per chunk so that one chunk's fp32 logits take at most `chunk_bytes`
    (default `HEAD_CHUNK_BYTES`), at least 1."""
    return max(1, (chunk_bytes or HEAD_CHUNK_BYTES) // (4 * max(1, vocab)))


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float) -> torch.Tensor:
    z = F.linear(h, weight, bias).float()
    return z.div_(temperature) if temperature != 1.0 else z


class _ChunkedHead(torch.autograd.Function):
    """log p(target) and entropy of softmax(h W^T + b) / T, chunk by chunk over the rows.

    Saves only the inputs and the per-row logsumexp and entropy; each chunk's logits are
    recomputed in the backward. With z the scaled logits, p = softmax(z), H the entropy:
    d logp/dz = onehot(target) - p,  dH/dz = -p * (log p + H), and dz/dlogits = 1/T.
    """

    @staticmethod
    def forward(ctx, h, weight, bias, targets, temperature, rows):  # type: ignore[override]
        n = h.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=h.device)
        ent, lse = torch.empty_like(logp), torch.empty_like(logp)
        for s in range(0, n, rows):
            z = _chunk_logits(h[s : s + rows], weight, bias, temperature)
            m = torch.logsumexp(z, dim=-1)
            logp[s : s + rows] = z.gather(-1, targets[s : s + rows, None])[:, 0] - m
            p = torch.exp(z - m[:, None])
            # H = lse - sum_v p_v z_v, as a batched dot product (no [rows, vocab] product kept)
            ent[s : s + rows] = m - torch.bmm(p[:, None, :], z[:, :, None])[:, 0, 0]
            lse[s : s + rows] = m
        ctx.save_for_backward(h, weight, bias, targets, lse, ent)
        ctx.temperature, ctx.rows = temperature, rows
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(lse)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):  # type: ignore[override]
        h, weight, bias, targets, lse, ent = ctx.saved_tensors
        temp, rows = ctx.temperature, ctx.rows
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(h) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b and bias is not None else None
        if g_logp is None and g_ent is None:
            return grad_h, grad_w, grad_b, None, None, None
        for s in range(0, h.shape[0], rows):
            hc, e = h[s : s + rows], s + rows
            logq = _chunk_logits(hc, weight, bias, temp).sub_(lse[s:e, None])  # log p, in place
            p = logq.exp()
            gz = torch.zeros_like(p)
            if g_logp is not None:
                gz.addcmul_(p, g_logp[s:e, None], value=-1.0)
                gz.scatter_add_(-1, targets[s:e, None], g_logp[s:e, None].float())
            if g_ent is not None:  # - g * p * (log p + H), reusing logq's memory
                gz.sub_(logq.add_(ent[s:e, None]).mul_(p).mul_(g_ent[s:e, None]))
            del logq, p
            if temp != 1.0:
                gz.div_(temp)
            gz = gz.to(h.dtype)
            if grad_h is not None:
                grad_h[s:e] = gz @ weight
            if grad_w is not None:
                grad_w.addmm_(gz.t().float(), hc.float())  # fp32 accumulation over the chunks
            if grad_b is not None:
                grad_b += gz.float().sum(0)
        grad_w = grad_w.to(weight.dtype) if grad_w is not None else None
        grad_b = grad_b.to(bias.dtype) if grad_b is not None else None
        return grad_h, grad_w, grad_b, None, None, None


def completion_logprobs(
    model: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    fp32_head: bool = True,
    chunk_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(target), entropy), both float32 [n], for selected positions' hidden states [n, H].

    The same numbers as `token_logprobs` / `token_entropy` over `lm_head_logits`, with exact
    gradients, but no [n, vocab] tensor outlives a chunk of `chunk_rows` rows (default:
    `head_chunk_rows(vocab)`). The head is computed in float32 when `fp32_head` (from the
    head's own weight, cast on the fly: a tied embedding keeps its dtype), else in the body's
    dtype (the autocast dtype when autocast is on).
    """
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings (LM head)")
    weight, bias = head.weight, getattr(head, "bias", None)
    dev = hidden.device.type
    if fp32_head:
        dtype = torch.float32
    else:
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else hidden.dtype
    rows = chunk_rows or head_chunk_rows(weight.shape[0])
    with torch.autocast(device_type=dev, enabled=False):  # the dtype is chosen above, not by autocast
        return _ChunkedHead.apply(
            hidden.to(dtype), weight.to(dtype), bias.to(dtype) if bias is not None else None,
            targets.long(), float(temperature), rows,
        )  # fmt: skip
