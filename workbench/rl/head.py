"""Forward passes of a Hugging Face causal LM with an FP32 LM head, shared by SFT, generator and trainer.

ScaleRL keeps the final projection and the logits in float32 on both the generator and the
trainer (A rose from 0.52 to 0.61 in the paper). The body may run in bf16/fp16. Position ids
are always derived from the attention mask, so left-padded prompts see the same positions in
supervised warm-up, generation and training (HF models otherwise count pads as positions).

    logits, past = causal_lm_forward(model, ids, mask, fp32_head=True)
    logp = token_logprobs(logits[:, :-1], ids[:, 1:])
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """0, 1, 2, ... over real tokens; pads get 0 (they are masked anyway)."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.clamp_(min=0)


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


def causal_lm_forward(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    fp32_head: bool = True,
    past_key_values: Any = None,
    position_ids: torch.Tensor | None = None,
    use_cache: bool = False,
) -> tuple[torch.Tensor, Any]:
    """Logits for `input_ids` (all positions) and the KV cache when `use_cache`.

    With a cache, `attention_mask` covers past + new tokens and `position_ids` must be given
    for the new tokens (the generator tracks them).
    """
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)[:, -input_ids.shape[1] :]
    out = model.base_model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=use_cache,
    )
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    logits = lm_head_logits(model, hidden, fp32_head)
    return logits, (out.past_key_values if use_cache else None)


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
