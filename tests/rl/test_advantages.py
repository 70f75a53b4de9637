"""group_advantages and zero_variance_keep: hand-computed values and validation."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.errors import UserError
from workbench.rl.advantages import group_advantages, zero_variance_keep

R = torch.tensor([1.0, -1.0, -1.0, -1.0, 1.0, 1.0])
P = torch.tensor([0, 0, 0, 0, 1, 1])
CENTRED = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.0, 0.0])


def test_none_is_reward_minus_group_mean():
    assert torch.allclose(group_advantages(R, P, "none"), CENTRED)


def test_prompt_divides_by_the_group_std():
    # group 0: population std of (1, -1, -1, -1) = sqrt(0.75); group 1 has zero variance -> 0
    expected = CENTRED / torch.tensor([math.sqrt(0.75)] * 4 + [1.0, 1.0])
    assert torch.allclose(group_advantages(R, P, "prompt", eps=0.0 + 1e-12), expected, atol=1e-6)


def test_batch_divides_by_the_std_of_all_advantages():
    # mean of CENTRED is 0; population variance = (2.25 + 3 * 0.25) / 6 = 0.5
    expected = CENTRED / math.sqrt(0.5)
    assert torch.allclose(group_advantages(R, P, "batch"), expected, atol=1e-5)


def test_arbitrary_unsorted_prompt_ids():
    r = torch.tensor([3.0, 0.0, 1.0, 2.0])
    p = torch.tensor([42, 5, 42, 5])
    assert torch.allclose(group_advantages(r, p, "none"), torch.tensor([1.0, -1.0, -1.0, 1.0]))


@pytest.mark.parametrize("norm", ["batch", "prompt", "none"])
def test_all_equal_rewards_give_zero_advantages_not_nan(norm):
    adv = group_advantages(torch.ones(4), torch.tensor([0, 0, 1, 1]), norm)
    assert torch.all(adv == 0)


def test_zero_variance_keep_drops_whole_flat_groups():
    keep = zero_variance_keep(R, P)
    assert keep.dtype == torch.bool
    assert keep.tolist() == [True, True, True, True, False, False]
    r = torch.tensor([0.0, 0.0, 0.5, 0.5, 0.0, 1.0])
    assert zero_variance_keep(r, torch.tensor([0, 0, 1, 1, 2, 2])).tolist() == [False, False, False, False, True, True]


def test_groups_of_size_one_are_refused():
    with pytest.raises(UserError, match=r"single generation: \[3\]"):
        group_advantages(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([1, 1, 3]), "batch")
    with pytest.raises(UserError, match=">= 2 generations"):
        zero_variance_keep(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([1, 1, 3]))


def test_validation():
    with pytest.raises(UserError, match="prompt_index"):
        group_advantages(R, P[:4], "batch")
    with pytest.raises(UserError, match="rewards contains NaN"):
        group_advantages(torch.tensor([1.0, float("nan")]), torch.tensor([0, 0]), "batch")
    with pytest.raises(UserError, match="not one of"):
        group_advantages(R, P, "group")
    with pytest.raises(UserError, match="1-D"):
        group_advantages(R.reshape(2, 3), P, "batch")
