"""prepare_step (rl/step.py), the pure plan of one RL step: which rows are trained on, their advantages
and weights, the skip reasons, the staleness stats, the overlong penalty's place before the
zero-variance filter, and what each sequence of the batch was trained with (the kept samples')."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from workbench.rl.recipe import load_recipe
from workbench.rl.step import prepare_step


def rollouts(rewards: list[float], groups: list[int], lengths: list[int] | None = None, versions: int = 0, width: int = 6):
    """N sequences of `width` tokens: a 2-token prompt, then `lengths[i]` sampled completion tokens."""
    n = len(rewards)
    lengths = lengths or [3] * n
    loss_mask = torch.zeros(n, width - 1)
    attn = torch.zeros(n, width, dtype=torch.long)
    for i, t in enumerate(lengths):
        loss_mask[i, 1 : 1 + t] = 1.0
        attn[i, : 2 + t] = 1
    return SimpleNamespace(
        input_ids=torch.arange(n * width).reshape(n, width), attention_mask=attn, loss_mask=loss_mask,
        gen_logp=torch.full((n, width - 1), -1.0), versions=torch.full((n, width - 1), versions),
        rewards=torch.tensor(rewards), prompt_index=torch.tensor(groups), lengths=torch.tensor(lengths),
    )  # fmt: skip


def test_zero_variance_groups_are_dropped_and_the_rest_get_centred_advantages():
    recipe = load_recipe("scalerl")
    batch = rollouts([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])  # group 1: both right, no signal
    stats, rows, why = prepare_step(batch, version=3, recipe=recipe, max_new_tokens=8)
    assert why == "" and rows.num_rows == 2
    assert stats["train/zero_variance_frac"] == 0.5
    assert rows.input_ids.tolist() == batch.input_ids[:2].tolist()
    assert rows.advantages[0] > 0 > rows.advantages[1]
    assert abs(float(rows.advantages.sum())) < 1e-6
    # the weights cover the whole step's trained tokens: micro-batch gradients add up to the batch's
    assert float(rows.weights[rows.loss_mask == 0].abs().sum()) == 0.0
    assert rows.num_tokens == int(batch.attention_mask[:2].sum()) and rows.lengths == [5, 5]


def test_without_the_filter_every_row_is_kept():
    recipe = dataclasses.replace(load_recipe("scalerl"), zero_variance_filter=False)
    stats, rows, _ = prepare_step(rollouts([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1]), 0, recipe, 8)
    assert rows.num_rows == 4 and stats["train/zero_variance_frac"] == 0.0


def test_a_step_with_no_signal_is_skipped_with_its_reason():
    stats, rows, why = prepare_step(rollouts([1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1]), 0, load_recipe("scalerl"), 8)
    assert rows is None and why == "every group had zero reward variance"
    assert stats["train/zero_variance_frac"] == 1.0


def test_staleness_is_measured_over_the_tokens_trained_on():
    stats, _, _ = prepare_step(rollouts([1.0, 0.0], [0, 0], versions=2), 5, load_recipe("scalerl"), 8)
    assert stats["train/staleness_mean"] == 3.0 and stats["train/staleness_max"] == 3.0


def test_the_overlong_penalty_comes_before_the_filter():
    # Both right, but one ran past l_max: under the penalty the group has signal, the short one wins.
    base = load_recipe("scalerl")
    recipe = dataclasses.replace(base, length_control=dataclasses.replace(base.length_control, type="penalty"))
    batch = rollouts([1.0, 1.0], [0, 0], lengths=[2, 8], width=11)
    _, rows, why = prepare_step(batch, 0, recipe, max_new_tokens=8)
    assert why == "" and rows.num_rows == 2 and rows.advantages[0] > 0 > rows.advantages[1]
    _, none, why = prepare_step(batch, 0, base, max_new_tokens=8)  # interruption, no penalty: no signal
    assert none is None and why == "every group had zero reward variance"


def test_groups_beyond_the_staleness_bound_are_dropped_here_first():
    recipe = load_recipe("scalerl")
    k = recipe.off_policy.k
    batch = rollouts([1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], versions=10)
    batch.versions[2, 1] = 10 - k - 1  # one token of group 1 is one version too old: the whole group goes
    batch.versions[:, 0] = -1  # outside the completions (build_batch's marker) never counts
    stats, rows, why = prepare_step(batch, version=10, recipe=recipe, max_new_tokens=8)
    assert why == "" and stats["train/dropped_stale_groups"] == 1.0
    assert rows.input_ids.tolist() == batch.input_ids[:2].tolist() and rows.groups == [0, 0]
    assert stats["train/staleness_max"] == 0.0  # over the fresh rows only
    _, none, why = prepare_step(batch, version=10 + k + 1, recipe=recipe, max_new_tokens=8)
    assert none is None and why == "no groups within the staleness bound"


def test_each_sequence_carries_what_it_was_trained_with_in_the_batchs_order():
    """`rows.trained`: per sequence of the whole batch, trained or not (stale, zero variance), its
    advantage (the rows' own, after the penalty) and its share of the loss."""
    base = load_recipe("scalerl")
    recipe = dataclasses.replace(base, length_control=dataclasses.replace(base.length_control, type="penalty"))
    k = recipe.off_policy.k
    # group 0: zero variance; group 1: both right, one overlong (the penalty gives it signal);
    # group 2: stale; group 3: one right, one wrong
    batch = rollouts([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1, 2, 2, 3, 3],
                     lengths=[2, 2, 2, 8, 3, 3, 2, 4], versions=10, width=11)  # fmt: skip
    batch.versions[4, 1] = 10 - k - 1
    _, rows, why = prepare_step(batch, 10, recipe, max_new_tokens=8)
    assert why == "" and rows.num_rows == 4
    t = rows.trained
    assert len(t) == 8 and t.trained.tolist() == [False, False, True, True, False, False, True, True]
    assert torch.isnan(torch.from_numpy(t.advantage[~t.trained])).all() and (t.loss_weight[~t.trained] == 0).all()
    assert t.advantage[t.trained].tolist() == rows.advantages.tolist()
    assert t.advantage[2] > 0 > t.advantage[3]  # the overlong one, penalised below its twin
    assert t.loss_weight[t.trained].tolist() == pytest.approx(rows.weights.sum(1).tolist())
    assert float(t.loss_weight.sum()) == pytest.approx(1.0)  # prompt aggregation: each trained group 1/2
    assert t.loss_weight[2] + t.loss_weight[3] == pytest.approx(0.5)
