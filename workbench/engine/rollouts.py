"""Rollout groups (what generators send) and the padded training batch built from them.

A `Group` is one prompt's G completions with their rewards; a chunk of groups is what one
generator call returns. `build_batch` turns the groups of one optimizer step into right-padded
tensors: the trainer's loss mask covers completion tokens the policy sampled (tokens forced by
length control are left out), `gen_logp` holds the generator's per-token log-probs and
`versions` the policy version that produced each token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
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


def pack_groups(groups: list[Group]) -> dict:
    """Groups as a few flat numpy arrays: far cheaper to pickle than thousands of small lists."""
    comps = [c for g in groups for c in g.completions]
    cat = lambda xs, dt: np.fromiter((v for x in xs for v in x), dt)  # noqa: E731
    return {
        "group": [(g.prompt_id, g.chunk_id, g.split, len(g.completions)) for g in groups],
        "correct": np.array([v for g in groups for v in g.correct], bool),
        "rewards": np.array([v for g in groups for v in g.rewards], np.float32),
        "p_len": np.array([len(c.prompt_tokens) for c in comps], np.int32),
        "t_len": np.array([len(c.tokens) for c in comps], np.int32),
        "prompt": cat((c.prompt_tokens for c in comps), np.int64),
        "tokens": cat((c.tokens for c in comps), np.int64),
        "logprobs": cat((c.logprobs for c in comps), np.float64),
        "versions": cat((c.versions for c in comps), np.int64),
        "sampled": cat((c.sampled for c in comps), bool),
        "flags": np.array([(c.finished, c.interrupted) for c in comps], bool).reshape(-1, 2),
    }


def unpack_groups(packed: dict) -> list[Group]:
    p_off = np.concatenate([[0], np.cumsum(packed["p_len"])]).tolist()
    t_off = np.concatenate([[0], np.cumsum(packed["t_len"])]).tolist()
    prompt, tokens = packed["prompt"].tolist(), packed["tokens"].tolist()
    logprobs, versions = packed["logprobs"].tolist(), packed["versions"].tolist()
    sampled, flags = packed["sampled"].tolist(), packed["flags"].tolist()
    comps = [
        Completion(
            prompt_tokens=prompt[p_off[i] : p_off[i + 1]],
            tokens=tokens[t_off[i] : t_off[i + 1]],
            logprobs=logprobs[t_off[i] : t_off[i + 1]],
            versions=versions[t_off[i] : t_off[i + 1]],
            sampled=sampled[t_off[i] : t_off[i + 1]],
            finished=flags[i][0],
            interrupted=flags[i][1],
        )
        for i in range(len(packed["p_len"]))
    ]
    correct, rewards = packed["correct"].tolist(), packed["rewards"].tolist()
    groups, at = [], 0
    for prompt_id, chunk_id, split, n in packed["group"]:
        groups.append(Group(prompt_id, chunk_id, comps[at : at + n], correct[at : at + n], rewards[at : at + n], split))
        at += n
    return groups


class _PackedGroups:
    """Pickles its `groups` packed (Ray transfers between generator, coordinator and trainer)."""

    groups: list[Group]

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k != "groups"}
        state["packed"] = pack_groups(self.groups)
        return state

    def __setstate__(self, state: dict) -> None:
        self.groups = unpack_groups(state.pop("packed"))
        self.__dict__.update(state)


@dataclass
class Chunk(_PackedGroups):
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
class StepGroups(_PackedGroups):
    """The groups of one optimizer step, as sent to the trainer."""

    groups: list[Group]


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
    seqs = [c for g in groups for c in g.completions]
    if not seqs:
        raise ValueError("build_batch: no sequences")
    rewards = [r for g in groups for r in g.rewards]
    prompt_index = [gi for gi, g in enumerate(groups) for _ in g.completions]
    n = len(seqs)
    p_len = np.fromiter((len(c.prompt_tokens) for c in seqs), np.int64, n)
    t_len = np.fromiter((len(c.tokens) for c in seqs), np.int64, n)
    width = int((p_len + t_len).max())
    # numpy row assignment from lists is far cheaper than a torch.tensor per row
    ids = np.full((n, width), pad_id, np.int64)
    loss_mask = np.zeros((n, width - 1), np.float32)
    gen_logp = np.zeros((n, width - 1), np.float32)
    versions = np.full((n, width - 1), -1, np.int64)
    for i, c in enumerate(seqs):
        p, t = p_len[i], t_len[i]
        ids[i, : p + t] = c.prompt_tokens + c.tokens
        if t:
            # position p-1 predicts the first completion token
            loss_mask[i, p - 1 : p - 1 + t] = c.sampled
            gen_logp[i, p - 1 : p - 1 + t] = c.logprobs
            versions[i, p - 1 : p - 1 + t] = c.versions
    attn = (np.arange(width)[None, :] < (p_len + t_len)[:, None]).astype(np.int64)
    return TrainBatch(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(attn),
        loss_mask=torch.from_numpy(loss_mask),
        gen_logp=torch.from_numpy(gen_logp),
        versions=torch.from_numpy(versions),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        prompt_index=torch.tensor(prompt_index, dtype=torch.long),
        lengths=torch.from_numpy(t_len),
        truncated=torch.tensor([not c.finished for c in seqs], dtype=torch.bool),
    )
