"""aggregation_weights: hand-computed modes, empty rows/groups, and exact micro-batch invariance."""

from __future__ import annotations

import pytest
import torch

from workbench.errors import UserError
from workbench.rl.aggregation import aggregation_weights, micro_batch_slices
from workbench.rl._checks import EmptyBatchError
from workbench.rl.head import token_logprobs
from workbench.rl.losses import policy_loss
from workbench.rl.recipe import LossConfig

# 3 sequences: prompt 7 has two sequences of 2 and 4 tokens, prompt 3 one of 1 token... plus a
# second sequence for prompt 3 of 3 tokens.
MASK = torch.tensor(
    [
        [1, 1, 0, 0],
        [1, 1, 1, 1],
        [1, 0, 0, 0],
        [1, 1, 1, 0],
    ],
    dtype=torch.float32,
)
PIDX = torch.tensor([7, 7, 3, 3])


def test_prompt_mode_hand_computed():
    w = aggregation_weights(MASK, PIDX, "prompt")
    # 2 prompts; prompt 7 has 6 tokens, prompt 3 has 4 tokens
    assert torch.allclose(w[0], torch.tensor([1 / 12, 1 / 12, 0, 0]))
    assert torch.allclose(w[1], torch.full((4,), 1 / 12))
    assert torch.allclose(w[2], torch.tensor([1 / 8, 0, 0, 0]))
    assert torch.allclose(w[3], torch.tensor([1 / 8, 1 / 8, 1 / 8, 0]))


def test_sample_mode_hand_computed():
    w = aggregation_weights(MASK, PIDX, "sample")
    assert torch.allclose(w[0], torch.tensor([1 / 8, 1 / 8, 0, 0]))
    assert torch.allclose(w[1], torch.full((4,), 1 / 16))
    assert torch.allclose(w[2], torch.tensor([1 / 4, 0, 0, 0]))
    assert torch.allclose(w[3], torch.tensor([1 / 12, 1 / 12, 1 / 12, 0]))


def test_token_mode_hand_computed():
    w = aggregation_weights(MASK, PIDX, "token")
    assert torch.allclose(w, MASK / 10)
    assert w.dtype == torch.float32


@pytest.mark.parametrize("mode", ["prompt", "sample", "token"])
def test_weights_sum_to_one_and_empty_rows_or_groups_give_zero_not_nan(mode):
    mask = MASK.clone().bool()
    mask[0] = False  # empty sequence
    mask = torch.cat([mask, torch.zeros(2, 4, dtype=torch.bool)])  # a whole empty group (prompt 9)
    pidx = torch.tensor([7, 7, 3, 3, 9, 9])
    w = aggregation_weights(mask, pidx, mode)
    assert torch.isfinite(w).all()
    assert w.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert torch.all(w[~mask] == 0) and torch.all(w[0] == 0) and torch.all(w[4:] == 0)


def test_empty_batch_raises_empty_batch_error():
    with pytest.raises(EmptyBatchError, match="no valid token"):
        aggregation_weights(torch.zeros(3, 4), torch.tensor([0, 0, 1]), "prompt")
    assert issubclass(EmptyBatchError, UserError)


def test_validation_names_the_problem():
    with pytest.raises(UserError, match="prompt_index"):
        aggregation_weights(MASK, torch.tensor([0, 1]), "prompt")
    with pytest.raises(UserError, match="not one of"):
        aggregation_weights(MASK, PIDX, "group")
    with pytest.raises(UserError, match="0/1"):
        aggregation_weights(MASK * 0.5, PIDX, "token")
    with pytest.raises(UserError, match="integer"):
        aggregation_weights(MASK, PIDX.float(), "prompt")


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    n, t, d, v = 10, 6, 5, 13
    x = torch.randn(n, t, d, generator=g)
    tokens = torch.randint(0, v, (n, t), generator=g)
    lengths = torch.tensor([6, 1, 3, 0, 5, 2, 6, 4, 1, 3])  # one empty sequence
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    pidx = torch.tensor([4, 4, 4, 0, 0, 0, 2, 2, 9, 9])
    adv = torch.randn(n, generator=g)
    noise = torch.randn(n, t, generator=g) * 0.5
    return x, tokens, mask, pidx, adv, noise, d, v


def _grads(model, x, tokens, mask, pidx, adv, noise, cfg, mode, splits, order):
    model.zero_grad()
    w = aggregation_weights(mask, pidx, mode)  # once, on the full optimizer batch
    total = 0.0
    for rows in [splits[i] for i in order]:
        logp = token_logprobs(model(x[rows]), tokens[rows])
        gen = logp.detach() + noise[rows]  # generator log-probs: fixed per token
        loss, _ = policy_loss(cfg, logp, gen, adv[rows], mask[rows], w[rows])
        loss.backward()  # gradient accumulation
        total += loss.item()
    return [p.grad.clone() for p in model.parameters()], total


@pytest.mark.parametrize("mode", ["prompt", "sample", "token"])
@pytest.mark.parametrize("loss_type", ["cispo", "ppo_clip", "gspo"])
def test_micro_batch_gradients_sum_to_the_full_batch_gradient(mode, loss_type):
    x, tokens, mask, pidx, adv, noise, d, v = _batch(0)
    torch.manual_seed(0)
    model = torch.nn.Linear(d, v)
    cfg = LossConfig(type=loss_type, gspo_clip_low=0.2, gspo_clip_high=0.2)
    full, full_loss = _grads(model, x, tokens, mask, pidx, adv, noise, cfg, mode, [slice(0, 10)], [0])
    assert any(g.abs().sum() > 0 for g in full)
    for size in (1, 3, 4, 7):
        splits = micro_batch_slices(10, size)
        for order in (range(len(splits)), reversed(range(len(splits)))):
            grads, total = _grads(model, x, tokens, mask, pidx, adv, noise, cfg, mode, splits, list(order))
            assert total == pytest.approx(full_loss, rel=1e-5, abs=1e-7)
            for g, f in zip(grads, full):
                assert torch.allclose(g, f, atol=1e-6), (size, list(order))


def test_per_micro_batch_normalisation_would_differ():
    # Guard on the test above: a per-micro-batch token mean (the pitfall) gives another gradient.
    x, tokens, mask, pidx, adv, noise, d, v = _batch(1)
    torch.manual_seed(0)
    model = torch.nn.Linear(d, v)
    cfg = LossConfig(type="cispo")
    full, _ = _grads(model, x, tokens, mask, pidx, adv, noise, cfg, "token", [slice(0, 10)], [0])
    model.zero_grad()
    splits = micro_batch_slices(10, 4)
    for rows in splits:
        logp = token_logprobs(model(x[rows]), tokens[rows])
        w_local = aggregation_weights(mask[rows], pidx[rows], "token") / len(splits)
        loss, _ = policy_loss(cfg, logp, logp.detach() + noise[rows], adv[rows], mask[rows], w_local)
        loss.backward()
    assert not torch.allclose(model.weight.grad, full[0], atol=1e-6)


def test_prompt_mode_matches_mean_over_prompts_of_token_means():
    x, tokens, mask, pidx, adv, noise, d, v = _batch(2)
    per_token = torch.randn(mask.shape, generator=torch.Generator().manual_seed(3))
    w = aggregation_weights(mask, pidx, "prompt")
    means = []
    for p in pidx.unique():
        rows = pidx == p
        if mask[rows].sum() > 0:
            means.append((per_token[rows] * mask[rows]).sum() / mask[rows].sum())
    assert (per_token * w).sum().item() == pytest.approx(torch.stack(means).mean().item(), rel=1e-5)


def test_micro_batch_slices_cover_all_rows():
    assert micro_batch_slices(5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    with pytest.raises(UserError):
        micro_batch_slices(5, 0)
