"""The memory plan of a `model.lora` run (engine/plan/lora.py, memory.py): the adapters counted from
the shape as PEFT builds them, the trainer's terms (a frozen base, fp32 adapter states), and a
target the model lacks refused in one line. (The GPU recipe that fits only with LoRA:
test_gpu_recipes.py; the plan against the measured CPU peak: test_plan_reality.py; vLLM's buffers
against the real engine's: tests/engine/rollout/test_backend_lora.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from workbench.config import run_config_from_dict
from workbench.config import LoraConfig
from workbench.engine.model.lora import adapter_state, apply_lora
from workbench.engine.plan.build import plan_for
from workbench.engine.plan.lora import adapter_params
from workbench.engine.plan.memory import Cluster, ModelShape, Settings, trainer_terms
from workbench.errors import UserError

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "model_configs"
GPT2 = {"model_type": "gpt2", "vocab_size": 50, "n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 64}


def _peft_count(config: dict, rank: int, targets) -> int:
    """What PEFT's wrapping (the trainer's apply_lora) trains, on the meta device."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
        model = apply_lora(model, LoraConfig(rank=rank, target_modules=targets))
    return sum(p.numel() for p in adapter_state(model).values())


@pytest.mark.parametrize("name,rank,targets", [
    ("qwen2.5-0.5b", 16, "all-linear"), ("llama-3.1-8b", 8, "all-linear"), ("qwen2.5-7b", 4, ["q_proj", "v_proj"]),
    ("gpt2", 8, "all-linear"), ("gpt2", 2, ["c_proj"]),  # GPT-2's c_proj is the attention's and the MLP's
])  # fmt: skip
def test_the_adapter_count_from_the_shape_is_what_peft_builds(name, rank, targets):
    config = GPT2 if name == "gpt2" else json.loads((CONFIGS / name / "config.json").read_text())
    tgt = (targets,) if isinstance(targets, str) else tuple(targets)
    assert adapter_params(ModelShape.from_config(config), rank, tgt) == _peft_count(config, rank, targets)


def _settings(**kw) -> Settings:
    base = dict(compute_bytes=2, fp32_head=True, trainer_workers=1, trainer_gpus=1, generator_gpus=1, num_generators=1,
                evaluator_gpus=0, backend="vllm", tp=1, vllm_util=0.85, enforce_eager=False, max_batch_sequences=64,
                micro_batch_size=64, micro_batch_tokens=4096, gradient_checkpointing=True, prompt_tokens=512,
                max_new_tokens=1024, kept_versions=2)  # fmt: skip
    return Settings(**{**base, **kw})


def test_a_lora_trainer_holds_the_base_in_bf16_and_fp32_states_for_the_adapters_alone():
    m = ModelShape.from_config(json.loads((CONFIGS / "qwen2.5-7b" / "config.json").read_text()))
    full = trainer_terms(m, _settings(), False)
    lora = trainer_terms(m, _settings(lora_rank=16, lora_targets=("all-linear",)), False)
    a = adapter_params(m, 16, ("all-linear",))
    assert 30e6 < a < 50e6  # rank 16 on every linear layer of a 7.6B Qwen2: 40M
    assert lora["frozen base (bf16)"] == 2 * m.params and "master weights (fp32)" not in lora
    assert (lora["adapters (fp32)"], lora["adapter gradients (fp32)"], lora["adapter AdamW states (fp32)"]) == (4 * a, 4 * a, 8 * a)
    assert lora["compute copy"] == 2 * a and lora["optimizer step temporaries"] == 4 * a
    assert lora["earlier versions (mismatch)"] == 2 * 2 * a  # two kept versions of the adapters, in bf16
    assert lora["activations"] > full["activations"]  # the rank-wide A x of each adapted layer on top
    assert lora["peak"] < 25e9 < 100e9 < full["peak"]


def test_the_plan_refuses_a_target_the_model_lacks_in_one_line():
    cfg = run_config_from_dict({}, {"model.path": str(CONFIGS / "qwen2.5-0.5b"), "model.lora.target_modules": ["c_attn"]})
    with pytest.raises(UserError) as e:
        plan_for(cfg, Cluster(1, 24e9), prompt=512)
    assert "'c_attn' names no linear layer of a qwen2 decoder layer" in str(e.value) and "\n" not in str(e.value)
