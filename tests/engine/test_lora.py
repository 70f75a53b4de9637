"""`model.lora` (engine/model/lora.py): the config's checks, the wrapping on the builtin GPT and on a
Hugging Face Llama folder (only fp32 adapters train, the base frozen in the compute dtype, the FP32
head and gradient checkpointing still work), the adapter-only push to the torch generator (same
log-probs as the trainer's, before and after a step; far fewer bytes than the full weights), and
the checkpoint's resume. In-process Trainer and Generator, no Ray."""

from __future__ import annotations

import pytest
import torch

from tests.engine.train.helpers import batches, logprobs_at
from tests.helpers.run_folder import checkpointed_run
from workbench.config import run_config_from_dict
from workbench.configtools import ConfigError
from workbench.engine.batch import PackedGroups
from workbench.engine.model.lora import adapter_state, apply_lora
from workbench.engine.rollout.torch_backend import Generator
from workbench.engine.run.actors import generator_parts, trainer_parts
from workbench.engine.train.trainer import Trainer
from workbench.errors import UserError
from workbench.runs.export import export_policy

LORA = {"model.lora": {"rank": 4, "alpha": 8.0}}


@pytest.mark.parametrize("overrides,says", [
    ({"model.lora.rank": 0}, "model.lora.rank must be >= 1"),
    ({"model.lora.alpha": 0}, "model.lora.alpha must be > 0"),
    ({"model.lora.dropout": 1.0}, "model.lora.dropout must be in [0, 1)"),
    ({"model.lora.target_modules": []}, "non-empty list of layer names or 'all-linear'"),
    ({"model.lora.target_modules": "attention"}, "non-empty list of layer names or 'all-linear'"),
    ({"model.lora.rank": 4, "generation.backend": "vllm"}, "vLLM has no LoRA for GPT-2, the builtin model"),
    ({"model.lora.rank": 1024, "generation.backend": "vllm", "model.path": "m"}, "vLLM takes ranks up to 512"),
])  # fmt: skip
def test_bad_lora_settings_are_refused_at_load_in_one_line(overrides, says):
    with pytest.raises(ConfigError) as e:
        run_config_from_dict({}, overrides)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_lora_is_off_by_default_and_one_key_turns_it_on():
    assert run_config_from_dict({}).model.lora is None
    lora = run_config_from_dict({}, {"model.lora.rank": 16}).model.lora
    assert (lora.rank, lora.alpha, lora.dropout, lora.target_modules) == (16, 16.0, 0.0, "all-linear")


def _tiny_llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, tie_word_embeddings=False)  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(torch.bfloat16)


def test_only_fp32_adapters_train_over_the_frozen_base_in_its_own_dtype(tmp_path):
    from workbench.config import LoraConfig

    model = apply_lora(_tiny_llama(tmp_path), LoraConfig(rank=2, target_modules=["q_proj", "v_proj"]))
    trainable = adapter_state(model)
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == {"q_proj", "v_proj"}
    assert all(p.dtype == torch.float32 for p in trainable.values())
    frozen = [p for n, p in model.named_parameters() if n not in trainable]
    assert frozen and all(p.dtype == torch.bfloat16 and not p.requires_grad for p in frozen)
    # the model itself, not PEFT's wrapper: its body and its head are where the engine looks
    assert type(model.base_model).__name__ == "LlamaModel"
    assert model.get_output_embeddings() is model.lm_head and not model.lm_head.weight.requires_grad


def test_a_target_the_model_lacks_or_its_head_is_refused_naming_its_layers(tmp_path):
    from workbench.config import LoraConfig

    with pytest.raises(UserError) as e:
        apply_lora(_tiny_llama(tmp_path), LoraConfig(target_modules=["q_proj", "c_attn"]))
    msg = str(e.value)
    assert "'c_attn' names no linear layer" in msg and "q_proj" in msg and "down_proj" in msg and "\n" not in msg
    assert "lm_head" not in msg.split("named")[1]  # the head is not offered
    with pytest.raises(UserError, match="is the LM head"):
        apply_lora(_tiny_llama(tmp_path), LoraConfig(target_modules=["lm_head"]))


def test_the_push_is_the_adapter_alone_and_the_generator_samples_with_the_trainers_policy(tiny_config):
    cfg = tiny_config({**LORA, "train.lr": 1e-2, "train.grad_clip": 1e9}, for_actors=True)
    full_cfg = tiny_config({"train.lr": 1e-2}, for_actors=True)
    steps = batches(cfg, 1)  # sampled by a LoRA generator at version 0 (its adapters start as no change)
    tr, gen = Trainer(**trainer_parts(cfg)), Generator(**generator_parts(cfg))
    base = {k: v.clone() for k, v in tr.model.state_dict().items() if "lora_" not in k}
    result, flat = tr.train_step(steps[0], 0)
    stats = result.stats
    # step 1: the generator's and the trainer's policy are the same one: ratio 1 on every token
    assert stats["train/mismatch_tokens"] > 0 and abs(stats["train/mismatch_ratio_max"] - 1.0) < 1e-3
    assert stats["train/mismatch_kl"] < 1e-6
    names = [name for name, *_ in flat.layout]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert all(dtype == "float32" for _, dtype, *_ in flat.layout)
    full = Trainer(**trainer_parts(full_cfg)).get_weights()
    assert flat.nbytes * 5 < full.nbytes, (flat.nbytes, full.nbytes)
    assert all(torch.equal(v, base[k]) for k, v in tr.model.state_dict().items() if k in base)  # the base is frozen
    gen.set_weights(flat, result.version)
    chunk = gen.generate(1, [0, 1, 2], 4, seed=5)
    assert gen.version == 1 and all(v == 1 for g in chunk.groups for c in g.completions for v in c.versions)
    want, got = logprobs_at(tr, chunk.groups)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    start, _ = logprobs_at(Trainer(**trainer_parts(cfg)), chunk.groups)  # the base alone: another policy
    assert (start - want).abs().max() > 1e-2


def _next(tr: Trainer, groups, step: int) -> dict:
    result, flat = tr.train_step(groups, step)
    return {"loss": result.stats["train/loss"], "grad_norm": result.stats["train/grad_norm"],
            "weights": {k: v.clone() for k, v in flat.tensors().items()}}  # fmt: skip


def _same(a: dict, b: dict, atol: float) -> None:
    assert a["loss"] == pytest.approx(b["loss"], abs=atol) and a["grad_norm"] == pytest.approx(b["grad_norm"], abs=atol)
    assert a["weights"].keys() == b["weights"].keys()
    for k in a["weights"]:
        torch.testing.assert_close(a["weights"][k], b["weights"][k], atol=atol, rtol=0, msg=k)


def test_gradient_checkpointing_gives_the_same_lora_step(tiny_config):
    cfg = tiny_config({**LORA, "train.lr": 1e-2}, for_actors=True)
    gc = tiny_config({**LORA, "train.lr": 1e-2, "train.gradient_checkpointing": True}, for_actors=True)
    steps = batches(cfg, 2)
    plain, ckpt = Trainer(**trainer_parts(cfg)), Trainer(**trainer_parts(gc))
    assert ckpt.model.is_gradient_checkpointing and not plain.model.is_gradient_checkpointing
    plain.share_prompts = False  # checkpointing runs every row whole: so does the reference
    for i in range(2):
        _same(_next(ckpt, steps[i], i), _next(plain, steps[i], i), atol=1e-6)
    assert any(v.abs().max() > 0 for k, v in adapter_state(ckpt.model).items() if ".lora_B." in k)  # it trained


def test_the_kl_penalty_holds_the_lora_policy_to_the_frozen_base(tiny_config):
    cfg = tiny_config({**LORA, "train.lr": 1e-2, "recipe.loss.kl_coef": 0.1}, for_actors=True)
    steps = batches(cfg, 2)
    tr = Trainer(**trainer_parts(cfg))
    first = tr.train_step(steps[0], 0)[0].stats["train/kl_mean"]
    second = tr.train_step(steps[1], 1)[0].stats["train/kl_mean"]
    assert first == pytest.approx(0.0, abs=1e-6) and second > 1e-6  # the adapters start as the base, then move away


def _bytes(folder) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_lora_checkpoint_holds_the_adapters_alone_and_resumes_to_the_same_next_step(tiny_config, tmp_path):
    import torch.distributed.checkpoint as dcp

    cfg = tiny_config({**LORA, "train.lr": 1e-3}, for_actors=True)
    steps = batches(cfg, 3)
    tr = Trainer(**trainer_parts(cfg))
    for i in range(2):
        tr.train_step(steps[i], i)
    tr.save(str(tmp_path / "ck"))
    continued = _next(tr, steps[2], 2)
    # the frozen base is not in it: the adapters and their AdamW states alone, a small fraction of a full checkpoint
    saved = dcp.FileSystemReader(str(tmp_path / "ck" / "trainer_dcp")).read_metadata().state_dict_metadata
    weights = {k.removeprefix("model.model.") for k in saved if k.startswith("model.")}
    assert weights == set(adapter_state(tr.model))
    full_cfg = tiny_config({"train.lr": 1e-3}, for_actors=True)
    full = Trainer(**trainer_parts(full_cfg))
    full.train_step(batches(full_cfg, 1)[0], 0)
    full.save(str(tmp_path / "full"))
    # rank 4 on a 32-wide model is a large share of it; on real shapes a LoRA checkpoint is 0.5-2% (bench_lora_checkpoint.py)
    assert _bytes(tmp_path / "ck") * 2 < _bytes(tmp_path / "full"), (_bytes(tmp_path / "ck"), _bytes(tmp_path / "full"))
    # a resume reads the base from model.path again and the adapters from the checkpoint
    back = Trainer(**trainer_parts(cfg))
    assert back.load(str(tmp_path / "ck")) == 2
    _same(_next(back, steps[2], 2), continued, atol=0)
    # AdamW holds state for the adapters alone
    assert {id(p) for p in back.optimizer.state} == {id(p) for p in adapter_state(back.model).values()}


def test_a_lora_checkpoint_that_holds_the_base_too_still_resumes(tiny_config, tmp_path):
    """Checkpoints of earlier versions held the frozen base beside the adapters: they still load."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    cfg = tiny_config({**LORA, "train.lr": 1e-3}, for_actors=True)
    steps = batches(cfg, 2)
    tr = Trainer(**trainer_parts(cfg))
    tr.train_step(steps[0], 0)
    tr.save(str(tmp_path / "ck"))
    model_sd, optim_sd = get_state_dict(tr.policy, tr.optimizer)  # the base included, as before
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp_path / "ck" / "trainer_dcp"), no_dist=True)
    continued = _next(tr, steps[1], 1)
    back = Trainer(**trainer_parts(cfg))
    assert back.load(str(tmp_path / "ck")) == 1
    _same(_next(back, steps[1], 1), continued, atol=0)


def test_lora_on_a_hugging_face_llama_with_the_fp32_head(tiny_config, tmp_path):
    from tests.helpers.tiny_hf import build_tiny_hf, task_texts
    from workbench.tasks.base import load_task

    probe = tiny_config()
    folder = build_tiny_hf(tmp_path / "llama", "llama", corpus=task_texts(load_task(probe.task)))
    cfg = tiny_config({"model.path": str(folder), "model.lora": {"rank": 2, "target_modules": ["q_proj", "v_proj", "down_proj"]},
                       "train.lr": 1e-2, "recipe.fp32_head": True}, for_actors=True)  # fmt: skip
    steps = batches(cfg, 1)
    tr, gen = Trainer(**trainer_parts(cfg)), Generator(**generator_parts(cfg))
    assert tr.model.get_output_embeddings() is tr.model.lm_head  # what the FP32 head and the chunked log-probs use
    result, flat = tr.train_step(steps[0], 0)
    assert result.skipped is None and abs(result.stats["train/mismatch_ratio_max"] - 1.0) < 1e-3
    assert {n.split(".")[-4] for n, *_ in flat.layout} == {"q_proj", "v_proj", "down_proj"}
    gen.set_weights(flat, result.version)
    chunk = gen.generate(1, [0, 1], 4, seed=2)
    want, got = logprobs_at(tr, chunk.groups)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def _hf_logprobs(model, rows) -> torch.Tensor:
    """A Hugging Face (or PEFT) model's own forward, as a user runs it: log-probs at the trained tokens."""
    from workbench.engine.model.forward import position_ids_from_mask
    from workbench.rl.head import token_logprobs

    with torch.no_grad():
        logits = model(input_ids=rows.input_ids, attention_mask=rows.attention_mask,
                       position_ids=position_ids_from_mask(rows.attention_mask)).logits.float()
    return token_logprobs(logits[:, :-1], rows.input_ids[:, 1:])[rows.loss_mask > 0]


def test_a_lora_run_exports_its_merged_policy_and_its_adapter_with_the_trainers_logprobs(tiny_config, tmp_path):
    import json

    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    cfg = tiny_config({**LORA, "train.lr": 1e-2, "train.grad_clip": 1e9}, for_actors=True)
    steps = batches(cfg, 3)
    tr = Trainer(**trainer_parts(cfg))

    held = {}

    def step_then_save(i):
        def save(path):
            tr.train_step(steps[i], i)
            held[i + 1] = {k: v.detach().clone() for k, v in adapter_state(tr.model).items()}
            tr.save(path)
        return save

    # three saves, two kept: step 1 is pruned to its policy snapshot, and still exports
    run = checkpointed_run(tmp_path / "run", cfg, {s + 1: step_then_save(s) for s in range(3)})
    merged = export_policy(run, tmp_path / "merged")
    adapter = export_policy(run, adapter=True)
    assert adapter.out == run / "adapter" and adapter.kind == "adapter" and str(adapter).startswith("adapter of step 3")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in adapter.out.iterdir()}
    conf = json.loads((adapter.out / "adapter_config.json").read_text())
    assert conf["base_model_name_or_path"] == cfg.model.path and conf["r"] == 4 and conf["lora_alpha"] == 8.0
    assert adapter.params == sum(v.numel() for v in adapter_state(tr.model).values())
    _, rows, _ = tr.prepare(PackedGroups.from_groups(steps[0]))
    with torch.no_grad():
        want, _ = tr.policy(rows.input_ids, rows.attention_mask, rows.loss_mask > 0, 1.0, None)
    plain = AutoModelForCausalLM.from_pretrained(merged.out, dtype=torch.float32).eval()
    assert not any("lora" in k for k in plain.state_dict())  # the adapters are folded into the weights
    torch.testing.assert_close(_hf_logprobs(plain, rows), want, atol=1e-4, rtol=0)
    base = AutoModelForCausalLM.from_pretrained(conf["base_model_name_or_path"], dtype=torch.float32)
    with_adapter = PeftModel.from_pretrained(base, adapter.out).eval()
    torch.testing.assert_close(_hf_logprobs(with_adapter, rows), want, atol=1e-4, rtol=0)
    start = AutoModelForCausalLM.from_pretrained(cfg.model.path, dtype=torch.float32).eval()
    assert (_hf_logprobs(start, rows) - want).abs().max() > 1e-3  # the run's base alone is another policy
    first = export_policy(run, tmp_path / "first", step=1, adapter=True)  # from step 1's snapshot
    saved = load_file(str(first.out / "adapter_model.safetensors"))
    assert len(saved) == len(held[1])
    for name, value in held[1].items():  # PEFT's file names drop the adapter's name ("default")
        torch.testing.assert_close(saved["base_model.model." + name.replace(".default.", ".")], value, atol=0, rtol=0)
    # step 1's snapshot holds the adapters alone (fp32), like its checkpoint did; its merged policy exports too
    snap = load_file(str(next((run / "checkpoints" / "policies" / "step_000001").glob("*.safetensors"))))
    assert snap and all(".lora_" in k and v.dtype == torch.float32 for k, v in snap.items())
    merged_first = AutoModelForCausalLM.from_pretrained(export_policy(run, tmp_path / "merged-first", step=1).out)
    first_base = AutoModelForCausalLM.from_pretrained(conf["base_model_name_or_path"], dtype=torch.float32)
    first_adapter = _hf_logprobs(PeftModel.from_pretrained(first_base, first.out).eval(), rows)
    torch.testing.assert_close(_hf_logprobs(merged_first.float().eval(), rows), first_adapter, atol=1e-4, rtol=0)
    assert (first_adapter - want).abs().max() > 1e-5  # step 1's policy, not step 3's


def test_export_adapter_works_from_python_and_names_the_hub_id(tiny_config, tmp_path):
    """`RunView.export` and `Session.export` take `adapter=` as the command does; a model that came
    from the hub (its snapshot folder in the hub cache's layout) is named by its id and commit."""
    import dataclasses
    import json
    import shutil

    from workbench import RunView, Session

    cfg = tiny_config({**LORA, "train.lr": 1e-2}, for_actors=True)
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / "models--acme--tiny-chat" / "snapshots" / commit
    shutil.copytree(cfg.model.path, snapshot)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(snapshot), revision=commit))
    tr = Trainer(**trainer_parts(cfg))

    def save(path):
        tr.train_step(batches(cfg, 1)[0], 0)
        tr.save(path)

    run = checkpointed_run(tmp_path / "run", cfg, {1: save})
    view = RunView.open(run).export(tmp_path / "view", adapter=True)
    session = Session.open(run).export(tmp_path / "session", adapter=True)
    assert view.kind == session.kind == "adapter" and view.step == session.step == 1
    for out in (view.out, session.out):
        conf = json.loads((out / "adapter_config.json").read_text())
        assert (conf["base_model_name_or_path"], conf["revision"]) == ("acme/tiny-chat", commit)
    assert (view.out / "adapter_model.safetensors").read_bytes() == (session.out / "adapter_model.safetensors").read_bytes()
    assert RunView.open(run).export(tmp_path / "merged").kind == "policy"  # the default stays the merged policy


def test_a_full_fine_tuning_run_has_no_adapter_to_export(tiny_config, tmp_path):
    cfg = tiny_config(for_actors=True)
    run = checkpointed_run(tmp_path / "run", cfg, {1: Trainer(**trainer_parts(cfg)).save})
    with pytest.raises(UserError, match="was trained without model.lora: it has no adapter to export"):
        export_policy(run, adapter=True)


@pytest.mark.slow
@pytest.mark.long  # 75 s on a quiet 2-core machine: the acceptance run, `make test-long` (the rest of this file covers its parts in-process)
def test_a_lora_quickstart_learns_survives_a_killed_trainer_and_resumes(ray_cluster, model_cache, tmp_path):
    """The quickstart with LoRA (rank 8 at 10x full fine-tuning's learning rate) on a real Ray cluster:
    step 1's ratio is 1, the trainer killed at step ~30 restarts from step 20's checkpoint with no
    step lost or doubled, it learns as full fine-tuning does (+0.125 in 120 steps, measured), the
    final merged policy is exported, and the finished run resumes from its LoRA checkpoint."""
    import os
    import signal
    import time
    from pathlib import Path

    import ray

    from workbench.config import load_run_config
    from workbench.engine.run.launch import launch, run_to_end
    from workbench.tracking.sink import read_jsonl

    quickstart = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
    over = {"name": "lora", "out_dir": str(tmp_path / "lora"), "model.cache_dir": str(model_cache), "model.lora.rank": 8,
            "train.lr": 2e-3, "train.max_steps": 80, "eval.every_steps": 40, "eval.num_prompts": 100,
            "checkpoint.every_steps": 20, "tracking.mlflow": False}  # fmt: skip
    cfg = load_run_config(quickstart, over)
    handle = launch(cfg)
    try:
        handle.start()
        deadline = time.time() + 240
        while handle.status()["step"] < 30 and time.time() < deadline:
            time.sleep(0.05)
        worker = ray.get_actor("lora/Trainer/0", namespace="workbench")
        os.kill(ray.get(worker.pid.remote()), signal.SIGKILL)
        summary = handle.wait(timeout=400)
    finally:
        handle.kill()
    assert summary["status"] == "finished" and summary["steps"] == 80
    assert any("restarted the trainer group" in e for e in summary["events"]), summary["events"]
    rows = read_jsonl(f"{cfg.out_dir}/metrics.jsonl")
    trained = [r for r in rows if "train/skipped" in r]
    assert [r["step"] for r in trained] == list(range(1, 81)), "a step was lost or logged twice"
    first = trained[0]
    assert first["train/mismatch_tokens"] > 0 and abs(first["train/mismatch_ratio_max"] - 1.0) < 1e-3
    evals = [r["val/pass_rate"] for r in rows if "val/pass_rate" in r]
    assert len(evals) == 3 and evals[-1] >= evals[0] + 0.05, evals  # it learns
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(summary["policy"]["path"])  # the merged policy, a plain model
    assert not any("lora" in k for k in policy.state_dict())
    more = load_run_config(quickstart, {**over, "train.max_steps": 85, "checkpoint.export_policy": False})
    again = run_to_end(more, timeout=300)
    assert again["resumed_from"] == 80 and again["steps"] == 85
    assert [r["step"] for r in read_jsonl(f"{cfg.out_dir}/metrics.jsonl") if "train/skipped" in r] == list(range(1, 86))
