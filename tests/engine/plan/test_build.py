"""The plan fed from a RunConfig: the vLLM KV cache the CUDA generator is given, GPT-2 (builtin)
shapes, the assumed GPU layout, and Session.plan() in a notebook."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.config import run_config_from_dict
from workbench.engine.model.devices import vllm_memory_kwargs
from workbench.engine.plan.build import gpu_settings, vllm_kv_cache_bytes
from workbench.engine.plan.memory import CONTEXT_BYTES, CUDA_GRAPHS_BYTES, ModelShape, generator_terms
from workbench.errors import UserError

REPO = Path(__file__).resolve().parents[3]
QWEN15 = REPO / "tests" / "data" / "model_configs" / "qwen2.5-1.5b"


def test_the_cuda_generator_gets_an_explicit_kv_cache_with_the_fp32_head_inside_its_budget():
    cfg = run_config_from_dict({}, {"generation.backend": "vllm", "resources.generator_gpus": 0.5, "resources.trainer_gpus": 0.5,
                                    "generation.vllm_gpu_memory_utilization": 0.4, "generation.max_new_tokens": 1024})
    kv = vllm_kv_cache_bytes(gpu_settings(cfg), QWEN15, 24e9)
    shape = ModelShape.from_config(__import__("json").loads((QWEN15 / "config.json").read_text()))
    head = 4 * 151936 * 1536  # the fp32 copy vLLM's profiler never saw: ~0.93 GB
    fixed = 2 * shape.params + head + CUDA_GRAPHS_BYTES + CONTEXT_BYTES
    assert 0 < kv < 0.4 * 24e9 - fixed  # less the runtime peak too
    assert vllm_kv_cache_bytes(gpu_settings(cfg), QWEN15, 24e9) == kv  # no live measurement: a restarted generator sizes the same cache
    assert vllm_memory_kwargs("cuda", 0.4, kv) == {"gpu_memory_utilization": 0.4, "kv_cache_memory_bytes": kv}
    assert "kv_cache_memory_bytes" in vllm_memory_kwargs("cpu", 0.4, kv)  # the CPU engine's own fixed cache
    with pytest.raises(UserError, match="leaves 0.00 GB for the KV cache, less than one sequence") as e:
        vllm_kv_cache_bytes(gpu_settings(cfg), QWEN15, 8e9)
    assert "\n" not in str(e.value)


def test_gpt2_shapes_count_what_transformers_builds():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    c = {"model_type": "gpt2", "vocab_size": 16, "n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 64,
         "tie_word_embeddings": True}  # the builtin model's config (builtin.build_tiny_model)
    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config(**{k: v for k, v in c.items() if k != "model_type"}))
    assert ModelShape.from_config(c).params == sum(p.numel() for p in model.parameters())
    shape = ModelShape.from_config(c)
    assert "fp32 head copy" not in generator_terms(shape, _settings_fp32(), True)  # an fp32 model needs no copy


def _settings_fp32():
    from workbench.engine.plan.build import settings_from_config
    from workbench.engine.plan.memory import Cluster

    return settings_from_config(run_config_from_dict({}, {}), Cluster(0, 24e9), prompt=8)


def test_a_config_without_gpu_shares_is_planned_on_gpus_with_a_stated_layout():
    from workbench.engine.plan import cluster_shape, plan_for

    cfg = run_config_from_dict({}, {"model.path": str(QWEN15)})
    plan = plan_for(cfg, cluster_shape(8, 80), prompt=256)
    assert plan.settings.trainer_workers == 4 and plan.settings.num_generators == 4 and plan.settings.backend == "vllm"
    assert any("the config gives no GPU shares" in n for n in plan.notes)
    one = plan_for(cfg, cluster_shape(1, 80), prompt=256)
    assert one.settings.trainer_gpus == 0.5 and one.split  # one GPU: shared 0.5 / 0.5


def test_session_plan_shows_the_table_in_a_notebook():
    import workbench

    s = workbench.Session(str(REPO / "configs" / "quickstart.yaml"), tracking=False)
    plan = s.plan()
    assert plan.fits and repr(plan).endswith("verdict: fits") and "trainer on host" in repr(plan)
    assert not s.plan(gpus_per_node=1, gpu_memory_gb=0.01).fits  # 10 MB per GPU holds nothing


def test_a_run_without_evaluation_plans_no_evaluator():
    from workbench.engine.plan import plan_for
    from workbench.engine.plan.build import cluster_shape

    on = plan_for(run_config_from_dict({}, {"model.path": str(QWEN15)}), cluster_shape(), prompt=256)
    off = plan_for(run_config_from_dict({}, {"model.path": str(QWEN15), "eval.every_steps": 0}), cluster_shape(), prompt=256)
    assert "evaluator" in [r.name for r in on.roles] and "evaluator" not in [r.name for r in off.roles]
    host_on, host_off = on.roles[-1], off.roles[-1]  # a CPU run: every actor on one host
    from workbench.engine.plan.host import RUNTIME_TORCH

    # no evaluator's tensors, and no torch process for it (the default backend is torch: 3 processes, then 2)
    assert host_on.terms["runtime: 3 torch processes"] == 3 * RUNTIME_TORCH
    assert "evaluator" not in host_off.terms and host_off.need == pytest.approx(host_on.need - host_on.terms["evaluator"] - RUNTIME_TORCH)
