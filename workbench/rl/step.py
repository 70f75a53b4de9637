"""One RL step's preparation, as a pure function: from a step's rollouts to the rows trained on
and their weights. Every filter of the step is here. No devices, no Ray, no optimizer: the
trainer (engine/train/trainer.py) calls it, moves the rows to its device and runs
forward/backward over them.

    stats, rows, why = prepare_step(batch, version, recipe, max_new_tokens)
    if rows is None: skip the step (why says which filter emptied it)

The order: groups beyond the staleness bound dropped (PipelineRL's k: a group whose oldest token
is more than `recipe.off_policy.k` versions behind the trainer) -> the recipe's penalties on the
rewards (rl/shaping.step_rewards: the overlong penalty when length control is "penalty") ->
zero-variance filtering (groups whose rewards are all equal carry no signal) -> advantages (group
baseline, batch- or prompt-level normalisation) -> per-token aggregation weights over the WHOLE
step (so micro-batch gradients add up to the full-batch gradient). `batch` is any object with
the tensors of `RolloutBatch` (engine/batch.py's TrainBatch).

What each sequence of the batch was trained with (`TrainedValues`: trained or left out, its
advantage and its share of the loss) rides on the rows (`StepRows.trained`), a few floats a
sequence, so the kept samples (runs/samples.py) show the trainer's own values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol

import numpy as np
import torch

from workbench.rl.advantages import group_advantages, zero_variance_keep
from workbench.rl.aggregation import aggregation_weights
from workbench.rl.recipe import RecipeConfig
from workbench.rl.shaping import step_rewards


class RolloutBatch(Protocol):
    """One step's sequences, right-padded (engine/batch.build_batch makes one)."""

    input_ids: torch.Tensor  # [N, L] prompt + completion
    attention_mask: torch.Tensor  # [N, L]
    loss_mask: torch.Tensor  # [N, L-1] 1 on sampled completion tokens (position t predicts t+1)
    gen_logp: torch.Tensor  # [N, L-1] the generator's log-probs of those tokens
    versions: torch.Tensor  # [N, L-1] the policy version that sampled each token
    rewards: torch.Tensor  # [N]
    prompt_index: torch.Tensor  # [N] the group (prompt) of each sequence
    lengths: torch.Tensor  # [N] completion lengths


@dataclass
class TrainedValues:
    """What each sequence of a step's batch (in its packed order) was trained with: `trained` (in
    the rows the update was computed over: not dropped as stale nor by the zero-variance filter,
    and the update applied), its `advantage` (after the recipe's penalties and the filters; NaN
    where not trained) and `loss_weight` (its tokens' aggregation weights summed: its share of the
    step's loss, the trained ones summing to 1; 0 where not trained). Host numpy arrays [N]."""

    trained: np.ndarray  # bool
    advantage: np.ndarray  # float32
    loss_weight: np.ndarray  # float32

    @classmethod
    def none(cls, n: int) -> "TrainedValues":
        """`n` sequences, none trained (a skipped step)."""
        return cls(np.zeros(n, bool), np.full(n, np.nan, np.float32), np.zeros(n, np.float32))

    @classmethod
    def of_rows(cls, n: int, index: torch.Tensor, advantages: torch.Tensor, weights: torch.Tensor) -> "TrainedValues":
        """`n` sequences, those at `index` trained with `advantages` [R] and token `weights` [R, T]."""
        out = cls.none(n)
        at = index.cpu().numpy()
        out.trained[at] = True
        out.advantage[at] = advantages.detach().float().cpu().numpy()
        out.loss_weight[at] = weights.detach().float().sum(1).cpu().numpy()
        return out

    def __len__(self) -> int:
        return len(self.trained)


@dataclass
class StepRows:
    """What one optimizer step trains on, weighted against the WHOLE batch (every rank holds it all)."""

    input_ids: torch.Tensor  # [N, L]
    attention_mask: torch.Tensor  # [N, L]
    loss_mask: torch.Tensor  # [N, L-1]
    gen_logp: torch.Tensor  # [N, L-1]
    advantages: torch.Tensor  # [N]
    weights: torch.Tensor  # [N, L-1] aggregation weights over the whole batch
    num_tokens: int = 0  # prompt + completion tokens of the rows (counted on the host)
    lengths: list[int] = field(default_factory=list)  # each row's prompt + completion (host)
    prompt_lengths: list[int] = field(default_factory=list)  # each row's prompt (host)
    groups: list[int] = field(default_factory=list)  # each row's prompt group, 0..G-1 (host)
    versions: Optional[torch.Tensor] = None  # [N, L-1] the version that sampled each token (rl/mismatch.py)
    trained: Optional[TrainedValues] = None  # per sequence of the WHOLE batch (host): what the samples show

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])


def fresh_groups(batch: RolloutBatch, version: int, k: int) -> torch.Tensor:
    """bool [N]: each sequence's group is within `k` policy versions of `version` (its oldest
    token counts; a group without tokens is fresh)."""
    big = torch.iinfo(torch.int64).max
    group = batch.prompt_index
    token_versions = torch.where(batch.versions >= 0, batch.versions, big)  # -1: no completion token there
    oldest = token_versions.amin(1) if token_versions.shape[1] else torch.full(group.shape, big)
    n_groups = int(group.max()) + 1 if group.numel() else 0
    group_oldest = torch.full((n_groups,), big, dtype=torch.int64).scatter_reduce(0, group, oldest, "amin")
    return (version - torch.where(group_oldest == big, version, group_oldest) <= k)[group]


def prepare_step(
    batch: RolloutBatch, version: int, recipe: RecipeConfig, max_new_tokens: int
) -> tuple[dict[str, float], Optional[StepRows], str]:
    """(stats, the rows to train on or None, the reason when None) for a trainer at `version`.

    Stats: the groups dropped as stale, the share of sequences zero-variance filtering removed,
    and the staleness (trainer version minus the version that sampled each token trained on),
    mean and max."""
    fresh = fresh_groups(batch, version, recipe.off_policy.k)
    stats: dict[str, float] = {"train/dropped_stale_groups": float(torch.unique(batch.prompt_index[~fresh]).numel())}
    if not bool(fresh.any()):
        return stats, None, "no groups within the staleness bound"
    rewards = step_rewards(batch.rewards, batch.lengths, recipe, max_new_tokens)
    keep = zero_variance_keep(rewards, batch.prompt_index) if recipe.zero_variance_filter else torch.ones_like(fresh)
    keep_fresh = keep[fresh]
    stats["train/zero_variance_frac"] = float(1.0 - keep_fresh.float().mean())
    stale = (version - batch.versions[fresh])[batch.loss_mask[fresh] > 0].float()
    stats["train/staleness_mean"] = float(stale.mean()) if stale.numel() else 0.0
    stats["train/staleness_max"] = float(stale.max()) if stale.numel() else 0.0
    if not bool(keep_fresh.any()):
        return stats, None, "every group had zero reward variance"
    idx = (keep & fresh).nonzero().squeeze(-1)
    prompt_index = torch.unique(batch.prompt_index[idx], return_inverse=True)[1]
    mask = batch.loss_mask[idx]
    if float(mask.sum()) == 0:
        return stats, None, "no sampled tokens to train on"
    attn = batch.attention_mask[idx]
    lengths = attn.sum(1)  # prompt + completion per row
    advantages = group_advantages(rewards[idx], prompt_index, recipe.advantage_norm)
    weights = aggregation_weights(mask, prompt_index, recipe.aggregation)
    rows = StepRows(
        input_ids=batch.input_ids[idx],
        attention_mask=attn,
        loss_mask=mask,
        gen_logp=batch.gen_logp[idx],
        advantages=advantages,
        weights=weights,
        num_tokens=int(attn.sum()),
        lengths=lengths.tolist(),
        prompt_lengths=(lengths - batch.lengths[idx]).tolist(),
        groups=prompt_index.tolist(),
        versions=batch.versions[idx],
        trained=TrainedValues.of_rows(int(batch.rewards.shape[0]), idx, advantages, weights),
    )
    return stats, rows, ""


