"""The plan against what really happens on this CPU: the trainer's measured peak for three shapes
(states-, activation- and head-dominated) and for LoRA over the states-dominated one (the frozen
base dominates), and the real vLLM engine's own KV-cache size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.engine.plan.memory import ModelShape, Settings, kv_bytes_per_token, trainer_terms

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
# Each shape makes a different term the largest: the fp32 states, the activations, the chunked head.
SHAPES = {
    "states": dict(hidden=512, layers=8, inter=1024, vocab=32000, rows=2, prompt=16, completion=48, micro_tokens=128),
    "activations": dict(hidden=256, layers=4, inter=512, vocab=1000, rows=8, prompt=24, completion=1000, micro_tokens=8192),
    "head": dict(hidden=64, layers=2, inter=128, vocab=151936, rows=2, prompt=48, completion=2000, micro_tokens=4096),
    "lora": dict(hidden=512, layers=8, inter=1024, vocab=32000, rows=2, prompt=16, completion=48, micro_tokens=128,
                 lora_rank=16),
}
LARGEST = {"states": "AdamW states (fp32)", "activations": "activations", "head": "head peak", "lora": "frozen base (fp32)"}


def cpu_settings(a: dict) -> Settings:
    return Settings(compute_bytes=4, fp32_head=True, trainer_workers=1, trainer_gpus=0, generator_gpus=0, num_generators=1,
                    evaluator_gpus=0, backend="torch", tp=1, vllm_util=0.8, enforce_eager=True, max_batch_sequences=1,
                    micro_batch_size=1024, micro_batch_tokens=a["micro_tokens"], gradient_checkpointing=False,
                    prompt_tokens=a["prompt"], max_new_tokens=a["completion"], lora_rank=a.get("lora_rank", 0),
                    lora_targets=("all-linear",))  # fmt: skip


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_trainers_measured_cpu_peak_is_within_25pct_of_the_plan(name, tmp_path):
    a = SHAPES[name]
    args = [x for k, v in a.items() for x in ("--" + k.replace("_", "-"), str(v))]
    proc = subprocess.run([sys.executable, str(HERE / "trainer_peak.py"), str(tmp_path / "m"), *args],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    shape = ModelShape.from_config(json.loads(Path(r["config"]).read_text()))
    terms = trainer_terms(shape, cpu_settings(a), True)
    measured = r["peak"] - r["baseline"]
    assert max(terms, key=lambda k: terms[k] if k != "peak" else 0) == LARGEST[name]
    assert measured == pytest.approx(terms["peak"], rel=0.25), (measured / 1e6, {k: v / 1e6 for k, v in terms.items()})


def test_vllm_cpu_sizes_its_kv_cache_as_the_plan_says(tmp_path, monkeypatch):
    from tests.helpers.tiny_hf import build_tiny_hf, task_texts
    from workbench.config import run_config_from_dict
    from workbench.engine.model.devices import CPU_KV_CACHE_GIB
    from workbench.engine.plan.build import plan_for
    from workbench.engine.plan.memory import Cluster
    from workbench.engine.rollout.vllm import backend as vg
    from workbench.engine.run.actors import generator_parts
    from workbench.tasks.base import load_task

    overrides = {"generation.backend": "vllm", "generation.max_new_tokens": 16, "task.difficulty": 1, "task.num_train": 60,
                 "task.num_val": 20, "eval.num_prompts": 8, "recipe.length_control.type": "none"}  # fmt: skip
    task = load_task(run_config_from_dict({}, overrides).task)
    d = build_tiny_hf(tmp_path / "qwen2", "qwen2", corpus=task_texts(task), hidden=128)
    cfg = run_config_from_dict({}, {**overrides, "model.path": str(d)})
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setattr(vg.VllmGenerator, "enforce_eager", True)
    gen = vg.VllmGenerator(**generator_parts(cfg))
    try:
        cache = gen.llm.llm_engine.vllm_config.cache_config
        vllm_tokens = cache.num_gpu_blocks * cache.block_size
    finally:
        gen.shutdown()
    plan = plan_for(cfg, Cluster(0, 24e9, source="test"), task=task)
    shape, s = plan.shape, plan.settings
    planned_kv = next(r for r in plan.roles if r.name == "generator").terms["KV cache"]
    assert planned_kv == CPU_KV_CACHE_GIB * 2**30
    assert vllm_tokens == pytest.approx(planned_kv / kv_bytes_per_token(shape, s), rel=0.01)
