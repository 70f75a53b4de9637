"""Real model folders: a tiny random Qwen2 and Llama, each with its own BPE tokenizer, built here.

Load, generate a chunk (chat template, multi-token interruption phrase, EOS != pad for Qwen2),
log-probs that match the trainer's forward, one trainer step, evaluation with the trainer's
weights, and a short run through Ray. Bad input: a folder without a tokenizer, a tokenizer
without EOS, `task.chat_template` without a template: one clear line from the CLI, no Ray.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.helpers.tiny_hf import build_tiny_hf, task_texts
from workbench.config import run_config_from_dict
from workbench.engine.rollout.torch_backend import Evaluator, Generator
from workbench.engine.model.hf_dir import prompt_ids
from workbench.engine.model.load import load_policy
from workbench.engine.batch import build_batch
from workbench.engine.train.trainer import Trainer
from workbench.engine.run.actors import generator_parts, trainer_parts
from workbench.errors import UserError
from workbench.engine.model.forward import causal_lm_forward
from workbench.rl.head import token_logprobs
from workbench.tasks.base import load_task

ARCHS = ("qwen2", "llama")
PHRASE = "Time is up. </think>"
TASK = {"name": "addition", "difficulty": 1, "num_train": 60, "num_val": 20}


@pytest.fixture(scope="module", params=ARCHS)
def model_dir(request, tmp_path_factory) -> tuple[str, Path]:
    task = load_task(run_config_from_dict({}, {f"task.{k}": v for k, v in TASK.items()} | {"eval.num_prompts": 10}).task)
    return request.param, build_tiny_hf(tmp_path_factory.mktemp(request.param), request.param, corpus=task_texts(task))


def make_cfg(path: Path, tmp_path: Path, **overrides):
    base = {
        "name": "hf",
        "out_dir": str(tmp_path / "run"),
        "recipe": {"base": "scalerl", "length_control": {"type": "interrupt", "phrase": PHRASE, "budget_min": 2,
                                                          "budget_max": 4, "answer_budget": 4}},
        "model": {"path": str(path)},
        "task": {**TASK, "chat_template": True},
        "generation": {"max_new_tokens": 32, "max_batch_sequences": 32},
        "train": {"prompts_per_step": 4, "generations_per_prompt": 4, "lr": 1e-3, "warmup_steps": 1, "max_steps": 3,
                  "micro_batch_size": 8},
        "eval": {"every_steps": 2, "num_prompts": 6, "samples_per_prompt": 2},
        "resources": {"generator_cpus": 0.5, "trainer_cpus": 0.5, "evaluator_cpus": 0.5},
        "checkpoint": {"every_steps": 2, "keep": 1},
    }  # fmt: skip
    return run_config_from_dict(base, overrides)


def test_loads_with_its_own_tokenizer_eos_and_pad(model_dir):
    arch, d = model_dir
    model, tok = load_policy(run_config_from_dict({}, {"model.path": str(d)}).model)
    assert type(model).__name__ == {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}[arch]
    assert next(model.parameters()).dtype == torch.float32  # 'auto' on CPU
    if arch == "qwen2":
        assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.eos_token_id != tok.pad_token_id
    else:
        assert tok.eos_token == "</s>" and tok.pad_token_id == tok.eos_token_id  # no pad token: EOS pads
    assert model.config.eos_token_id == tok.eos_token_id and tok.padding_side == "left"


def test_chunk_uses_the_chat_template_forces_the_phrase_and_matches_the_trainer(model_dir, tmp_path):
    arch, d = model_dir
    cfg = make_cfg(d, tmp_path)
    gen, tr = Generator(**generator_parts(cfg)), Trainer(**trainer_parts(cfg))
    ex = gen.task.train[0]
    ids = gen._prompt_ids("train", 0)
    templated = gen.tokenizer.apply_chat_template([{"role": "user", "content": ex.prompt}], add_generation_prompt=True, tokenize=False)
    assert gen.tokenizer.decode(ids) == templated and ex.prompt in templated and ids != prompt_ids(gen.tokenizer, ex.prompt)
    chunk = gen.generate(0, [0, 1, 2, 3], 4, seed=3)
    comps = [c for g in chunk.groups for c in g.completions]
    phrase = gen.tokenizer.encode(PHRASE, add_special_tokens=False)
    assert len(phrase) > 1
    interrupted = [c for c in comps if c.interrupted]
    assert interrupted, "a random model should run past a 2-4 token thinking budget"
    for c in interrupted:
        at = c.sampled.index(False)
        assert 2 <= at <= 4 and c.tokens[at : at + len(phrase)] == phrase and c.sampled[at : at + len(phrase)] == [False] * len(phrase)
    for c in comps:
        assert max(c.tokens) < len(gen.tokenizer) and (not c.finished or c.tokens[-1] == gen.tokenizer.eos_token_id)
    batch = build_batch(chunk.groups, tr.pad_id)
    with torch.no_grad():
        logits, _ = causal_lm_forward(tr.model, batch.input_ids, batch.attention_mask, fp32_head=True)
        logp = token_logprobs(logits[:, :-1], batch.input_ids[:, 1:])
    m = batch.loss_mask > 0  # sampled tokens only; a sampled pad id is a token like any other (masks come from lengths)
    assert int(m.sum()) == sum(sum(c.sampled) for c in comps)
    torch.testing.assert_close(logp[m], batch.gen_logp[m], atol=1e-4, rtol=0)


def test_trainer_step_and_evaluation_with_the_trained_weights(model_dir, tmp_path):
    arch, d = model_dir
    cfg = make_cfg(d, tmp_path)
    gen, tr = Generator(**generator_parts(cfg)), Trainer(**trainer_parts(cfg))
    ev = Evaluator(**generator_parts(cfg, evaluator=True), rank=-1)
    chunk = gen.generate(0, [0, 1, 2, 3], 4, seed=1)
    chunk.groups[0].rewards = [1.0, -1.0, -1.0, -1.0]  # a random model is rarely right: give the step a signal
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    result, weights = tr.train_step(chunk.groups, 0)
    stats = result.stats
    assert weights is not None and stats.get("train/skipped", 0.0) == 0.0 and tr.version == 1
    assert any(not torch.equal(before[k], v) for k, v in tr.model.state_dict().items())
    res = ev.evaluate(weights, 1, num_prompts=6, k=2, seed=0)
    assert res["val/prompts"] == 6 and res["policy/version"] == 1 and 0.0 <= res["val/pass_rate"] <= 1.0
    for k, v in tr.model.state_dict().items():
        torch.testing.assert_close(ev.model.state_dict()[k], v.to(ev.model.state_dict()[k].dtype))


@pytest.mark.slow
def test_short_run_through_ray(model_dir, tmp_path, ray_cluster):
    from workbench.engine import run_to_end

    arch, d = model_dir
    summary = run_to_end(make_cfg(d, tmp_path, name=f"hf-{arch}"), resume=False, timeout=600)
    assert summary["status"] == "finished" and summary["steps"] == 3


# --- bad input: one clear line from `workbench run`, and no Ray started
def run_cli(cfg_path: Path, ray_tmp: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAY_TMPDIR=str(ray_tmp))  # where a Ray started by this run would live
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "workbench.cli", "run", "--config", str(cfg_path)],
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip


def bad_folder(tmp_path: Path, arch: str, **kw) -> Path:
    task = load_task(run_config_from_dict({}, {f"task.{k}": v for k, v in TASK.items()} | {"eval.num_prompts": 10}).task)
    return build_tiny_hf(tmp_path / "model", arch, corpus=task_texts(task), **kw)


@pytest.mark.parametrize(
    "kw,chat,needle",
    [
        ({"tokenizer": False}, False, "has no tokenizer"),
        ({"eos": False}, False, "has no EOS token"),
        ({"chat_template": False}, True, "task.chat_template is true but the tokenizer"),
    ],
    ids=["no-tokenizer", "no-eos", "no-template"],
)
def test_bad_model_folders_stop_with_one_line_and_no_ray(tmp_path, kw, chat, needle):
    d = bad_folder(tmp_path, "llama" if "eos" in kw else "qwen2", **kw)
    with pytest.raises(UserError, match=needle):
        load_policy(run_config_from_dict({}, {"model.path": str(d)}).model, load_task(make_cfg(d, tmp_path, **{"task.chat_template": chat}).task))
    cfg = {"model": {"path": str(d)}, "task": {**TASK, "chat_template": chat}, "eval": {"num_prompts": 10},
           "out_dir": str(tmp_path / "out")}  # fmt: skip
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    ray_tmp = Path(f"/tmp/wbhm{os.getpid()}")
    proc = run_cli(path, ray_tmp)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and needle in proc.stderr and str(d) in proc.stderr, proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1, proc.stderr
    assert not ray_tmp.exists()  # Ray never started, so no Ray process can be left behind


def test_a_tokenizer_that_does_not_belong_to_the_model_is_refused(tmp_path):
    from transformers import AutoTokenizer

    d = bad_folder(tmp_path, "qwen2")
    tok = AutoTokenizer.from_pretrained(d)
    tok.add_tokens([f"<extra{i}>" for i in range(40)])  # ids beyond the model's embedding rows
    tok.save_pretrained(d)
    with pytest.raises(UserError, match=r"has 340 tokens but the model's embedding has 300 rows"):
        load_policy(run_config_from_dict({}, {"model.path": str(d)}).model)


def test_prompts_without_the_chat_template_are_the_plain_text(model_dir):
    _, d = model_dir
    _, tok = load_policy(run_config_from_dict({}, {"model.path": str(d)}).model)
    assert prompt_ids(tok, "12+34=") == tok.encode("12+34=", add_special_tokens=False)
