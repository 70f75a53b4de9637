"""The forward pass of a Hugging Face causal LM with the FP32 LM head (rl/head.py), shared by SFT,
the torch generator, the builtin model's checks and the trainer.

Position ids are always derived from the attention mask, so left-padded prompts see the same
positions in supervised warm-up, generation and training (HF models otherwise count pads as
positions).

    logits, past = causal_lm_forward(model, ids, mask, fp32_head=True)       # all positions
    hidden = body_hidden(model, ids, mask)                                   # the trainer: [N, L, H]
    at = shared_prompt_hidden(model, ids, mask, positions, PromptShare(p_lens, lens, groups))  # the same at positions

`shared_prompt_hidden` is what the trainer runs: a group's samples share their prompt, so each
distinct prompt runs once (with a KV cache, as in generation) and only the completions run per
row, on top of the prompt's cache repeated. The hidden states are the same function of the
tokens (causal attention: a prompt position never sees the completion); the tokens computed
fall from prompt + completion per row to completion per row + prompt per group.
"""

from __future__ import annotations

from dataclasses import dataclass
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


def _gather_cols(x: torch.Tensor, cols: torch.Tensor, valid: torch.Tensor, fill: int) -> torch.Tensor:
    """x[r, cols[r, j]] where valid, else `fill`."""
    return x.gather(1, cols.clamp(0, x.shape[1] - 1)).masked_fill(~valid, fill)


def distinct_rows(keys: list[Any]) -> tuple[list[int], list[int]]:
    """(the first row of each distinct key, each row's index into those): the rows that run a shared
    prompt once, and where each row finds its result."""
    first: dict[Any, int] = {}
    rows, inverse = [], []
    for r, key in enumerate(keys):
        u = first.setdefault(key, len(first))
        if u == len(rows):
            rows.append(r)
        inverse.append(u)
    return rows, inverse


@dataclass(frozen=True)
class PromptShare:
    """Host facts about right-padded rows [prompt | completion | pad]: each row's prompt length,
    prompt + completion length, and prompt group (rows of one group are samples of one prompt)."""

    prompt_lengths: list[int]
    lengths: list[int]
    groups: list[int]

    def distinct(self) -> tuple[list[int], list[int]]:
        """(one row per distinct prompt, each row's index into those)."""
        return distinct_rows(self.groups)


def shared_prompt_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor,
                         share: PromptShare) -> torch.Tensor:  # fmt: skip
    """The final hidden states at `positions` (bool [N, L-1], position t predicting token t+1,
    row-major order: what `body_hidden(...)[:, :-1][positions]` gives), running each distinct
    prompt once. Every position trained on must lie in the completion (t >= prompt length - 1)."""
    dev = input_ids.device
    rows, inverse = share.distinct()
    P = max(share.prompt_lengths)
    C = max(1, max(n - p for n, p in zip(share.lengths, share.prompt_lengths)))
    p = torch.tensor(share.prompt_lengths, device=dev)
    c = torch.tensor(share.lengths, device=dev) - p  # completion lengths
    pick, spread = torch.tensor(rows, device=dev), torch.tensor(inverse, device=dev)
    # the distinct prompts, left-padded to P (as the generator's prefill sees them)
    j = torch.arange(P, device=dev).unsqueeze(0)
    src = j - (P - p[pick]).unsqueeze(1)
    pre_mask = (src >= 0).long()
    pre_ids = _gather_cols(input_ids[pick], src, src >= 0, 0)
    out = model.base_model(input_ids=pre_ids, attention_mask=pre_mask, position_ids=position_ids_from_mask(pre_mask), use_cache=True)
    past = out.past_key_values
    if not hasattr(past, "batch_select_indices"):  # a cache type that cannot be repeated: rows whole
        return body_hidden(model, input_ids, attention_mask)[:, :-1][positions]
    past.batch_select_indices(spread)  # each row gets its prompt's cache (a differentiable index)
    # the completions, right-padded to C, attending to their prompt's cache
    k = torch.arange(C, device=dev).unsqueeze(0)
    in_completion = k < c.unsqueeze(1)
    suf_ids = _gather_cols(input_ids, p.unsqueeze(1) + k, in_completion, 0)
    mask = torch.cat([pre_mask[spread], in_completion.long()], dim=1)
    suf = model.base_model(input_ids=suf_ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)[:, P:],
                           past_key_values=past, use_cache=True).last_hidden_state  # fmt: skip
    # completion token k is predicted at the prompt's last position (k = 0) or at completion k - 1
    pred = torch.cat([out.last_hidden_state[spread, -1:], suf[:, :-1]], dim=1)
    at = _gather_cols(positions, p.unsqueeze(1) - 1 + k, in_completion, False)
    return pred[at]
