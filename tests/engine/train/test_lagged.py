"""The mismatch under the sampling version (engine/train/lagged.py): tokens earlier versions sampled
are measured with those versions' kept weights (as many versions back as the pipeline runs ahead),
the forward over them is the one the trainer ran at that version to the bit (fp32 and bf16
autocast), and the rows it costs are bounded."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tests.engine.train.helpers import batches
from workbench.configtools import ConfigError
from workbench.engine.batch import PackedGroups
from workbench.engine.model.devices import Precision
from workbench.engine.run.actors import trainer_parts
from workbench.engine.train.lagged import KeptVersion
from workbench.engine.train.trainer import Trainer
from workbench.rl.mismatch import mismatch_metrics

SKEW = 0.1  # the generator's log-probs, raised by this on every token: k3 = exp(-SKEW) - 1 + SKEW
K3 = math.exp(-SKEW) - 1 + SKEW


def _skewed(groups):
    groups = copy.deepcopy(groups)
    for g in groups:
        for c in g.completions:
            c.logprobs = [lp + SKEW for lp in c.logprobs]
    return groups


def _steps_on_version_0_tokens(cfg, n=2):
    """Steps at versions 0, 1, ... on the same version-0 tokens (each step's stats)."""
    groups = _skewed(batches(cfg, 1)[0])
    tr = Trainer(**trainer_parts(cfg))
    return [tr.train_step(groups, i)[0].stats for i in range(n)]


def test_the_previous_versions_tokens_are_measured_under_its_own_weights(tiny_config):
    first, second = _steps_on_version_0_tokens(tiny_config({"train.lr": 1e-2}, for_actors=True))
    # step 1: the trainer's own version sampled them, measured in the loss's forward
    assert first["train/mismatch_tokens"] > 0
    assert first["train/mismatch_kl"] == pytest.approx(K3, rel=1e-4)
    # step 2: the trainer moved on (lr 1e-2: far), the kept version-0 weights measure the same tokens
    assert second["train/mismatch_tokens"] == first["train/mismatch_tokens"]  # every row (<= 16) measured
    assert second["train/mismatch_kl"] == pytest.approx(first["train/mismatch_kl"], rel=1e-6)
    assert second["train/mismatch_ratio_max"] == pytest.approx(math.exp(-SKEW), rel=1e-5)


def test_without_kept_weights_a_pipelined_step_measures_nothing(tiny_config):
    cfg = tiny_config({"train.lr": 1e-2, "train.mismatch_rows": 0}, for_actors=True)
    first, second = _steps_on_version_0_tokens(cfg)
    assert first["train/mismatch_kl"] == pytest.approx(K3, rel=1e-4)
    assert second["train/mismatch_tokens"] == 0 and math.isnan(second["train/mismatch_kl"])


def test_the_rows_measured_are_bounded_by_mismatch_rows(tiny_config):
    cfg = tiny_config({"train.mismatch_rows": 2}, for_actors=True)
    groups = _skewed(batches(cfg, 1)[0])
    tr = Trainer(**trainer_parts(cfg))
    tr.train_step(groups, 0)
    _, rows, _ = tr.prepare(PackedGroups.from_groups(groups))
    picked = tr.kept.slots[0].rows_to_measure(rows, 2)
    assert len(picked) == 2
    tokens = int(((rows.versions[picked] == 0) & (rows.loss_mask[picked] > 0)).sum())
    second = tr.train_step(groups, 1)[0].stats
    assert second["train/mismatch_tokens"] == tokens < rows.num_rows * 1000  # two rows' tokens, not the batch's
    assert second["train/mismatch_kl"] == pytest.approx(K3, rel=1e-4)


@pytest.mark.parametrize("ahead", [1, 2])
def test_tokens_as_far_back_as_the_pipeline_runs_ahead_are_measured(tiny_config, ahead):
    """generation.max_ahead_steps versions are kept: with 2, a version-0 token is measured at the
    trainer's version 2 too; with 1, only one version back."""
    cfg = tiny_config({"generation.max_ahead_steps": ahead}, for_actors=True)
    assert cfg.kept_versions() == ahead
    stats = _steps_on_version_0_tokens(cfg, n=3)
    assert stats[1]["train/mismatch_tokens"] == stats[0]["train/mismatch_tokens"] > 0
    if ahead == 2:
        assert stats[2]["train/mismatch_tokens"] == stats[0]["train/mismatch_tokens"]
        assert stats[2]["train/mismatch_kl"] == pytest.approx(K3, rel=1e-4)
    else:
        assert stats[2]["train/mismatch_tokens"] == 0


@pytest.mark.parametrize("compute", [torch.float32, torch.bfloat16])
def test_the_kept_forward_is_the_trainers_forward_at_that_version(tiny_config, compute):
    """The buffers are in the dtype the forward reads each parameter in (a Linear's in bf16 under
    autocast, the FP32 head and the norms in fp32), so the kept forward equals the trainer's own."""
    cfg = tiny_config(for_actors=True)
    tr = Trainer(**trainer_parts(cfg))
    groups = batches(cfg, 1)[0]
    _, rows, _ = tr.prepare(PackedGroups.from_groups(groups))
    kept = KeptVersion(tr.policy, Precision(master=torch.float32, compute=compute), fp32_head=True)
    kept.take(0)
    if compute == torch.bfloat16:
        head = tr.model.get_output_embeddings().weight
        assert kept.names[next(n for n, p in tr.policy.named_parameters() if p is head)].dtype == torch.float32
        assert {b.dtype for b in kept.names.values()} == {torch.float32, torch.bfloat16}
    ids, attn, pos = rows.input_ids, rows.attention_mask, rows.loss_mask > 0

    def autocast():
        return torch.autocast("cpu", dtype=compute, enabled=compute != torch.float32)

    with torch.no_grad(), autocast():
        before, _ = tr.policy(ids, attn, pos, 0.8)
    with torch.no_grad():
        for p in tr.policy.parameters():
            p.add_(0.05)  # the trainer moves on
    with torch.no_grad(), autocast():
        after, _ = tr.policy(ids, attn, pos, 0.8)
        from torch.func import functional_call

        again, _ = functional_call(tr.policy, kept.names, (ids, attn, pos, 0.8), strict=False)
    assert not torch.equal(after, before)
    assert torch.equal(again, before)


def test_mismatch_rows_is_refused_before_launch_with_several_trainer_workers(tiny_config):
    with pytest.raises(ConfigError, match="train.mismatch_rows=4 needs one trainer worker"):
        tiny_config({"train.mismatch_rows": 4, "resources.trainer_workers": 2})
    with pytest.raises(ConfigError, match="train.mismatch_rows must be >= 0"):
        tiny_config({"train.mismatch_rows": -1})
    cfg = tiny_config({"resources.trainer_workers": 2})  # null: off with several workers, not refused
    assert cfg.train.lagged_rows(2) == 0 and cfg.train.lagged_rows(1) == 16


def test_an_in_flight_swap_shows_as_mismatch_from_the_kv_cache_the_old_version_wrote(tiny_config):
    """Tokens decoded after an in-flight push reuse the keys and values the older version computed
    for the prefix (PipelineRL's in-flight update), so even in fp32 their log-probs are not the new
    version's: the trainer's full forward under that version sees the gap. Without a swap, fp32
    sides agree to rounding."""
    import threading

    from workbench.engine.rollout.torch_backend import Generator
    from workbench.engine.run.actors import generator_parts

    cfg = tiny_config({"train.lr": 1e-2, "generation.max_new_tokens": 8}, for_actors=True)
    tr = Trainer(**trainer_parts(cfg))
    gen = Generator(**generator_parts(cfg))
    first = gen.generate(0, [0, 1, 2, 3], 4, seed=0).groups
    for g in first:
        g.rewards = [1.0 if i % 2 else -1.0 for i in range(len(g.rewards))]
    _, w1 = tr.train_step(first, 0)  # the trainer holds version 1 and keeps version 0
    plain = gen.generate(2, [8, 9, 10, 11], 4, seed=2).groups  # version 0 throughout, no swap
    original, calls = gen._apply_pending, {"n": 0}

    def push_mid_sequence() -> int:
        calls["n"] += 1
        if calls["n"] == 4:  # calls 1-2 come before decoding: a few tokens in
            threading.Thread(target=gen.set_weights, args=(w1.tensors(), 1)).start()
        return original()

    gen._apply_pending = push_mid_sequence
    swapped = gen.generate(1, [4, 5, 6, 7], 4, seed=1)
    assert swapped.weight_swaps == 1
    for g in swapped.groups + plain:
        g.rewards = [1.0 if i % 2 else -1.0 for i in range(len(g.rewards))]
    rows = tr.prepare(PackedGroups.from_groups(plain))[1]
    control = mismatch_metrics(tr.kept.measure(rows, cfg.generation.temperature, (0.5, 2.0), 16, 64, 16384))
    assert control["train/mismatch_tokens"] > 0 and control["train/mismatch_kl"] < 1e-9  # fp32: rounding only
    measured = tr.train_step(swapped.groups, 1)[0].stats
    assert measured["train/mismatch_tokens"] > 0
    assert measured["train/mismatch_kl"] > 1e-7  # the swapped sequences' later tokens
