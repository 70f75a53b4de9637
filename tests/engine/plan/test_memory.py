"""The plan's arithmetic (workbench.engine.plan.memory / fit) against published figures and its own rules."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from workbench.engine.plan.fit import make_plan
from workbench.engine.plan.memory import CONTEXT_BYTES, GB, Cluster, ModelShape, Settings, kv_bytes_per_token, trainer_terms

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "model_configs"
# Published sizes: the Qwen2.5 model cards ("Number of Parameters: 0.49B / 1.54B / 7.61B",
# huggingface.co/Qwen/Qwen2.5-{0.5B,1.5B,7B}) and Llama 3.1's (8.03B in the model's
# safetensors metadata, huggingface.co/meta-llama/Llama-3.1-8B; "8B" in Meta's model card).
PUBLISHED = {"qwen2.5-0.5b": 0.49e9, "qwen2.5-1.5b": 1.54e9, "qwen2.5-7b": 7.61e9, "llama-3.1-8b": 8.03e9}


def shape(name: str) -> ModelShape:
    return ModelShape.from_config(json.loads((CONFIGS / name / "config.json").read_text()))


def settings(**kw) -> Settings:
    base = dict(compute_bytes=2, fp32_head=True, trainer_workers=4, trainer_gpus=1, generator_gpus=1, num_generators=4,
                evaluator_gpus=0, backend="vllm", tp=1, vllm_util=0.85, enforce_eager=False, max_batch_sequences=256,
                micro_batch_size=64, micro_batch_tokens=16384, gradient_checkpointing=True, prompt_tokens=512,
                max_new_tokens=1024)
    return Settings(**{**base, **kw})


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_from_config_json_alone_are_within_1pct_of_published_sizes(name):
    assert shape(name).params == pytest.approx(PUBLISHED[name], rel=0.01)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_formula_counts_what_transformers_builds_from_the_same_config(name):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(CONFIGS / name))
    assert shape(name).params == sum(p.numel() for p in model.parameters())


def test_fsdp_divides_the_fp32_states_and_the_micro_batch_scales_the_activations():
    m, s = shape("qwen2.5-7b"), settings()
    one, four = trainer_terms(m, s, False, workers=1), trainer_terms(m, s, False, workers=4)
    assert one["AdamW states (fp32)"] == 8 * m.params and four["AdamW states (fp32)"] == 2 * m.params
    half = trainer_terms(m, s, False, micro_tokens=s.micro_tokens // 2)
    assert half["activations"] < 0.51 * trainer_terms(m, s, False)["activations"]
    assert kv_bytes_per_token(m, s) == 2 * 28 * 4 * 128 * 2  # K and V, 28 layers, 4 kv heads of 128, bf16


def test_qwen7b_fits_8x80gb_and_on_24gb_the_verdict_names_the_term_and_the_setting():
    m = shape("qwen2.5-7b")
    plan = make_plan(m, settings(), Cluster(8, 80 * GB))
    assert plan.fits and plan.verdict == "fits"
    gen = next(r for r in plan.roles if r.name == "generator")
    assert gen.terms["fp32 head copy"] == 4 * 152064 * 3584 and gen.terms["KV cache"] > 20 * GB
    small = make_plan(m, settings(), Cluster(8, 24 * GB))
    assert not small.fits
    assert "trainer" in small.verdict and "largest term: AdamW states (fp32)" in small.verdict
    assert "resources.trainer_workers=" in small.verdict


def test_a_big_micro_batch_is_told_to_shrink_and_a_big_generator_to_use_tensor_parallelism():
    m = shape("qwen2.5-7b")
    plan = make_plan(m, settings(gradient_checkpointing=False), Cluster(8, 80 * GB))
    assert not plan.fits and "largest term: activations" in plan.verdict and "train.micro_batch_tokens to" in plan.verdict
    fixed = int(plan.verdict.split("train.micro_batch_tokens to ")[1].split()[0].replace(",", ""))
    assert make_plan(m, settings(gradient_checkpointing=False, micro_batch_tokens=fixed), Cluster(8, 80 * GB)).fits
    gen = make_plan(m, settings(trainer_gpus=0), Cluster(8, 16 * GB))  # 15 GB of bf16 weights on a 16 GB GPU
    bad = next(r for r in gen.roles if r.name == "generator")
    assert not bad.fits and "vllm_tensor_parallel_size=2" in bad.fix
    assert make_plan(m, settings(trainer_gpus=0, tp=2, generator_gpus=2), Cluster(8, 16 * GB)).fits


def test_a_shared_gpu_splits_by_share_and_the_cluster_must_have_the_gpus():
    m = shape("qwen2.5-0.5b")
    s = settings(trainer_workers=1, trainer_gpus=0.5, generator_gpus=0.5, num_generators=1, vllm_util=0.4, max_new_tokens=512)
    plan = make_plan(m, s, Cluster(1, 24 * GB))
    trainer = next(r for r in plan.roles if r.name == "trainer")
    assert trainer.budget == 12 * GB and plan.split and "trainer 0.5 + generator 0.5" in plan.split[0]
    assert next(r for r in plan.roles if r.name == "generator").budget == pytest.approx(0.4 * 24 * GB)
    short = make_plan(m, settings(), Cluster(4, 80 * GB))  # 4 trainers + 4 generators on 4 GPUs
    assert not short.fits and short.verdict.startswith("does not fit: the recipe asks for 8 GPUs; the cluster has 4")
    assert "GB" not in short.verdict  # GPUs are counted in GPUs, never as memory


def test_cpu_runs_add_every_actor_up_in_host_memory():
    m = shape("qwen2.5-0.5b")
    s = settings(compute_bytes=4, trainer_workers=1, trainer_gpus=0, generator_gpus=0, num_generators=2, backend="torch",
                 max_new_tokens=64, micro_batch_tokens=1024)
    plan = make_plan(m, s, Cluster(0, 24 * GB, source="this host"))
    host = plan.roles[-1]
    assert host.name == "all actors" and host.terms["generators"] == 2 * plan.roles[1].need
    assert host.need == sum(host.terms.values()) and plan.fits == (host.need <= 24 * GB)
    assert not make_plan(shape("qwen2.5-7b"), dataclasses.replace(s), Cluster(0, 24 * GB)).fits


def test_a_kl_reference_adds_its_compute_dtype_weights_per_worker_and_can_tip_the_plan():
    m = shape("qwen2.5-7b")
    plain, kl = trainer_terms(m, settings(), False), trainer_terms(m, settings(kl_reference=True), False)
    assert kl["KL reference weights"] == 2 * m.params / 4  # bf16, sharded over 4 workers
    assert kl["peak"] - plain["peak"] == pytest.approx(2 * m.params / 4)
    # a card with room for the plain trainer and half the reference: refused, naming the trainer
    s = settings(trainer_workers=8, num_generators=0)
    need = make_plan(m, s, Cluster(8, 80 * GB)).roles[0].need
    c = Cluster(8, need + CONTEXT_BYTES + m.params / 8)
    assert make_plan(m, s, c).roles[0].fits
    refused = make_plan(m, dataclasses.replace(s, kl_reference=True), c)
    assert not refused.fits and "the trainer needs" in refused.verdict


def test_a_generator_without_room_for_its_kv_cache_says_so_names_the_fix_and_prints_no_negative():
    import re

    m = shape("qwen2.5-0.5b")  # vLLM's fixed terms: ~3.7 GB (weights, fp32 head, CUDA graphs and context, runtime)
    s = settings(trainer_workers=1, trainer_gpus=0, generator_gpus=0.5, num_generators=1, vllm_util=0.1, max_new_tokens=1024)
    plan = make_plan(m, s, Cluster(1, 24 * GB))  # 0.1 of 24 GB: 2.4 GB, less than the fixed terms
    gen = next(r for r in plan.roles if r.name == "generator")
    assert not plan.fits and gen.no_kv_room and gen.terms["KV cache"] == 0
    assert plan.verdict.startswith("does not fit: no room for the KV cache: the generator's other terms take 3.")
    assert "raise generation.vllm_gpu_memory_utilization to 0.45 (now 0.1)" in plan.verdict  # 0.5 share less its margin
    assert make_plan(m, dataclasses.replace(s, vllm_util=0.45), Cluster(1, 24 * GB)).fits
    assert not re.search(r"(?<![\w.])-\d", plan.table())  # what is left is 0.00 GB, never a negative
    # on 8 GB at the share's most, only dropping the CUDA graphs leaves room
    tight = make_plan(m, dataclasses.replace(s, vllm_util=0.45), Cluster(1, 8 * GB))
    assert not tight.fits and "set generation.vllm_enforce_eager=true" in tight.verdict
    assert make_plan(m, dataclasses.replace(s, vllm_util=0.45, enforce_eager=True), Cluster(1, 8 * GB)).fits
    # the evaluator's fix names its own share
    ev = make_plan(m, dataclasses.replace(s, generator_gpus=0, evaluator_gpus=0.25, vllm_util=0.2, enforce_eager=True),
                   Cluster(1, 8 * GB))  # fmt: skip
    assert not ev.fits and "resources.evaluator_gpus" in next(r for r in ev.roles if r.name == "evaluator").fix


def test_an_evaluator_without_a_gpu_share_is_the_torch_generator_on_the_host_whatever_the_backend():
    m = shape("qwen2.5-7b")
    s = settings(trainer_workers=1, trainer_gpus=0.5, generator_gpus=0.5, num_generators=1, vllm_util=0.45,
                 max_batch_sequences=64, max_new_tokens=1024, model_dtype="bfloat16")  # fmt: skip
    for backend in ("vllm", "torch"):
        plan = make_plan(m, dataclasses.replace(s, backend=backend), Cluster(1, 48 * GB))
        ev = next(r for r in plan.roles if r.name == "evaluator")
        kv = 2 * 28 * 4 * 128 * 4 * 64 * (512 + 1024)  # K and V, 28 layers, 4 kv heads of 128, fp32, 64 rows
        assert ev.device == "host (not planned)" and ev.budget == float("inf") and ev.fits
        assert ev.terms == {"weights": 4 * m.params, "KV cache (HF)": kv, "logits (fp32)": 2 * 64 * 152064 * 4}
        half = 2 * m.params + kv / 2 + 2 * 64 * 152064 * 4
        assert f"{half / GB:.2f} GB in bfloat16 on a CPU with native bf16" in " ".join(ev.notes)
        assert "evaluator on host (not planned)" in plan.table()
    on_gpu = make_plan(m, dataclasses.replace(s, generator_gpus=0.25, evaluator_gpus=0.25, vllm_util=0.2), Cluster(1, 80 * GB))
    ev = next(r for r in on_gpu.roles if r.name == "evaluator")
    assert ev.device == "0.25 of a GPU" and "KV cache" in ev.terms  # a GPU share: vLLM, as the generator


def test_a_cpu_plan_counts_the_evaluator_as_the_torch_generator_it_is_even_beside_vllm_generators():
    m = shape("qwen2.5-0.5b")
    s = settings(compute_bytes=4, trainer_workers=1, trainer_gpus=0, generator_gpus=0, num_generators=1,
                 max_new_tokens=64, micro_batch_tokens=1024, max_batch_sequences=32, vllm_kv_bytes=2**30)  # fmt: skip
    plan = make_plan(m, s, Cluster(0, 64 * GB, source="this host"))
    gen, ev, host = plan.roles[1:]
    assert "KV cache" in gen.terms and ev.terms["weights"] == 4 * m.params and "KV cache (HF)" in ev.terms
    assert host.terms["evaluator"] == ev.need != gen.need
