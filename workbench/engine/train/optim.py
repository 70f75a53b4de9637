"""The trainer's optimizer and learning-rate schedule, from the `train:` section alone.

AdamW with `train.lr`, `adam_betas`, `adam_eps` and `weight_decay`; the schedule warms the rate up
linearly over `train.warmup_steps` optimizer steps, then holds it constant.

    optimizer = build_optimizer(model.parameters(), cfg.train)
    scheduler = build_scheduler(optimizer, cfg.train)   # scheduler.step() after each optimizer.step()
"""

from __future__ import annotations

from typing import Iterable

import torch

from workbench.config import TrainConfig


def build_optimizer(params: Iterable[torch.nn.Parameter], train: TrainConfig) -> torch.optim.AdamW:
    """AdamW over `params` with the run's learning rate, betas, eps and weight decay."""
    return torch.optim.AdamW(
        params, lr=train.lr, betas=tuple(train.adam_betas), eps=train.adam_eps, weight_decay=train.weight_decay
    )


def build_scheduler(optimizer: torch.optim.Optimizer, train: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over `train.warmup_steps` steps (0: none), then a constant rate."""
    warmup = max(0, train.warmup_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
