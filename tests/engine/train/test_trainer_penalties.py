"""The recipe's TIS and KL settings through the Trainer (not only the loss): a trainer step gives the
same loss and gradient as a plain loop over the same batch, with the pre-update log-probs (TIS) or
a copy of the starting model (KL); the KL reference stays frozen and sharded workers give the
one-worker step; the stats name what each correction did."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.engine.train.gloo import run_ranks
from tests.engine.train.helpers import batches
from workbench.engine.batch import PackedGroups
from workbench.engine.model.forward import causal_lm_forward
from workbench.engine.run.actors import trainer_parts
from workbench.engine.train.trainer import Trainer
from workbench.rl.head import token_logprobs
from workbench.rl.losses import policy_loss

# grad_clip off: the gradient compared is the loss's own; micro-batches of 2 rows: several forwards
PLAIN = {"train.grad_clip": 1e9, "train.micro_batch_size": 2, "generation.temperature": 0.8}


def _plain_loop(model, rows, cfg, ref_model=None):
    """The reference computation: whole-batch fp32 logits, the recipe's loss, backward."""
    logits, _ = causal_lm_forward(model, rows.input_ids, rows.attention_mask, fp32_head=True)
    logp = token_logprobs(logits[:, :-1], rows.input_ids[:, 1:], temperature=0.8)
    extra = {}
    if cfg.recipe.loss.tis_cap is not None:
        extra["old_logp"] = logp.detach()
    if ref_model is not None:
        with torch.no_grad():
            ref_logits, _ = causal_lm_forward(ref_model, rows.input_ids, rows.attention_mask, fp32_head=True)
        extra["ref_logp"] = token_logprobs(ref_logits[:, :-1], rows.input_ids[:, 1:], temperature=0.8)
    loss, stats = policy_loss(cfg.recipe.loss, logp, rows.gen_logp, rows.advantages, rows.loss_mask, rows.weights, **extra)
    loss.backward()
    return float(loss.detach()), stats


def _step_against_plain_loop(cfg, *, skew_gen: bool, with_ref: bool):
    groups = batches(cfg, 1)[0]
    if skew_gen:  # a generator/trainer mismatch, so TIS weights differ from 1 and some are capped
        for g in groups:
            for i, c in enumerate(g.completions):
                c.logprobs = [lp - (0.8 if (i + j) % 2 else -0.3) for j, lp in enumerate(c.logprobs)]
    tr = Trainer(**trainer_parts(cfg))
    tr.share_prompts = False  # the plain loop runs every row whole
    start = copy.deepcopy(tr.model)
    _, rows, reason = tr.prepare(PackedGroups.from_groups(groups))
    assert rows is not None, reason
    stats = tr.train_step(groups, 0)[0].stats
    loss, plain_stats = _plain_loop(start, rows, cfg, ref_model=copy.deepcopy(start) if with_ref else None)
    assert stats["train/loss"] == pytest.approx(loss, abs=1e-5)
    got = dict(tr.model.named_parameters())
    for name, p in start.named_parameters():
        torch.testing.assert_close(got[name].grad, p.grad, atol=1e-5, rtol=0, msg=name)
    return stats, plain_stats


def test_a_tis_step_gives_the_plain_loops_gradient_and_logs_its_weights(tiny_config):
    cfg = tiny_config({**PLAIN, "recipe.loss.tis_cap": 1.5}, for_actors=True)
    stats, plain = _step_against_plain_loop(cfg, skew_gen=True, with_ref=False)
    assert 0.0 < stats["train/tis_clip_fraction"] < 1.0  # the cap engaged on some tokens, not all
    assert stats["train/tis_weight_mean"] == pytest.approx(plain["tis_weight_mean"], abs=1e-5)
    assert stats["train/tis_weight_mean"] <= 1.5
    assert stats["train/ratio_mean"] == pytest.approx(1.0, abs=1e-6)  # against the pre-update policy


def test_tis_changes_the_step_where_generator_and_trainer_disagree(tiny_config):
    # the twin of the test above: the same skewed batch without TIS takes another gradient
    with_tis = tiny_config({**PLAIN, "recipe.loss.tis_cap": 1.5}, name="tis", for_actors=True)
    without = tiny_config(PLAIN, name="plain", for_actors=True)
    norms = [_step_against_plain_loop(c, skew_gen=True, with_ref=False)[0]["train/grad_norm"] for c in (with_tis, without)]
    assert norms[0] != pytest.approx(norms[1], rel=1e-3)


def test_a_kl_step_gives_the_plain_loops_gradient_with_the_starting_model_as_reference(tiny_config):
    cfg = tiny_config({**PLAIN, "recipe.loss.kl_coef": 0.5, "train.lr": 1e-2}, for_actors=True)
    stats, _ = _step_against_plain_loop(cfg, skew_gen=False, with_ref=True)
    assert stats["train/kl_mean"] == pytest.approx(0.0, abs=1e-6)  # step 0: the policy is the reference
    # later steps: the policy moved, the reference did not
    tr = Trainer(**trainer_parts(cfg))
    ref_before = {k: v.clone() for k, v in tr.reference.forward.state_dict().items()}
    kls = [tr.train_step(groups, i)[0].stats["train/kl_mean"] for i, groups in enumerate(batches(cfg, 3))]
    assert kls[0] == pytest.approx(0.0, abs=1e-6) and kls[-1] > 1e-6
    for k, v in tr.reference.forward.state_dict().items():
        torch.testing.assert_close(v, ref_before[k], atol=0, rtol=0, msg=k)
    assert not any(p.requires_grad for p in tr.reference.forward.parameters())


def test_the_kl_penalty_keeps_the_policy_closer_to_its_start(tiny_config):
    def drift(kl_coef: float) -> float:
        cfg = tiny_config({"train.lr": 3e-3, "train.grad_clip": 1e9, "recipe.loss.kl_coef": kl_coef},
                          name=f"kl{kl_coef}", for_actors=True)  # fmt: skip
        tr = Trainer(**trainer_parts(cfg))
        start = {k: v.detach().clone() for k, v in tr.model.named_parameters()}
        for i, groups in enumerate(batches(cfg, 6)):
            tr.train_step(groups, i)
        return sum(float((p.detach() - start[k]).pow(2).sum()) for k, p in tr.model.named_parameters()) ** 0.5

    assert drift(5.0) < 0.9 * drift(0.0)


def test_the_reference_runs_in_the_compute_dtype(tiny_config):
    cfg = tiny_config({"model.dtype": "bfloat16", "recipe.loss.kl_coef": 0.1}, for_actors=True)
    tr = Trainer(**trainer_parts(cfg))
    assert {p.dtype for p in tr.reference.forward.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in tr.model.parameters()} == {torch.float32}  # the masters stay fp32
    result, weights = tr.train_step(batches(cfg, 1)[0], 0)
    stats = result.stats
    assert weights is not None and stats["train/kl_mean"] >= 0.0


def _kl_two_workers(rank, world, ranks, cfg, steps):
    tr = ranks.trainer(cfg)
    out = [tr.train_step(s, i)[0].stats for i, s in enumerate(steps)]
    return [(o["train/loss"], o["train/kl_mean"]) for o in out]


def test_sharded_workers_give_the_one_worker_kl_steps(tiny_config):
    cfg = tiny_config({"recipe.loss.kl_coef": 0.5, "train.lr": 1e-3, "train.adam_eps": 1e-8}, for_actors=True)
    steps = batches(cfg, 3)
    one = Trainer(**trainer_parts(cfg))
    one.share_prompts = False  # sharded workers run rows whole
    expect = [(s["train/loss"], s["train/kl_mean"]) for s in (one.train_step(g, i)[0].stats for i, g in enumerate(steps))]
    got = run_ranks(_kl_two_workers, 2, cfg, steps)[0]
    assert expect[-1][1] > 1e-6
    for (loss_a, kl_a), (loss_b, kl_b) in zip(got, expect):
        assert loss_a == pytest.approx(loss_b, rel=1e-5, abs=1e-6)
        assert kl_a == pytest.approx(kl_b, rel=1e-4, abs=1e-7)
