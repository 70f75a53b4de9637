"""The trainer's optimizer and schedule from the `train:` section alone (engine/train/optim.py):
AdamW with the section's settings, a linear warm-up then a constant rate."""

from __future__ import annotations

import pytest
import torch

from workbench.config import TrainConfig
from workbench.engine.train.optim import build_optimizer, build_scheduler


def _rates(train: TrainConfig, steps: int) -> list[float]:
    w = torch.nn.Parameter(torch.zeros(3))
    opt = build_optimizer([w], train)
    sched = build_scheduler(opt, train)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        w.grad = torch.ones(3)
        opt.step()
        sched.step()
    return out


def test_the_optimizer_is_adamw_with_the_sections_settings():
    train = TrainConfig(lr=3e-4, adam_betas=[0.8, 0.95], adam_eps=1e-8, weight_decay=0.1)
    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(4))]
    opt = build_optimizer(params, train)
    group = opt.param_groups[0]
    assert isinstance(opt, torch.optim.AdamW) and group["params"] == params
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.8, 0.95), 1e-8, 0.1)


def test_the_rate_warms_up_linearly_then_holds():
    assert _rates(TrainConfig(lr=1.0, warmup_steps=4), 6) == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("warmup", [0, -3])
def test_no_warm_up_starts_at_the_full_rate(warmup):
    assert _rates(TrainConfig(lr=2e-3, warmup_steps=warmup), 3) == pytest.approx([2e-3] * 3)
