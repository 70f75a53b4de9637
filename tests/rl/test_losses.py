"""policy_loss: hand-computed values for each loss, gradient identities, TIS, KL/entropy, validation."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.errors import UserError
from workbench.rl.head import token_logprobs
from workbench.rl.losses import policy_loss
from workbench.rl.recipe import LossConfig

ONES = torch.ones(1, 3)
W3 = torch.full((1, 3), 1 / 3)


def leaf(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).requires_grad_(True)


def test_cispo_value_gradient_and_stats():
    logp = leaf([[math.log(0.5), math.log(0.2), math.log(0.1)]])
    gen = torch.tensor([[math.log(0.25), math.log(0.2), math.log(0.01)]])  # rho = 2, 1, 10
    loss, stats = policy_loss(LossConfig(type="cispo", eps_max=4.0), logp, gen, torch.tensor([1.5]), ONES, W3)
    capped = torch.tensor([[2.0, 1.0, 4.0]])
    expected = -(1 / 3) * 1.5 * (capped * logp.detach()).sum()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    loss.backward()
    # the capped ratio is a constant weight: grad = -sg(min(rho, eps_max)) * A * w
    assert torch.allclose(logp.grad, -(1 / 3) * 1.5 * capped, atol=1e-6)
    assert stats["clip_fraction"] == pytest.approx(1 / 3)
    assert stats["ratio_mean"] == pytest.approx(13 / 3, rel=1e-5)
    assert stats["ratio_max"] == pytest.approx(10.0, rel=1e-5)
    assert stats["ratio_min"] == pytest.approx(1.0, rel=1e-5)
    assert stats["tokens"] == 3.0
    assert all(isinstance(v, float) for v in stats.values())


def test_cispo_no_gradient_reaches_the_ratio_or_gen_logp():
    logp = leaf([[-1.0, -2.0]])
    gen = torch.tensor([[-1.5, -2.2]], requires_grad=True)
    loss, _ = policy_loss(LossConfig(type="cispo"), logp, gen, torch.tensor([2.0]), torch.ones(1, 2), torch.full((1, 2), 0.5))
    loss.backward()
    rho = torch.exp(logp.detach() - gen.detach())
    # If the ratio carried a gradient, d/dlogp of rho*A*logp would add rho*A*w.
    assert torch.allclose(logp.grad, -rho * 2.0 * 0.5, atol=1e-6)
    assert gen.grad is None


@pytest.mark.parametrize(
    "adv, expected_loss, expected_grad, clip_fraction",
    [
        (1.0, -(1.28 + 1.0 + 0.5) / 3, [0.0, -1 / 3, -0.5 / 3], 1 / 3),  # rho=2 clipped at 1.28
        (-1.0, (2.0 + 1.0 + 0.8) / 3, [2 / 3, 1 / 3, 0.0], 1 / 3),  # rho=0.5 clipped at 0.8
    ],
)
def test_ppo_clip_asymmetric_values(adv, expected_loss, expected_grad, clip_fraction):
    gen = torch.tensor([[-1.0, -1.0, -1.0]])
    logp = leaf((gen + torch.log(torch.tensor([[2.0, 1.0, 0.5]]))).tolist())
    cfg = LossConfig(type="ppo_clip", clip_low=0.2, clip_high=0.28)
    loss, stats = policy_loss(cfg, logp, gen, torch.tensor([adv]), ONES, W3)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-5)
    loss.backward()
    # d(-rho*A)/dlogp = -rho*A on unclipped tokens, 0 where the clip engaged
    assert torch.allclose(logp.grad, torch.tensor([expected_grad]), atol=1e-6)
    assert stats["clip_fraction"] == pytest.approx(clip_fraction)


def test_gspo_sequence_ratio_value_gradient_and_clip():
    gen = torch.zeros(2, 2)
    logp = leaf([[0.002, 0.004], [0.01, 0.02]])  # s = e^0.003 (inside clip), e^0.015 (clipped)
    cfg = LossConfig(type="gspo", gspo_clip_low=3e-3, gspo_clip_high=5e-3)
    w = torch.full((2, 2), 0.25)  # sample-level weights for two sequences of 2 tokens
    loss, stats = policy_loss(cfg, logp, gen, torch.tensor([1.0, 1.0]), torch.ones(2, 2), w)
    s0 = math.exp(0.003)
    assert loss.item() == pytest.approx(0.5 * (-s0) + 0.5 * -(1 + 5e-3), rel=1e-6)
    loss.backward()
    # token gradient flows through the sequence ratio: d s/d logp_t = s / len; the clipped
    # sequence gets none
    assert torch.allclose(logp.grad[0], torch.full((2,), -0.5 * s0 / 2), atol=1e-6)
    assert torch.all(logp.grad[1] == 0)
    assert stats["clip_fraction"] == pytest.approx(0.5)
    assert stats["ratio_max"] == pytest.approx(math.exp(0.015), rel=1e-5)


def test_gspo_ratio_uses_only_valid_tokens():
    gen = torch.zeros(1, 3)
    logp = torch.tensor([[0.001, 0.003, 5.0]])  # the last position is padding
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    _, stats = policy_loss(LossConfig(type="gspo"), logp, gen, torch.tensor([1.0]), mask, mask / 2)
    assert stats["ratio_mean"] == pytest.approx(math.exp(0.002), rel=1e-6)


def _tiny_policy(seed=0):
    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Linear(6, 11)
    with torch.no_grad():
        model.weight.copy_(torch.randn(11, 6, generator=g) * 0.5)
        model.bias.zero_()
    x = torch.randn(3, 5, 6, generator=g)
    tokens = torch.randint(0, 11, (3, 5), generator=g)
    mask = torch.ones(3, 5)
    mask[1, 3:] = 0
    w = mask / mask.sum()
    adv = torch.tensor([1.0, -0.5, 2.0])
    return model, x, tokens, mask, w, adv


def test_cispo_parameter_gradient_equals_weighted_score_function():
    model, x, tokens, mask, w, adv = _tiny_policy()
    logp = token_logprobs(model(x), tokens)
    gen = (logp.detach() + torch.linspace(-2.0, 2.0, 15).reshape(3, 5)).detach()  # rho in [e^-2, e^2]
    loss, stats = policy_loss(LossConfig(type="cispo", eps_max=4.0), logp, gen, adv, mask, w)
    assert 0 < stats["clip_fraction"] < 1
    g_loss = torch.autograd.grad(loss, model.weight)[0]
    c = torch.exp(logp.detach() - gen).clamp(max=4.0)
    logp2 = token_logprobs(model(x), tokens)
    g_ref = torch.autograd.grad(-(c * adv[:, None] * w * logp2).sum(), model.weight)[0]
    assert torch.allclose(g_loss, g_ref, atol=1e-6)


def test_cispo_and_ppo_gradients_coincide_at_ratio_one():
    model, x, tokens, mask, w, adv = _tiny_policy(1)
    grads = []
    for cfg in (LossConfig(type="cispo"), LossConfig(type="ppo_clip"), LossConfig(type="gspo")):
        logp = token_logprobs(model(x), tokens)
        loss, stats = policy_loss(cfg, logp, logp.detach(), adv, mask, w)
        assert stats["clip_fraction"] == 0.0
        grads.append(torch.autograd.grad(loss, model.weight)[0])
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    # GSPO equals them at s = 1 too when the weights are uniform within a sequence
    assert torch.allclose(grads[0], grads[2], atol=1e-6)


def test_tis_weights_ratio_against_old_and_cap():
    old = torch.tensor([[-1.0, -1.0]])
    gen = old - torch.log(torch.tensor([[3.0, 0.5]]))  # exp(old - gen) = 3, 0.5
    logp = leaf([[-1.0, -1.0]])  # = old: policy ratio 1
    w = torch.full((1, 2), 0.5)
    cfg = LossConfig(type="cispo", tis_cap=2.0)
    loss, stats = policy_loss(cfg, logp, gen, torch.tensor([1.0]), torch.ones(1, 2), w, old_logp=old)
    tis = torch.tensor([[2.0, 0.5]])
    assert loss.item() == pytest.approx((-(tis * w) * logp.detach()).sum().item(), rel=1e-6)
    loss.backward()
    assert torch.allclose(logp.grad, -tis * w)
    assert stats["ratio_mean"] == pytest.approx(1.0)  # measured against old_logp, not gen_logp
    assert stats["tis_clip_fraction"] == pytest.approx(0.5)
    assert stats["tis_ratio_mean"] == pytest.approx(1.75, rel=1e-5)
    assert stats["tis_weight_mean"] == pytest.approx(1.25, rel=1e-5)  # (min(3, 2) + 0.5) / 2


def test_tis_needs_old_logp_and_old_logp_needs_tis():
    t = torch.zeros(1, 2)
    with pytest.raises(UserError, match="old_logp"):
        policy_loss(LossConfig(tis_cap=2.0), t, t, torch.ones(1), torch.ones(1, 2), t)
    with pytest.raises(UserError, match="tis_cap"):
        policy_loss(LossConfig(), t, t, torch.ones(1), torch.ones(1, 2), t, old_logp=t)


def test_kl_k3_penalty_value_and_gradient():
    logp = leaf([[-1.0, -2.0]])
    ref = logp.detach() + math.log(2.0)  # k3 = 2 - log 2 - 1 per token
    w = torch.full((1, 2), 0.5)
    cfg = LossConfig(type="cispo", kl_coef=0.1)
    zero_adv = torch.zeros(1)
    loss, stats = policy_loss(cfg, logp, logp.detach(), zero_adv, torch.ones(1, 2), w, ref_logp=ref)
    k3 = 1.0 - math.log(2.0)
    assert stats["kl_mean"] == pytest.approx(k3, rel=1e-5)
    assert loss.item() == pytest.approx(0.1 * k3, rel=1e-5)
    loss.backward()
    # d/dlogp (e^(ref-logp) - (ref-logp) - 1) = 1 - e^(ref-logp) = -1
    assert torch.allclose(logp.grad, torch.full((1, 2), 0.1 * 0.5 * -1.0), atol=1e-6)
    with pytest.raises(UserError, match="ref_logp"):
        policy_loss(cfg, logp, logp.detach(), zero_adv, torch.ones(1, 2), w)


def test_entropy_bonus_lowers_the_loss():
    logp = leaf([[-1.0, -2.0]])
    ent = torch.tensor([[0.7, 0.3]], requires_grad=True)
    w = torch.full((1, 2), 0.5)
    cfg = LossConfig(type="cispo", entropy_coef=0.01)
    loss, stats = policy_loss(cfg, logp, logp.detach(), torch.zeros(1), torch.ones(1, 2), w, entropy=ent)
    assert loss.item() == pytest.approx(-0.01 * 0.5, rel=1e-5)
    assert stats["entropy"] == pytest.approx(0.5)
    loss.backward()
    assert torch.allclose(ent.grad, torch.full((1, 2), -0.01 * 0.5))
    with pytest.raises(UserError, match="entropy"):
        policy_loss(cfg, logp, logp.detach(), torch.zeros(1), torch.ones(1, 2), w)


def test_token_level_advantages_are_accepted():
    logp = leaf([[-1.0, -1.0]])
    adv = torch.tensor([[1.0, -1.0]])
    loss, _ = policy_loss(LossConfig(type="cispo"), logp, logp.detach(), adv, torch.ones(1, 2), torch.full((1, 2), 0.5))
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, 0.5]]))


@pytest.mark.parametrize("name", ["logp", "gen_logp"])
def test_nan_logprobs_raise_naming_the_tensor(name):
    t = {"logp": torch.zeros(2, 3), "gen_logp": torch.zeros(2, 3)}
    t[name][1, 1] = float("nan")
    with pytest.raises(UserError, match=rf"^{name} contains NaN"):
        policy_loss(LossConfig(), t["logp"], t["gen_logp"], torch.ones(2), torch.ones(2, 3), torch.full((2, 3), 1 / 6))


def test_nan_at_masked_positions_is_ignored_and_gradients_stay_finite():
    logp = torch.tensor([[-1.0, float("nan")]], requires_grad=True)
    gen = torch.tensor([[-1.0, float("nan")]])
    mask = torch.tensor([[1.0, 0.0]])
    for typ in ("cispo", "ppo_clip", "gspo"):
        logp.grad = None
        loss, _ = policy_loss(LossConfig(type=typ), logp, gen, torch.ones(1), mask, mask)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
        assert logp.grad[0, 1] == 0


def test_mismatched_shapes_name_both_shapes():
    with pytest.raises(UserError) as e:
        policy_loss(LossConfig(), torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2), torch.ones(2, 3), torch.ones(2, 3))
    assert "logp has shape (2, 3)" in str(e.value) and "gen_logp has shape (2, 4)" in str(e.value)
    with pytest.raises(UserError, match=r"advantages has shape \(3,\)"):
        policy_loss(LossConfig(), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(3), torch.ones(2, 3), torch.ones(2, 3))
    with pytest.raises(UserError, match="weights"):
        policy_loss(LossConfig(), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2), torch.ones(2, 3), torch.ones(3, 2))


def test_empty_micro_batch_gives_zero_loss_that_backpropagates():
    logp = torch.zeros(2, 3, requires_grad=True)
    loss, stats = policy_loss(LossConfig(), logp, torch.zeros(2, 3), torch.ones(2), torch.zeros(2, 3), torch.zeros(2, 3))
    loss.backward()
    assert loss.item() == 0.0 and stats["tokens"] == 0.0
    assert torch.all(logp.grad == 0)


def test_bad_config_values_are_refused():
    t = torch.zeros(1, 2)
    with pytest.raises(UserError, match="loss.type"):
        policy_loss(LossConfig(type="reinforce"), t, t, torch.ones(1), torch.ones(1, 2), t)
    with pytest.raises(UserError, match="eps_max"):
        policy_loss(LossConfig(eps_max=0.0), t, t, torch.ones(1), torch.ones(1, 2), t)
