"""The trainer's step at real-size memory rules (CPU, in-process): the head only at the
positions trained on, chunked log-probs and token-budget micro-batches giving the full
computation's loss and gradients, the hand-off (FP32 head, tied weights once), float16 refused,
and resume across worker counts (2 -> 1, 1 -> 2, gloo workers in spawned processes)."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.engine.train.gloo import run_ranks
from tests.engine.train.helpers import batches, head_recorder, next_step, same_step
from workbench.config import run_config_from_dict
from workbench.configtools import ConfigError, to_dict
from workbench.engine.batch import PackedGroups
from workbench.engine.rollout.torch_backend import Generator
from workbench.engine.model import policy as policy_module
from workbench.engine.train.trainer import Trainer
from workbench.engine.run.actors import generator_parts, trainer_parts
from workbench.rl import head as head_module
from workbench.engine.model.forward import causal_lm_forward
from workbench.rl.head import token_entropy, token_logprobs
from workbench.rl.losses import policy_loss


def record_head_calls(monkeypatch) -> list[dict]:
    calls: list[dict] = []
    monkeypatch.setattr(policy_module, "completion_logprobs", head_recorder(calls))
    return calls


def test_the_head_sees_only_the_positions_trained_on(tiny_config, monkeypatch):
    cfg = tiny_config(for_actors=True)
    groups = batches(cfg, 1)[0]
    tr = Trainer(**trainer_parts(cfg))
    _, rows, reason = tr.prepare(PackedGroups.from_groups(groups))
    assert rows is not None, reason
    calls = record_head_calls(monkeypatch)
    stats = tr.train_step(groups, 0)[0].stats
    assert stats["train/skipped"] == 0.0
    trained = int((rows.loss_mask > 0).sum())
    positions = rows.loss_mask.numel()  # every position the old forward projected
    assert sum(c["rows"] for c in calls) == trained  # completion tokens only: no prompt, no padding
    assert 0 < trained < positions / 2


def test_a_chunked_token_budget_step_gives_the_full_computations_loss_and_gradients(tiny_config, monkeypatch):
    # entropy bonus (the entropy's gradient), temperature != 1, 3 rows per head chunk and a
    # token budget that splits the batch into many micro-batches of different widths
    cfg = tiny_config({"recipe.loss.entropy_coef": 0.01, "generation.temperature": 0.7, "train.grad_clip": 1e9,
                       "train.micro_batch_tokens": 16, "train.micro_batch_size": 64}, for_actors=True)  # fmt: skip
    groups = batches(cfg, 1)[0]
    tr = Trainer(**trainer_parts(cfg))
    monkeypatch.setattr(head_module, "HEAD_CHUNK_BYTES", 4 * tr.model.config.vocab_size * 3)
    reference = copy.deepcopy(tr.model)
    _, rows, _ = tr.prepare(PackedGroups.from_groups(groups))
    calls = record_head_calls(monkeypatch)
    stats = tr.train_step(groups, 0)[0].stats
    assert len(calls) >= 4  # micro-batches of 1-2 rows

    # the reference: fp32 logits over every position of the whole batch, one forward
    logits, _ = causal_lm_forward(reference, rows.input_ids, rows.attention_mask, fp32_head=True)
    logits = logits[:, :-1]
    logp = token_logprobs(logits, rows.input_ids[:, 1:], temperature=0.7)
    ent = token_entropy(logits, temperature=0.7)
    loss, _ = policy_loss(cfg.recipe.loss, logp, rows.gen_logp, rows.advantages, rows.loss_mask, rows.weights, entropy=ent)
    loss.backward()
    mask = rows.loss_mask > 0
    assert stats["train/loss"] == pytest.approx(float(loss.detach()), abs=1e-5)
    assert stats["train/entropy"] == pytest.approx(float(ent[mask].mean().detach()), abs=1e-5)
    got = dict(tr.model.named_parameters())
    for name, p in reference.named_parameters():
        torch.testing.assert_close(got[name].grad, p.grad, atol=1e-5, rtol=0, msg=name)


def test_the_hand_off_keeps_the_fp32_head_and_holds_a_tied_head_once(tiny_config):
    cfg = tiny_config({"model.dtype": "bfloat16"}, for_actors=True)
    tr = Trainer(**trainer_parts(cfg))
    flat = tr.get_weights()
    sent = flat.tensors()
    state = tr.model.state_dict()
    head = tr.model.get_output_embeddings().weight
    tied = [k for k, v in state.items() if v.data_ptr() == head.data_ptr()]
    assert len(tied) == 2  # builtin GPT-2: lm_head.weight is the token embedding
    assert {sent[k].dtype for k in tied} == {torch.float32}
    assert sent[tied[0]].data_ptr() == sent[tied[1]].data_ptr()  # one copy in the buffer, two names
    unique = {v.data_ptr(): v for v in state.values()}.values()
    expect = sum(v.numel() * (4 if v.data_ptr() == head.data_ptr() else 2) for v in unique)
    assert expect <= flat.nbytes < expect + 16 * len(state)  # tied bytes once (plus alignment)
    torch.testing.assert_close(sent[tied[0]], head.detach(), atol=0, rtol=0)
    fresh = Generator(**generator_parts(cfg)).model
    fresh.load_state_dict(sent)  # every name is there for a strict load


def test_float16_training_is_refused_in_one_line(tiny_config):
    with pytest.raises(ConfigError, match="float16 is not supported for training") as e:
        run_config_from_dict(to_dict(tiny_config()), {"model.dtype": "float16"})
    assert "\n" not in str(e.value)


def test_a_checkpoint_of_earlier_versions_still_loads_into_one_worker(tiny_config, tmp_path):
    cfg = tiny_config({"train.lr": 1e-3}, for_actors=True)
    steps = batches(cfg, 2)
    tr = Trainer(**trainer_parts(cfg))
    tr.train_step(steps[0], 0)
    (tmp_path / "ck").mkdir()
    torch.save({"model": tr.model.state_dict(), "optimizer": tr.optimizer.state_dict(),
                "scheduler": tr.scheduler.state_dict(), "version": tr.version, "nonfinite_in_a_row": 0,
                "torch_rng": torch.get_rng_state(), "workers": 1}, tmp_path / "ck" / "trainer.pt")  # fmt: skip
    expected = tr.train_step(steps[1], 1)[1].tensors()
    back = Trainer(**trainer_parts(cfg))
    assert back.load(str(tmp_path / "ck")) == 1
    got = back.train_step(steps[1], 1)[1].tensors()
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], atol=0, rtol=0, msg=k)


# -- resume with another worker count (issue 17) --------------------------------------------


def _two_workers(rank, world, ranks, cfg, steps, one_worker_ckpt, two_worker_ckpt):
    """2 workers: train, save, go on (the unchanged run); a fresh group resumed from the
    2-worker checkpoint (2 -> 2) and one resumed from the 1-worker checkpoint (1 -> 2)."""
    tr = ranks.trainer(cfg)
    for i in range(2):
        tr.train_step(steps[i], i)
    tr.save(two_worker_ckpt)
    out = {"continued": next_step(tr, steps[2], 2)}
    for name, ckpt in (("2->2", two_worker_ckpt), ("1->2", one_worker_ckpt)):
        tr = ranks.trainer(cfg)
        assert tr.load(ckpt) == 2
        out[name] = next_step(tr, steps[2], 2)
    return out


def test_resume_with_another_worker_count_gives_the_same_next_step(tiny_config, tmp_path):
    # micro-batch 5: uneven rows per rank; adam_eps 1e-8: see test_group.py
    cfg = tiny_config({"train.micro_batch_size": 5, "train.adam_eps": 1e-8, "train.lr": 1e-3}, for_actors=True)
    steps = batches(cfg, 3)
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    tr = Trainer(**trainer_parts(cfg))
    for i in range(2):
        tr.train_step(steps[i], i)
    tr.save(one)
    fresh = Trainer(**trainer_parts(cfg))
    assert fresh.load(one) == 2
    # sharded workers run every row whole: so do the 1-worker references compared with them (a
    # group's prompt run once is the same function, but Adam's first steps turn its rounding
    # differences into lr-sized ones on near-zero gradient entries)
    fresh.share_prompts = False
    one_to_one = next_step(fresh, steps[2], 2)  # the unchanged resume of the 1-worker run

    ranks = run_ranks(_two_workers, 2, cfg, steps, one, two)
    rank0 = ranks[0]
    assert "weights" not in ranks[1]["continued"]  # rank 1 takes part, rank 0 sends
    same_step(rank0["2->2"], rank0["continued"], atol=1e-6)  # the sharded checkpoint is exact
    same_step(rank0["1->2"], one_to_one, atol=1e-5)  # 1 -> 2 = 1 -> 1

    back = Trainer(**trainer_parts(cfg))
    back.share_prompts = False
    assert back.load(two) == 2
    same_step(next_step(back, steps[2], 2), rank0["2->2"], atol=1e-5)  # 2 -> 1 = 2 -> 2
