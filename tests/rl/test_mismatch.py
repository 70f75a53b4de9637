"""The training/inference mismatch estimator (workbench/rl/mismatch.py) on known distributions."""

from __future__ import annotations

import math

import torch

from workbench.engine.train.micro import add_partial
from workbench.rl.mismatch import mismatch_metrics, mismatch_partial


def _measure(logp, gen, mask, versions, version=3, bound=(0.5, 2.0), cuts=1):
    """The trainer's path: partial sums per micro-batch (rows cut into `cuts` parts), folded, finished."""
    sums: dict[str, float] = {}
    for rows in torch.arange(logp.shape[0]).chunk(cuts):
        add_partial(sums, mismatch_partial(logp[rows], gen[rows], mask[rows], versions[rows], version, bound))
    return mismatch_metrics(sums), sums


def test_identical_logprobs_give_zero_kl_ratio_one_nothing_out():
    logp = torch.log(torch.rand(4, 6).clamp(min=0.05))
    ones = torch.ones(4, 6)
    m, sums = _measure(logp, logp.clone(), ones, torch.full((4, 6), 3))
    assert m["train/mismatch_kl"] == 0.0
    assert m["train/mismatch_ratio_max"] == 1.0
    assert m["train/mismatch_frac"] == 0.0
    assert m["train/mismatch_tokens"] == 24.0
    assert sums == {}  # the partial keys are popped: the trainer's per-token loop never sees them


def test_known_shift_gives_the_analytic_k3_and_the_share_past_the_bound():
    # half the tokens: trainer log-prob higher by log 3 (ratio 3, past hi=2); half: lower by log 1.5
    gen = torch.full((2, 4), -2.0)
    d = torch.tensor([[math.log(3.0)] * 4, [-math.log(1.5)] * 4])
    m, _ = _measure(gen + d, gen, torch.ones(2, 4), torch.full((2, 4), 3), cuts=2)
    k3 = lambda r: r - 1 - math.log(r)  # noqa: E731 - the estimator written out
    assert math.isclose(m["train/mismatch_kl"], (k3(3.0) + k3(1 / 1.5)) / 2, rel_tol=1e-6)
    assert math.isclose(m["train/mismatch_ratio_max"], 3.0, rel_tol=1e-6)
    assert m["train/mismatch_frac"] == 0.5  # ratio 3 is outside [0.5, 2]; ratio 0.667 is inside
    m, _ = _measure(gen + d, gen, torch.ones(2, 4), torch.full((2, 4), 3), bound=(0.8, 4.0))
    assert m["train/mismatch_frac"] == 0.5  # now 0.667 is the one outside


def test_k3_estimates_kl_of_generator_to_trainer_from_generator_samples():
    # two categorical policies; tokens drawn from the generator: mean k3 -> KL(gen || trainer)
    torch.manual_seed(0)
    p_gen, p_tr = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.4, 0.4, 0.2])
    x = torch.multinomial(p_gen, 200_000, replacement=True).view(1, -1)
    m, _ = _measure(p_tr.log()[x], p_gen.log()[x], torch.ones_like(x), torch.full_like(x, 3))
    exact = float((p_gen * (p_gen / p_tr).log()).sum())
    assert abs(m["train/mismatch_kl"] - exact) < 0.05 * exact


def test_only_tokens_of_the_trainers_version_are_measured():
    gen = torch.zeros(1, 6)
    logp = torch.tensor([[0.0, 0.0, 5.0, 5.0, 0.0, 0.0]])  # big gap only on stale / unmasked tokens
    versions = torch.tensor([[3, 3, 2, 2, 3, -1]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    m, _ = _measure(logp, gen, mask, versions)
    assert m["train/mismatch_tokens"] == 3.0
    assert m["train/mismatch_kl"] == 0.0 and m["train/mismatch_ratio_max"] == 1.0
    m, _ = _measure(logp, gen, mask, torch.full((1, 6), 2))
    assert m["train/mismatch_tokens"] == 0.0 and math.isnan(m["train/mismatch_kl"])  # none: null, never 0
