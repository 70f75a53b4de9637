"""Length control: forced interruption (ScaleRL) and the DAPO overlong penalty.

Forced interruption. Each generation draws a thinking budget in [budget_min, budget_max]
tokens. If the generation reaches its budget without having closed its thinking (the
end-of-thinking marker, e.g. '</think>', has not appeared), the phrase "Okay, time is up. ...
</think>" is force-fed and the model continues into its answer for at most `answer_budget`
more tokens. The forced phrase was not sampled by the policy, so it is left out of the loss;
the answer after it is trained on. Budgets are absolute token counts, or fractions of
max_new_tokens when <= 1.0 (as in `LengthControlConfig`).

A torch generator calls one state per sequence at every decode step:

    fi = ForcedInterruption.from_config(recipe.length_control, max_new_tokens, tokenizer)
    state = fi.start(fi.draw_budget(rng))
    for each decode step:
        tok = sample(...); append tok (sampled)
        forced = state.after_token(tok)
        if forced: append the forced ids without sampling (the state marks them not sampled)
        if state.done() or tok == eos: stop
    loss_mask = state.loss_mask            # 1 = sampled (trained on), 0 = forced phrase

A two-phase generator (e.g. vLLM: generate up to the budget, then continue) uses
`fi.force_after(generated_ids, budget)` to get the phrase to append, or None.

With a real (BPE) tokenizer the policy can spell the marker with other tokens than the ids
`encode(end_think)` gives (merges depend on the text around it), so `from_config` also gives
the states the tokenizer's `decode`: thinking counts as closed once the decoded text of the
last few tokens contains the marker, whichever tokens spelled it. The phrase and the marker are
encoded with the policy's own tokenizer; a multi-token phrase is forced one token per step.

DAPO overlong penalty (reward shaping), with L = l_max and C = l_cache:
    0                      if len <= L - C
    ((L - C) - len) / C    if L - C < len <= L       (linear from 0 down to -1)
    -1                     if len > L
"""

from __future__ import annotations

import random
from typing import Any, Callable, Optional, Sequence, Union

import torch

from workbench.errors import UserError


def resolve_tokens(value: float, max_new_tokens: int, name: str) -> int:
    """A token count from an absolute value (> 1.0) or a fraction of max_new_tokens (<= 1.0)."""
    if value is None or value < 0:
        raise UserError(f"{name} must be >= 0, got {value!r}")
    if value <= 1.0:
        return int(round(value * max_new_tokens))
    return int(round(value))


class InterruptionState:
    """Per-sequence bookkeeping of forced interruption; see the module docstring."""

    def __init__(
        self, budget: int, phrase_ids: list[int], end_think_ids: list[int], answer_budget: int,
        end_think_text: Optional[str] = None, decode: Optional[Callable[[list[int]], str]] = None,
    ) -> None:  # fmt: skip
        self.budget = int(budget)
        self.phrase_ids = list(phrase_ids)
        self.end_think_ids = list(end_think_ids)
        self.answer_budget = int(answer_budget)
        self.n = 0  # completion tokens so far, sampled + forced
        self.loss_mask: list[int] = []  # 1 per sampled token, 0 per forced token
        self.thinking_closed = False  # the policy produced the end-of-thinking marker itself
        self.interrupted_at: Optional[int] = None  # index of the first forced token
        self.answer_start: Optional[int] = None  # index of the first token after thinking
        self._tail: list[int] = []
        # Text detection: the marker spans at most one token per byte of its UTF-8 form.
        self._text = end_think_text if (end_think_text and decode is not None) else None
        self._decode = decode
        self._width = len(end_think_text.encode("utf-8")) if self._text else 0
        self._window: list[int] = []

    @property
    def interrupted(self) -> bool:
        return self.interrupted_at is not None

    @property
    def forced_positions(self) -> range:
        """Indices (into the completion) of the forced phrase tokens; empty when not interrupted."""
        if self.interrupted_at is None:
            return range(0)
        return range(self.interrupted_at, self.interrupted_at + len(self.phrase_ids))

    def after_token(self, token_id: Union[int, torch.Tensor]) -> Optional[list[int]]:
        """Record one SAMPLED token; returns the phrase ids to force-feed now, or None.

        The caller must append every returned id to the sequence (they are counted here as
        generated and marked not sampled).
        """
        tok = int(token_id)
        self.n += 1
        self.loss_mask.append(1)
        if self.thinking_closed or self.interrupted:
            return None
        k = len(self.end_think_ids)
        self._tail = (self._tail + [tok])[-k:]
        if self._tail == self.end_think_ids or self._closes_in_text(tok):
            self.thinking_closed = True
            self.answer_start = self.n
            return None
        if self.n >= self.budget:
            self.interrupted_at = self.n
            self.n += len(self.phrase_ids)
            self.loss_mask.extend([0] * len(self.phrase_ids))
            self.answer_start = self.n
            return list(self.phrase_ids)
        return None

    def _closes_in_text(self, tok: int) -> bool:
        if self._text is None:
            return False
        self._window = (self._window + [tok])[-self._width :]
        return self._text in self._decode(self._window)

    def done(self, n_generated: Optional[int] = None) -> bool:
        """True once the answer budget after an interruption is used up.

        n_generated: completion tokens so far (sampled + forced); defaults to the state's count.
        A sequence that closed its thinking by itself is bounded only by max_new_tokens.
        """
        if not self.interrupted:
            return False
        n = self.n if n_generated is None else int(n_generated)
        return n >= self.answer_start + self.answer_budget


class ForcedInterruption:
    """Forced-interruption policy shared by all sequences of a generator."""

    def __init__(
        self,
        phrase_ids: Sequence[int],
        max_new_tokens: int,
        budget_min: float,
        budget_max: float,
        answer_budget: float,
        *,
        end_think_ids: Optional[Sequence[int]] = None,
        end_think_text: Optional[str] = None,
        decode: Optional[Callable[[list[int]], str]] = None,
    ) -> None:
        """end_think_ids: the marker that closes thinking (e.g. the ids of '</think>'); default:
        the phrase's last token. The phrase should end with it. end_think_text + decode (token
        ids -> text): also detect the marker in the decoded text (BPE spells it many ways)."""
        self.end_think_text = end_think_text
        self.decode = decode
        self.phrase_ids = [int(t) for t in phrase_ids]
        if not self.phrase_ids:
            raise UserError("forced interruption: the phrase encodes to no token")
        self.end_think_ids = [int(t) for t in (end_think_ids if end_think_ids is not None else self.phrase_ids[-1:])]
        if not self.end_think_ids:
            raise UserError("forced interruption: end_think_ids is empty")
        if int(max_new_tokens) < 1:
            raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.max_new_tokens = int(max_new_tokens)
        self.budget_min = resolve_tokens(budget_min, self.max_new_tokens, "length_control.budget_min")
        self.budget_max = resolve_tokens(budget_max, self.max_new_tokens, "length_control.budget_max")
        self.max_answer_tokens = resolve_tokens(answer_budget, self.max_new_tokens, "length_control.answer_budget")
        if not 1 <= self.budget_min <= self.budget_max:
            raise UserError(
                f"length_control: need 1 <= budget_min <= budget_max, got {self.budget_min} and "
                f"{self.budget_max} tokens (max_new_tokens = {self.max_new_tokens})"
            )
        if self.max_answer_tokens < 1:
            raise UserError(f"length_control.answer_budget resolves to {self.max_answer_tokens} tokens; need >= 1")
        need = self.budget_max + len(self.phrase_ids) + self.max_answer_tokens
        if need > self.max_new_tokens:
            raise UserError(
                f"forced interruption does not fit in max_new_tokens = {self.max_new_tokens}: thinking budget up "
                f"to {self.budget_max} + phrase {len(self.phrase_ids)} + answer {self.max_answer_tokens} = {need} "
                "tokens; raise generation.max_new_tokens, lower the budgets, shorten the phrase, or use "
                "length_control.type = penalty / none"
            )

    @classmethod
    def from_config(cls, cfg: Any, max_new_tokens: int, tokenizer: Any) -> "ForcedInterruption":
        """Build from a `LengthControlConfig`, encoding cfg.phrase and cfg.end_think with `tokenizer`."""
        if cfg.end_think not in cfg.phrase:
            raise UserError(
                f"length_control.phrase must contain the end-of-thinking marker {cfg.end_think!r} "
                f"(length_control.end_think), got {cfg.phrase!r}"
            )
        return cls(
            _encode(tokenizer, cfg.phrase),
            max_new_tokens,
            cfg.budget_min,
            cfg.budget_max,
            cfg.answer_budget,
            end_think_ids=_encode(tokenizer, cfg.end_think),
            end_think_text=cfg.end_think,
            decode=_decoder(tokenizer),
        )

    def draw_budget(self, rng: Union[torch.Generator, random.Random]) -> int:
        """A thinking budget uniform over the integers in [budget_min, budget_max]."""
        if isinstance(rng, random.Random):
            return rng.randint(self.budget_min, self.budget_max)
        if isinstance(rng, torch.Generator):
            return int(torch.randint(self.budget_min, self.budget_max + 1, (1,), generator=rng).item())
        raise UserError(f"draw_budget: rng must be a torch.Generator or random.Random, got {type(rng).__name__}")

    def start(self, budget: int) -> InterruptionState:
        """A fresh per-sequence state with the given thinking budget."""
        return InterruptionState(
            budget, self.phrase_ids, self.end_think_ids, self.max_answer_tokens, self.end_think_text, self.decode
        )

    def force_after(self, generated_ids: Sequence[int], budget: int) -> Optional[list[int]]:
        """For two-phase generation: the phrase to append after `generated_ids`, or None.

        None when the marker appeared within the first `budget` tokens or fewer than `budget`
        tokens were generated (the generation ended by itself).
        """
        state = self.start(budget)
        for tok in generated_ids:
            forced = state.after_token(tok)
            if forced is not None:
                return forced
            if state.thinking_closed:
                return None
        return None


def _encode(tokenizer: Any, text: str) -> list[int]:
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:  # tokenizers without the keyword add no special tokens anyway
        ids = tokenizer.encode(text)
    return [int(t) for t in ids]


def _decoder(tokenizer: Any) -> Optional[Callable[[list[int]], str]]:
    """ids -> text with the tokenizer (special tokens kept), or None when it cannot decode."""
    decode = getattr(tokenizer, "decode", None)
    if decode is None:
        return None
    return lambda ids: decode(ids)


def from_config(cfg: Any, max_new_tokens: int, tokenizer: Any) -> ForcedInterruption:
    """Same as `ForcedInterruption.from_config`."""
    return ForcedInterruption.from_config(cfg, max_new_tokens, tokenizer)


def overlong_penalty(lengths: torch.Tensor, max_new_tokens: int, l_max: float, l_cache: float) -> torch.Tensor:
    """DAPO soft overlong penalty per sequence (float32, in [-1, 0]); see the module docstring."""
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1:
        shape = tuple(lengths.shape) if isinstance(lengths, torch.Tensor) else type(lengths).__name__
        raise UserError(f"lengths: expected a 1-D tensor [N], got {shape}")
    L = resolve_tokens(l_max, max_new_tokens, "length_control.l_max")
    C = resolve_tokens(l_cache, max_new_tokens, "length_control.l_cache")
    if not 0 < C <= L:
        raise UserError(f"overlong penalty needs 0 < l_cache <= l_max, got {C} and {L} tokens")
    n = lengths.float()
    ramp = ((L - C) - n) / C
    return torch.where(n <= L - C, torch.zeros_like(n), torch.where(n <= L, ramp, -torch.ones_like(n)))
