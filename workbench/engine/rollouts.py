"""Rollout groups (what generators send) and the padded training batch built from them.

A `Group` is one prompt's G completions with their rewards; a chunk of groups is what one
generator call returns. `build_batch` turns the groups of one optimizer step into right-padded
tensors: the trainer's loss mask covers completion tokens the policy sampled (tokens forced by
length control are left out), `gen_logp` holds the generator's per-token log-probs and
`versions` the policy version that produced each token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workbench.engine.sampling import Completion


@dataclass
class Group:
    prompt_id: int
    chunk_id: int
    completions: list[Completion]
    correct: list[bool]
    rewards: list[float]
    split: str = "train"

    @property
    def pass_rate(self) -> float:
        return sum(self.correct) / max(1, len(self.correct))


@dataclass
class Chunk:
    """One generator call's output: groups plus where and how long it took."""

    chunk_id: int
    groups: list[Group]
    generator_rank: int
    gen_seconds: float
    tokens_generated: int
    prompt_tokens: int
    weight_swaps: int = 0
    meta: dict = field(default_factory=dict)


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [N, L] prompt + completion, right-padded
    attention_mask: torch.Tensor  # [N, L]
    loss_mask: torch.Tensor  # [N, L-1] predicts token t+1; 1 on sampled completion tokens
    gen_logp: torch.Tensor  # [N, L-1]
    versions: torch.Tensor  # [N, L-1] (-1 outside completions)
    rewards: torch.Tensor  # [N]
    prompt_index: torch.Tensor  # [N]
    lengths: torch.Tensor  # [N] completion lengths
    truncated: torch.Tensor  # [N] bool: hit the length limit without EOS


def build_batch(groups: list[Group], pad_id: int) -> TrainBatch:
    seqs, rows = [], []
    for gi, g in enumerate(groups):
        for c, r in zip(g.completions, g.rewards):
            seqs.append(c)
            rows.append((gi, r))
    if not seqs:
        raise ValueError("build_batch: no sequences")
    width = max(len(c.prompt_tokens) + len(c.tokens) for c in seqs)
    n = len(seqs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width - 1), dtype=torch.float32)
    gen_logp = torch.zeros((n, width - 1), dtype=torch.float32)
    versions = torch.full((n, width - 1), -1, dtype=torch.long)
    for i, c in enumerate(seqs):
        p, t = len(c.prompt_tokens), len(c.tokens)
        ids[i, : p + t] = torch.tensor(c.prompt_tokens + c.tokens, dtype=torch.long)
        attn[i, : p + t] = 1
        if t:
            # position p-1 predicts the first completion token
            loss_mask[i, p - 1 : p - 1 + t] = torch.tensor(c.sampled, dtype=torch.float32)
            gen_logp[i, p - 1 : p - 1 + t] = torch.tensor(c.logprobs, dtype=torch.float32)
            versions[i, p - 1 : p - 1 + t] = torch.tensor(c.versions, dtype=torch.long)
    return TrainBatch(
        input_ids=ids,
        attention_mask=attn,
        loss_mask=loss_mask,
        gen_logp=gen_logp,
        versions=versions,
        rewards=torch.tensor([r for _, r in rows], dtype=torch.float32),
        prompt_index=torch.tensor([gi for gi, _ in rows], dtype=torch.long),
        lengths=torch.tensor([len(c.tokens) for c in seqs], dtype=torch.long),
        truncated=torch.tensor([not c.finished for c in seqs], dtype=torch.bool),
    )
