"""Group-relative advantages and the zero-variance filter.

Every prompt is sampled G times (a group). The advantage of generation i is its reward minus
its group's mean reward, optionally divided by a standard deviation:

    A_i = r_i - mean(r_j : j in group(i))
    norm="batch":  A_i / (std of ALL A in the batch + eps)     ScaleRL
    norm="prompt": A_i / (std of r in group(i) + eps)           GRPO
    norm="none":   A_i                                          Dr. GRPO

std is the population standard deviation (divide by the count, not count - 1). A group whose
rewards are all equal has A = 0 under every norm (0 / (0 + eps) = 0), never NaN.

    adv = group_advantages(rewards, prompt_index, "batch")
    keep = zero_variance_keep(rewards, prompt_index)   # drop groups that carry no signal

Zero-variance filtering removes whole groups, so the means of the kept groups do not change;
for "batch" normalisation call `group_advantages` on the kept sequences (the batch actually
trained on), otherwise the dropped zeros shrink the std and inflate the advantages.
"""

from __future__ import annotations

from typing import Literal

import torch

from workbench.errors import UserError
from workbench.rl._checks import check_no_nan, check_per_sequence, group_ids

AdvantageNorm = Literal["batch", "prompt", "none"]
NORMS = ("batch", "prompt", "none")


def _groups(rewards: torch.Tensor, prompt_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rewards as float32, dense group id per sequence, group sizes)."""
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 1:
        shape = tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__
        raise UserError(f"rewards: expected a 1-D tensor [N], got {shape}")
    if rewards.numel() == 0:
        raise UserError("rewards: the batch is empty")
    check_per_sequence("prompt_index", prompt_index, rewards.shape[0], "rewards")
    r = rewards.detach().float()
    check_no_nan("rewards", r)
    gid, n_groups = group_ids(prompt_index.to(r.device))
    sizes = torch.bincount(gid, minlength=n_groups)
    if bool((sizes < 2).any()):
        lonely = torch.unique(prompt_index.to(r.device)[(sizes < 2)[gid]]).tolist()
        raise UserError(
            f"group-relative advantages need >= 2 generations per prompt; prompt ids with a single "
            f"generation: {lonely[:10]}{' ...' if len(lonely) > 10 else ''}"
        )
    return r, gid, sizes


def _group_mean(x: torch.Tensor, gid: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    sums = torch.zeros(sizes.numel(), dtype=x.dtype, device=x.device).index_add_(0, gid, x)
    return (sums / sizes.to(x.dtype))[gid]


def group_advantages(
    rewards: torch.Tensor,
    prompt_index: torch.Tensor,
    norm: AdvantageNorm,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Advantages [N] (float32) from rewards [N] and each sequence's prompt id [N]."""
    if norm not in NORMS:
        raise UserError(f"advantage norm {norm!r} is not one of {list(NORMS)}")
    r, gid, sizes = _groups(rewards, prompt_index)
    adv = r - _group_mean(r, gid, sizes)
    if norm == "none":
        return adv
    if norm == "prompt":
        # population std of the group's rewards = sqrt(group mean of the squared advantages)
        std = _group_mean(adv * adv, gid, sizes).sqrt()
        return adv / (std + eps)
    return adv / (adv.std(unbiased=False) + eps)


def zero_variance_keep(rewards: torch.Tensor, prompt_index: torch.Tensor) -> torch.Tensor:
    """Bool [N]: False for every member of a group whose rewards are all equal (no signal)."""
    r, gid, sizes = _groups(rewards, prompt_index)
    n_groups = sizes.numel()
    gmax = torch.full((n_groups,), -torch.inf, device=r.device).scatter_reduce(0, gid, r, "amax")
    gmin = torch.full((n_groups,), torch.inf, device=r.device).scatter_reduce(0, gid, r, "amin")
    return (gmax > gmin)[gid]
