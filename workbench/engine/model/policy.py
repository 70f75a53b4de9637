"""`PolicyForward`: the trainer's forward pass, a causal LM's log-probs and entropies at the
positions trained on, as one module.

The trainer runs it as it is with one worker; with several, FSDP2 shards it as its root
(engine/train/fsdp.shard), so its forward runs the body and the head together and the root's
parameters (embeddings, final norm, the head) are gathered for the head too. It returns the
log-probs and entropies of the selected positions only (`rl/head.completion_logprobs`: no
full-vocabulary logits over the prompt). The frozen KL reference is one too (train/reference.py).
"""

from __future__ import annotations

from typing import Optional

import torch

from workbench.engine.model.forward import PromptShare, body_hidden, shared_prompt_hidden
from workbench.rl.head import completion_logprobs


class PolicyForward(torch.nn.Module):
    """A HF causal LM's log-probs and entropies at chosen positions, as one module (the unit
    FSDP2 hooks into): the body over every position, the head only where `positions` is set."""

    def __init__(self, model: torch.nn.Module, fp32_head: bool):
        super().__init__()
        self.model = model
        self.fp32_head = fp32_head

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor, temperature: float = 1.0,
        share: Optional[PromptShare] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: bool [N, L-1], position t predicting token t+1 (the loss mask's layout).
        Returns (log p(token), entropy) at those positions, float32, in row-major order.
        With `share` (rows [prompt | completion | pad] and their prompt groups) the rows of a group
        run their prompt once (engine/model/forward.shared_prompt_hidden): same values, fewer tokens."""
        if share is not None and len(set(share.groups)) < input_ids.shape[0]:
            hidden_at = shared_prompt_hidden(self.model, input_ids, attention_mask, positions, share)
        else:
            hidden_at = body_hidden(self.model, input_ids, attention_mask)[:, :-1][positions]
        return completion_logprobs(
            self.model, hidden_at, input_ids[:, 1:][positions], temperature=temperature, fp32_head=self.fp32_head,
        )  # fmt: skip
