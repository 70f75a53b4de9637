"""Rollout groups (what generators send) and the padded training batch built from them.

A `Group` is one prompt's G completions with their rewards; a chunk of groups is what one
generator call returns. `PackedGroups` is the columnar form in which groups travel and are
trained on. `build_batch` turns the groups of one optimizer step into right-padded
tensors: the trainer's loss mask covers completion tokens the policy sampled (tokens forced by
length control are left out), `gen_logp` holds the generator's per-token log-probs and
`versions` the policy version that produced each token.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch

from workbench.engine.model.sampling import Completion


@dataclass
class Group:
    prompt_id: int
    chunk_id: int
    completions: list[Completion]
    correct: list[bool]
    rewards: list[float]
    split: str = "train"
    note: Optional[dict] = None  # texts and verdicts as decoded (runs/samples.group_note): for the kept samples


def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


@dataclass
class PackedGroups:
    """Groups in columnar form: a few flat numpy arrays instead of thousands of small lists.

    This is how rollouts travel (generator -> coordinator -> trainer) and what the trainer builds
    its batch from: pickling numpy arrays costs next to nothing and nothing is rebuilt as Python
    objects on the way. Per group: `prompt_id`, `chunk_id`, `split`, `size` (completions); per
    completion: `correct`, `rewards`, `finished`, `interrupted`, `p_len`, `t_len`; per token (flat,
    completion after completion): `prompt`, `tokens`, `logprobs`, `versions`, `sampled`.
    """

    prompt_id: np.ndarray
    chunk_id: np.ndarray
    split: list[str]
    size: np.ndarray
    correct: np.ndarray
    rewards: np.ndarray
    finished: np.ndarray
    interrupted: np.ndarray
    p_len: np.ndarray
    t_len: np.ndarray
    prompt: np.ndarray
    tokens: np.ndarray
    logprobs: np.ndarray
    versions: np.ndarray
    sampled: np.ndarray

    @classmethod
    def from_groups(cls, groups: list[Group]) -> "PackedGroups":
        comps = [c for g in groups for c in g.completions]
        cat = lambda xs, dt: np.fromiter((v for x in xs for v in x), dt)  # noqa: E731
        return cls(
            prompt_id=np.array([g.prompt_id for g in groups], np.int64),
            chunk_id=np.array([g.chunk_id for g in groups], np.int64),
            split=[g.split for g in groups],
            size=np.array([len(g.completions) for g in groups], np.int64),
            correct=np.array([v for g in groups for v in g.correct], bool),
            rewards=np.array([v for g in groups for v in g.rewards], np.float32),
            finished=np.array([c.finished for c in comps], bool),
            interrupted=np.array([c.interrupted for c in comps], bool),
            p_len=np.array([len(c.prompt_tokens) for c in comps], np.int64),
            t_len=np.array([len(c.tokens) for c in comps], np.int64),
            prompt=cat((c.prompt_tokens for c in comps), np.int64),
            tokens=cat((c.tokens for c in comps), np.int64),
            logprobs=cat((c.logprobs for c in comps), np.float64),
            versions=cat((c.versions for c in comps), np.int64),
            sampled=cat((c.sampled for c in comps), bool),
        )

    def __len__(self) -> int:
        return len(self.prompt_id)

    @property
    def num_sequences(self) -> int:
        return len(self.p_len)

    @property
    def group_of_sequence(self) -> np.ndarray:
        return np.repeat(np.arange(len(self)), self.size)

    def group_results(self):
        """(prompt_id, correct list) per group: what the curriculum sampler records."""
        off = _offsets(self.size)
        correct = self.correct.tolist()
        return [(int(p), correct[off[i] : off[i + 1]]) for i, p in enumerate(self.prompt_id.tolist())]

    def select(self, keep: np.ndarray | slice) -> "PackedGroups":
        """The groups picked by a boolean mask or a slice over groups, in order."""
        if isinstance(keep, slice):
            mask = np.zeros(len(self), bool)
            mask[keep] = True
            keep = mask
        keep = np.asarray(keep, bool)
        seq = np.repeat(keep, self.size)
        tok, prm = np.repeat(seq, self.t_len), np.repeat(seq, self.p_len)
        return PackedGroups(
            prompt_id=self.prompt_id[keep], chunk_id=self.chunk_id[keep],
            split=[s for s, k in zip(self.split, keep.tolist()) if k], size=self.size[keep],
            correct=self.correct[seq], rewards=self.rewards[seq], finished=self.finished[seq],
            interrupted=self.interrupted[seq], p_len=self.p_len[seq], t_len=self.t_len[seq],
            prompt=self.prompt[prm], tokens=self.tokens[tok], logprobs=self.logprobs[tok],
            versions=self.versions[tok], sampled=self.sampled[tok],
        )  # fmt: skip

    @staticmethod
    def concat(parts: list["PackedGroups"]) -> "PackedGroups":
        if not parts:
            return PackedGroups.from_groups([])
        fields = {}
        for name in PackedGroups.__dataclass_fields__:
            vals = [getattr(p, name) for p in parts]
            fields[name] = sum(vals, []) if name == "split" else np.concatenate(vals)
        return PackedGroups(**fields)

    def rollout_stats(self) -> dict[str, float]:
        """What a step's rollouts hold, before any filter: groups, mean reward, pass, truncation and
        interruption rates, mean completion length (`train/...` metrics; NaN rates when empty)."""
        has_seq = self.num_sequences > 0
        return {
            "train/groups": float(len(self)),
            "train/reward_mean": float(self.rewards.mean()) if has_seq else float("nan"),
            "train/pass_rate": float(self.correct.mean()) if has_seq else float("nan"),
            "train/response_len": float(self.t_len.mean()) if has_seq else 0.0,
            "train/truncation_rate": float((~self.finished).mean()) if has_seq else 0.0,
            "train/interruption_rate": float(self.interrupted.mean()) if has_seq else 0.0,
        }

    def min_version_per_group(self, default: int) -> np.ndarray:
        """Oldest policy version among each group's tokens (`default` for groups with none)."""
        big = np.iinfo(np.int64).max
        t_off = _offsets(self.t_len)
        seq_min = np.full(self.num_sequences, big, np.int64)
        has = self.t_len > 0
        if has.any():
            seq_min[has] = np.minimum.reduceat(self.versions, t_off[:-1][has])
        out = np.full(len(self), big, np.int64)
        nonempty = self.size > 0
        if nonempty.any():
            out[nonempty] = np.minimum.reduceat(seq_min, _offsets(self.size)[:-1][nonempty])
        out[out == big] = default
        return out

    def to_groups(self) -> list[Group]:
        p_off, t_off = _offsets(self.p_len).tolist(), _offsets(self.t_len).tolist()
        prompt, tokens = self.prompt.tolist(), self.tokens.tolist()
        logprobs, versions, sampled = self.logprobs.tolist(), self.versions.tolist(), self.sampled.tolist()
        finished, interrupted = self.finished.tolist(), self.interrupted.tolist()
        comps = [
            Completion(
                prompt_tokens=prompt[p_off[i] : p_off[i + 1]],
                tokens=tokens[t_off[i] : t_off[i + 1]],
                logprobs=logprobs[t_off[i] : t_off[i + 1]],
                versions=versions[t_off[i] : t_off[i + 1]],
                sampled=sampled[t_off[i] : t_off[i + 1]],
                finished=finished[i],
                interrupted=interrupted[i],
            )
            for i in range(self.num_sequences)
        ]
        correct, rewards = self.correct.tolist(), self.rewards.tolist()
        groups, at = [], 0
        for pid, cid, split, n in zip(self.prompt_id.tolist(), self.chunk_id.tolist(), self.split, self.size.tolist()):
            groups.append(Group(pid, cid, comps[at : at + n], correct[at : at + n], rewards[at : at + n], split))
            at += n
        return groups


class GroupBuffer:
    """Groups waiting for the trainer, oldest first, kept packed (the coordinator's buffer)."""

    def __init__(self) -> None:
        self._parts: collections.deque[PackedGroups] = collections.deque()
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add(self, groups: PackedGroups) -> None:
        if len(groups):
            self._parts.append(groups)
            self._n += len(groups)

    def take(self, n: int) -> PackedGroups:
        """The oldest `n` groups (fewer if fewer are buffered)."""
        out, need = [], min(n, self._n)
        while need:
            part = self._parts.popleft()
            if len(part) > need:  # split: the rest stays at the front
                self._parts.appendleft(part.select(slice(need, None)))
                part = part.select(slice(0, need))
            out.append(part)
            need -= len(part)
            self._n -= len(part)
        return out[0] if len(out) == 1 else PackedGroups.concat(out)

    def prompt_ids(self) -> list[int]:
        return [int(p) for part in self._parts for p in part.prompt_id]


@dataclass
class Chunk:
    """One generator call's output: groups plus where and how long it took.

    It travels packed: after unpickling, `packed` is the columnar form and the `groups` objects
    are only built if someone asks for them.
    """

    chunk_id: int
    groups: list[Group]
    generator_rank: int
    gen_seconds: float
    tokens_generated: int
    prompt_tokens: int
    weight_swaps: int = 0
    meta: dict = field(default_factory=dict)
    verdicts: dict = field(default_factory=dict)  # verdict -> count over the chunk's checks
    reward_values: dict = field(default_factory=dict)  # reward.functions: name -> rl.reward_functions.ValueStats
    reward_wait: float = 0.0  # seconds between the end of decoding and the last verdict
    dropped_groups: int = 0  # groups left out because a check of theirs hit a sandbox error
    notes: list = field(default_factory=list)  # per group (in `packed` order): its Group.note, for the kept samples
    env: Any = None  # an environment task's episodes: engine/rollout/episodes.EnvStats (env/* metrics); None otherwise

    @property
    def packed(self) -> PackedGroups:
        if "_packed" not in self.__dict__:
            self.__dict__["_packed"] = PackedGroups.from_groups(self.__dict__["groups"])
        return self.__dict__["_packed"]

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k != "groups"}
        state["_packed"] = self.packed
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __getattr__(self, name: str):
        if name == "groups" and "_packed" in self.__dict__:  # unpickled: build the objects on demand
            self.__dict__["groups"] = self.__dict__["_packed"].to_groups()
            return self.__dict__["groups"]
        raise AttributeError(name)


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


def build_batch(groups: list[Group] | PackedGroups, pad_id: int) -> TrainBatch:
    """Right-padded tensors for one step; every scatter is one numpy fancy-index, no row loop."""
    packed = groups if isinstance(groups, PackedGroups) else PackedGroups.from_groups(groups)
    n = packed.num_sequences
    if not n:
        raise ValueError("build_batch: no sequences")
    p_len, t_len = packed.p_len, packed.t_len
    if bool(((p_len == 0) & (t_len > 0)).any()):
        raise ValueError("build_batch: a completion without a prompt has no position to predict its first token")
    total = p_len + t_len
    width = int(total.max())
    ids = np.full((n, width), pad_id, np.int64)
    loss_mask = np.zeros((n, max(width - 1, 0)), np.float32)
    gen_logp = np.zeros_like(loss_mask)
    versions = np.full(loss_mask.shape, -1, np.int64)
    rows_p = np.repeat(np.arange(n), p_len)
    ids[rows_p, np.arange(len(packed.prompt)) - np.repeat(_offsets(p_len)[:-1], p_len)] = packed.prompt
    rows_t = np.repeat(np.arange(n), t_len)
    cols_t = np.arange(len(packed.tokens)) - np.repeat(_offsets(t_len)[:-1] - p_len, t_len)
    ids[rows_t, cols_t] = packed.tokens
    # position t predicts token t+1: the first completion token is predicted at prompt length - 1
    loss_mask[rows_t, cols_t - 1] = packed.sampled
    gen_logp[rows_t, cols_t - 1] = packed.logprobs
    versions[rows_t, cols_t - 1] = packed.versions
    attn = (np.arange(width)[None, :] < total[:, None]).astype(np.int64)
    return TrainBatch(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(attn),
        loss_mask=torch.from_numpy(loss_mask),
        gen_logp=torch.from_numpy(gen_logp),
        versions=torch.from_numpy(versions),
        rewards=torch.from_numpy(packed.rewards.astype(np.float32)),
        prompt_index=torch.from_numpy(packed.group_of_sequence),
        lengths=torch.from_numpy(t_len.copy()),
        truncated=torch.from_numpy(~packed.finished),
    )
