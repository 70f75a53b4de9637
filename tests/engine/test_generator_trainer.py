"""Generator and Trainer workers in-process (no Ray): log-prob agreement, in-flight pickup, skips."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from workbench.engine.rollout.torch_backend import Evaluator, Generator
from workbench.engine.batch import build_batch
from workbench.engine.train.trainer import StepResult, Trainer
from workbench.engine.run.actors import generator_parts, trainer_parts
from workbench.engine.model.forward import causal_lm_forward
from workbench.rl.head import token_logprobs


@pytest.fixture
def cfg(tiny_config):
    return tiny_config(for_actors=True)


def test_generator_logprobs_match_trainer_forward(cfg):
    gen, tr = Generator(**generator_parts(cfg)), Trainer(**trainer_parts(cfg))
    chunk = gen.generate(0, [0, 1, 2], 4, seed=3)
    assert [len(g.completions) for g in chunk.groups] == [4, 4, 4]
    assert all(r in (1.0, -1.0) for g in chunk.groups for r in g.rewards)
    batch = build_batch(chunk.groups, tr.pad_id)
    with torch.no_grad():
        logits, _ = causal_lm_forward(tr.model, batch.input_ids, batch.attention_mask, fp32_head=True)
        logp = token_logprobs(logits[:, :-1], batch.input_ids[:, 1:])
    m = batch.loss_mask > 0
    assert int(m.sum()) == sum(len(c.tokens) for g in chunk.groups for c in g.completions)
    torch.testing.assert_close(logp[m], batch.gen_logp[m], atol=1e-5, rtol=0)


def test_pending_weights_are_picked_up_between_decode_steps(cfg):
    gen, tr = Generator(**generator_parts(cfg)), Trainer(**trainer_parts(cfg))
    new = {k: v + 0.01 for k, v in tr.get_weights().tensors().items()}
    original = gen._apply_pending
    steps = {"n": 0}

    def apply_with_push() -> int:
        steps["n"] += 1
        if steps["n"] == 3:  # calls 1-2 come before decoding; push during the sequence
            t = threading.Thread(target=gen.set_weights, args=(new, 7))
            t.start()
            t.join()
        return original()

    gen._apply_pending = apply_with_push
    chunk = gen.generate(0, [0, 1], 4, seed=0)
    versions = [c.versions for g in chunk.groups for c in g.completions if len(c.versions) > 1]
    assert versions, "no sequence was long enough to see the swap"
    assert all(v[0] == 0 and v[-1] == 7 for v in versions)
    assert gen.version == 7 and chunk.weight_swaps == 1


def test_trainer_skips_when_every_group_has_zero_variance(cfg):
    gen, tr = Generator(**generator_parts(cfg)), Trainer(**trainer_parts(cfg))
    chunk = gen.generate(0, [0, 1], 4, seed=0)
    for g in chunk.groups:
        g.rewards = [-1.0] * len(g.rewards)
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    result, weights = tr.train_step(chunk.groups, 0)
    stats = result.stats
    assert weights is None and stats["train/skipped"] == 1.0 and tr.version == 0
    assert all(torch.equal(before[k], v) for k, v in tr.model.state_dict().items())


def test_trainer_skips_a_nonfinite_update_and_counts_it(cfg):
    gen, tr = Generator(**generator_parts(cfg)), Trainer(**trainer_parts(cfg))
    chunk = gen.generate(0, [0, 1, 2, 3], 4, seed=1)
    chunk.groups[0].rewards = [1.0, -1.0, -1.0, -1.0]
    chunk.groups[0].completions[0].logprobs[0] = -math.inf  # rho = inf -> weight capped, loss stays finite
    with torch.no_grad():
        tr.model.lm_head.weight[0, 0] = float("nan")
    result, weights = tr.train_step(chunk.groups, 0)
    stats = result.stats
    assert weights is None and stats["train/nonfinite"] == 1.0 and stats["train/nonfinite_in_a_row"] == 1.0


def test_trainer_checkpoint_round_trip(cfg, tmp_path):
    gen, tr = Generator(**generator_parts(cfg)), Trainer(**trainer_parts(cfg))
    chunk = gen.generate(0, [0, 1, 2, 3], 4, seed=2)
    chunk.groups[0].rewards = [1.0, -1.0, -1.0, -1.0]
    tr.train_step(chunk.groups, 0)
    tr.save(str(tmp_path / "ck"))
    tr2 = Trainer(**trainer_parts(cfg))
    assert tr2.load(str(tmp_path / "ck")) == tr.version == 1
    for (k, a), (_, b) in zip(tr.model.state_dict().items(), tr2.model.state_dict().items()):
        assert torch.equal(a, b), k
    assert tr2.optimizer.state_dict()["state"].keys() == tr.optimizer.state_dict()["state"].keys()


def test_evaluator_reports_mean_pass_rate_over_samples(cfg):
    ev = Evaluator(**generator_parts(cfg, evaluator=True), rank=-1)
    res = ev.evaluate(None, 0, num_prompts=10, k=2, seed=0)
    assert res["val/prompts"] == 10 and res["val/samples_per_prompt"] == 2
    assert 0.0 <= res["val/pass_rate"] <= res["val/pass_at_k"] <= 1.0


def test_validate_with_task_reaches_the_evaluator(tiny_config, monkeypatch):
    """reward.validate_with: task: a pass function that passes everything decides training, the
    task's checker decides val/pass_rate (the run's parts carry it to the evaluator)."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "helpers"))
    fns = [{"fn": "trl_rewards:always_one", "pass": True}]
    fooled = tiny_config({"reward.functions": fns}, name="fooled", for_actors=True)
    honest = tiny_config({"reward.functions": fns, "reward.validate_with": "task"}, name="honest", for_actors=True)
    by_fn = Evaluator(**generator_parts(fooled, evaluator=True), rank=-1).evaluate(None, 0, num_prompts=10, k=2, seed=0)
    by_task = Evaluator(**generator_parts(honest, evaluator=True), rank=-1).evaluate(None, 0, num_prompts=10, k=2, seed=0)
    assert by_fn["val/pass_rate"] == 1.0
    assert by_task["val/pass_rate"] < 1.0  # the warm start's sampled pass rate (about the SFT target)


def test_run_stops_after_too_many_nonfinite_updates_in_a_row(cfg):
    from workbench.config import run_config_from_dict
    from workbench.configtools import to_dict
    from workbench.engine.run.coordinator import RunCoordinator, RunFailed
    from workbench.engine.run.weight_sync import WeightSync

    cfg = run_config_from_dict(to_dict(cfg), {"train.max_nonfinite_in_a_row": 2})
    coord = RunCoordinator(cfg, resume=False)

    class NoWorkers:  # _finish_step only needs the version bookkeeping (no generators to push to)
        sync = WeightSync([], "pipeline")
        num_generators = 1

    coord.clock = type("C", (), {"tick": lambda self: None})()
    def skipped(in_a_row: float) -> StepResult:  # as the trainer reports a skip
        stats = {"train/skipped": 1.0, "train/nonfinite": 1.0, "train/nonfinite_in_a_row": in_a_row}
        return StepResult(version=0, stats=stats, skipped="non-finite loss or gradient")

    coord._finish_step(NoWorkers(), skipped(1.0), None, {"gen": {"gen_seconds": 0, "swaps": 0}}, False)
    assert coord.step == 1 and coord.log.rows[-1]["train/nonfinite"] == 1.0  # logged, run goes on
    with pytest.raises(RunFailed, match="2 non-finite losses in a row"):
        coord._finish_step(NoWorkers(), skipped(2.0), None, {"gen": {"gen_seconds": 0, "swaps": 0}}, False)
