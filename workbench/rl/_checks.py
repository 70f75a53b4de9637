"""Input checks shared by the RL functions: each error names the tensor and what is wrong.

Bad input raises `workbench.errors.UserError` (a ValueError). These checks read tensors back
to the host (one sync each), which is negligible next to a forward/backward pass.
"""

from __future__ import annotations

import torch

from workbench.errors import UserError


class EmptyBatchError(UserError):
    """The batch (after masking/filtering) has no token to train on; skip the update."""


def check_2d(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise UserError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise UserError(f"{name}: expected shape [N, T], got {tuple(x.shape)}")


def check_same_shape(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor) -> None:
    if not isinstance(b, torch.Tensor):
        raise UserError(f"{name_b}: expected a torch.Tensor, got {type(b).__name__}")
    if a.shape != b.shape:
        raise UserError(
            f"shape mismatch: {name_a} has shape {tuple(a.shape)} but {name_b} has shape {tuple(b.shape)}"
        )


def check_per_sequence(name: str, x: torch.Tensor, n: int, n_name: str = "the batch") -> None:
    if not isinstance(x, torch.Tensor):
        raise UserError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 1 or x.shape[0] != n:
        raise UserError(f"shape mismatch: {name} has shape {tuple(x.shape)}, expected [{n}] (one per sequence of {n_name})")


def check_no_nan(name: str, x: torch.Tensor, where: torch.Tensor | None = None) -> None:
    """NaN anywhere in `x` (or only where `where` is True) raises, naming the tensor."""
    bad = torch.isnan(x.detach())
    if where is not None:
        bad = bad & where
    if bool(bad.any()):
        n_bad = int(bad.sum())
        scope = " at valid (mask=1) positions" if where is not None else ""
        total = int(where.sum()) if where is not None else x.numel()
        raise UserError(f"{name} contains NaN{scope}: {n_bad} of {total} values")


def as_mask(name: str, mask: torch.Tensor) -> torch.Tensor:
    """A 0/1 float32 mask; any other value is refused (weights go through `weights`, not the mask)."""
    check_2d(name, mask)
    if mask.dtype == torch.bool:
        return mask.to(torch.float32)
    m = mask.detach().to(torch.float32)
    if bool(((m != 0) & (m != 1)).any()):
        raise UserError(f"{name}: expected only 0/1 (or bool) values")
    return m


def group_ids(prompt_index: torch.Tensor, name: str = "prompt_index") -> tuple[torch.Tensor, int]:
    """Dense 0..G-1 group id per sequence from arbitrary integer prompt ids, and G."""
    if prompt_index.dtype.is_floating_point or prompt_index.dtype == torch.bool:
        raise UserError(f"{name}: expected an integer tensor, got {prompt_index.dtype}")
    uniq, inverse = torch.unique(prompt_index, return_inverse=True)
    return inverse, int(uniq.numel())
