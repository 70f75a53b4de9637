"""The forward pass of a Hugging Face causal LM with the FP32 LM head (rl/head.py), shared by SFT,
the torch generator, the builtin model's checks and the trainer.

Position ids are always derived from the attention mask, so left-padded prompts see the same
positions in supervised warm-up, generation and training (HF models otherwise count pads as
positions).

    logits, past = causal_lm_forward(model, ids, mask, fp32_head=True)       # all positions
    hidden = body_hidden(model, ids, mask)                                   # the trainer: [N, L, H]
"""

from __future__ import annotations

from typing import Any

import torch

from workbench.rl.head import lm_head_logits


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """0, 1, 2, ... over real tokens; pads get 0 (they are masked anyway)."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.clamp_(min=0)


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
    hidden, past = _body(model, input_ids, attention_mask, past_key_values, position_ids, use_cache)
    return lm_head_logits(model, hidden, fp32_head), past


def _body(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, past_key_values: Any,
          position_ids: torch.Tensor | None, use_cache: bool) -> tuple[torch.Tensor, Any]:
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
    return hidden, (out.past_key_values if use_cache else None)


def body_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The final hidden states [N, L, H] (before the head), positions from the mask."""
    return _body(model, input_ids, attention_mask, None, None, False)[0]
