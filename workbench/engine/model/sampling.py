"""Batched sampling with a KV cache for the torch generator backend (CPU and small GPU runs).

One decode loop for a batch of left-padded prompts. Between decode steps it calls `on_step()`,
which may swap the model's weights (PipelineRL in-flight update: the sequences continue with
the new weights and their old, stale KV cache) and returns the policy version now in force.
Every completion token records the log-prob it was sampled with (FP32 head, full softmax at
the given temperature: no top-k/top-p, so the trainer's ratio compares like with like) and the
policy version that produced it.

    outs = sample_batch(model, [[5, 6, 7], [5, 9]], max_new_tokens=8, eos_id=1, pad_id=0,
                        generator=torch.Generator().manual_seed(0))
    texts = sample_completions(model, tok, ["12+3="], max_new_tokens=4)   # text in, text out
    rate = sampled_pass_rate(model, tok, task.val, k=4, max_new_tokens=8, seed=0)   # mean@k
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from workbench.engine.model.forward import causal_lm_forward, distinct_rows


@dataclass
class Completion:
    """One generated sequence. `sampled[i]` is False for tokens forced by length control."""

    prompt_tokens: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)
    finished: bool = False  # ended with EOS; False = cut at the length limit
    interrupted: bool = False  # length control forced the end-of-thinking phrase


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if len(p):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
    return ids, mask


@torch.no_grad()
def sample_batch(
    model: Any,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    fp32_head: bool = True,
    generator: Optional[torch.Generator] = None,
    on_step: Optional[Callable[[], int]] = None,
    version: int = 0,
    interruptions: Optional[list[Any]] = None,
    limits: Optional[Sequence[int]] = None,
) -> list[Completion]:
    """Sample completions for `prompts` (lists of token ids); see the module docstring.

    `interruptions`: optional per-sequence length-control states with
    `after_token(token_id) -> list[int] | None` (phrase ids to force) and `done(n) -> bool`.
    `limits`: each sequence's own most new tokens (an environment's turns), within `max_new_tokens`.
    """
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("sample_batch: every prompt needs at least one token")
    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, pad_id)
    ids, mask = ids.to(device), mask.to(device)
    n = len(prompts)
    positions = mask.sum(-1)  # position id of the next token per sequence
    next_logits, past = _prefill(model, prompts, ids, mask, fp32_head)
    active = torch.ones(n, dtype=torch.bool, device=device)
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    # per-step columns, turned into per-sequence lists once at the end (no Python loop per token)
    tok_cols, lp_cols, live_cols, forced_cols, versions = [], [], [], [], []
    forced: list[list[int]] = [[] for _ in range(n)]
    interrupted = [False] * n
    limit_t = None if limits is None else torch.tensor([int(x) for x in limits], device=device)
    emitted = torch.zeros(n, dtype=torch.long, device=device)
    for _step in range(max_new_tokens):
        logp_all, tokens = _draw(next_logits, temperature, generator)
        was_forced = torch.zeros(n, dtype=torch.bool, device=device)
        if interruptions is not None:
            for i in range(n):
                if forced[i] and active[i]:
                    tokens[i] = forced[i].pop(0)
                    was_forced[i] = True
        tok_logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        tok_cols.append(tokens)
        lp_cols.append(tok_logp)
        live_cols.append(active.clone())
        forced_cols.append(was_forced)
        versions.append(version)
        emitted += active.long()
        ended = active & (tokens == eos_id) & ~was_forced
        finished |= ended
        active = active & ~ended
        if limit_t is not None:  # a sequence at its own limit stops (it is cut, not finished)
            active = active & (emitted < limit_t)
        if interruptions is not None:
            tl = tokens.tolist()
            for i in range(n):
                st = interruptions[i]
                if st is None or not active[i]:
                    continue
                if not was_forced[i]:
                    phrase = st.after_token(tl[i])
                    if phrase:
                        forced[i] = list(phrase)
                        interrupted[i] = True
                if not forced[i] and st.done(int(torch.stack(live_cols)[:, i].sum())):
                    active[i] = False
        if not bool(active.any()) or _step == max_new_tokens - 1:
            break
        if on_step is not None:
            version = on_step()  # may load new weights: the KV cache is kept (stale)
        tokens = tokens.masked_fill(~active, pad_id)
        mask = torch.cat([mask, active.long().unsqueeze(-1)], dim=-1)
        logits, past = causal_lm_forward(
            model,
            tokens.unsqueeze(-1),
            mask,
            fp32_head=fp32_head,
            past_key_values=past,
            position_ids=positions.unsqueeze(-1),
            use_cache=True,
        )
        positions = positions + active.long()
        next_logits = logits[:, -1]
    return _completions(prompts, tok_cols, lp_cols, live_cols, forced_cols, versions, finished.tolist(), interrupted)


def _prefill(model: Any, prompts: list[list[int]], ids: torch.Tensor, mask: torch.Tensor, fp32_head: bool) -> tuple[torch.Tensor, Any]:
    """The last position's logits and the KV cache of the left-padded batch. A group's samples
    share their prompt (`generations_per_prompt` copies): each distinct prompt is run once and its
    cache rows repeated, which cuts the prefill's compute by that factor."""
    rows, inverse = distinct_rows([tuple(p) for p in prompts])
    if len(rows) == len(prompts):
        logits, past = causal_lm_forward(model, ids, mask, fp32_head=fp32_head, use_cache=True)
        return logits[:, -1], past
    picked = torch.tensor(rows, device=ids.device)
    logits, past = causal_lm_forward(model, ids[picked], mask[picked], fp32_head=fp32_head, use_cache=True)
    if not hasattr(past, "batch_select_indices"):  # a cache type that cannot be repeated: run them all
        logits, past = causal_lm_forward(model, ids, mask, fp32_head=fp32_head, use_cache=True)
        return logits[:, -1], past
    spread = torch.tensor(inverse, device=ids.device)
    past.batch_select_indices(spread)
    return logits[:, -1][spread], past


def _draw(next_logits: torch.Tensor, temperature: float, generator: Optional[torch.Generator]):
    """(log-probs of the sampling distribution [n, V], the drawn tokens [n])."""
    if temperature > 0:
        logp_all = torch.log_softmax(next_logits.float() / temperature, dim=-1)
        return logp_all, torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
    logp_all = torch.log_softmax(next_logits.float(), dim=-1)  # greedy (evaluation only): untempered log-probs
    return logp_all, logp_all.argmax(-1)


def _completions(prompts: Sequence[Sequence[int]], tok_cols: list, lp_cols: list, live_cols: list, forced_cols: list,
                 versions: list[int], finished: list[bool], interrupted: list[bool]) -> list[Completion]:  # fmt: skip
    """The per-step columns turned into one Completion per prompt, once, at the end."""
    toks = torch.stack(tok_cols, 1).tolist()
    lps = torch.stack(lp_cols, 1).tolist()
    lengths = torch.stack(live_cols, 1).sum(1).tolist()
    forced_m = torch.stack(forced_cols, 1).tolist()
    outs = []
    for i, p in enumerate(prompts):
        L = lengths[i]
        outs.append(
            Completion(
                prompt_tokens=list(p),
                tokens=toks[i][:L],
                logprobs=lps[i][:L],
                versions=versions[:L],
                sampled=[not f for f in forced_m[i][:L]],
                finished=finished[i],
                interrupted=interrupted[i],
            )
        )
    return outs


def encode(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def sample_completions(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 512,
) -> list[str]:
    """One completion per prompt (text, EOS dropped) from the generators' own sampler
    (`sampling.sample_batch`: full softmax at `temperature`, 0 = greedy; left padding)."""
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    eos = tokenizer.eos_token_id
    texts: list[str] = []
    for start in range(0, len(prompts), batch_size):
        chunk = [encode(tokenizer, p) for p in prompts[start : start + batch_size]]
        outs = sample_batch(model, chunk, max_new_tokens=max_new_tokens, eos_id=eos, pad_id=tokenizer.pad_token_id,
                            temperature=temperature, generator=gen)  # fmt: skip
        for c in outs:
            tokens = c.tokens[:-1] if c.finished else c.tokens
            texts.append(tokenizer.decode(tokens, skip_special_tokens=True))
    return texts


def sampled_pass_rate(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Any],
    *,
    k: int,
    max_new_tokens: int,
    seed: int,
    temperature: float = 1.0,
    checker: Callable[[str, str], bool] | None = None,
    batch_size: int = 512,
    score: Callable[[list[str], list[Any]], list[bool]] | None = None,
) -> float:
    """Mean over examples of the fraction of k samples the checker accepts (mean@k); `score`
    (completions, examples) -> passed, when given, replaces the checker (a task mix, code)."""
    from workbench.tasks.base import exact_checker, safe_check

    checker = checker or exact_checker
    prompts = [ex.prompt for ex in examples for _ in range(k)]
    completions = sample_completions(
        model, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, batch_size=batch_size
    )
    answers = [ex for ex in examples for _ in range(k)]
    if score is not None:
        return sum(score(completions, answers)) / max(1, len(prompts))
    hits = sum(safe_check(checker, c, ex.answer, example_id=ex.id) for c, ex in zip(completions, answers))
    return hits / max(1, len(prompts))
