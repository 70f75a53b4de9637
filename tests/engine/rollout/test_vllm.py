"""The vLLM generator backend.

CPU tests: import without vllm, clear errors without vllm/CUDA, engine options, the decode loop and
the generator against a scripted stand-in for vLLM (fake `vllm` package), the fp32 head patch.
GPU tests (TestOnGpu, skipped without CUDA + vllm): a tiny GPT-2 on a real engine, log-probs vs the
trainer's forward, weight updates without restarting the engine.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import types
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from workbench.config import run_config_from_dict
from workbench.engine.rollout.vllm import backend as vg
from workbench.errors import UserError
from workbench.rl.length import ForcedInterruption

EOS = 1


# --- stand-in engine
class ScriptedEngine:
    """Mimics vLLM's LLMEngine surface: add_request / step / has_unfinished_requests.

    `respond(context_ids) -> planned tokens`; one token per request per step, cumulative outputs,
    log-prob entries {token: Logprob-like} holding the sampled token and a decoy.
    """

    def __init__(self, respond, suffix: str = "", on_step=None, drop_finals: bool = False, reason=None):
        self.respond, self.suffix, self.on_step = respond, suffix, on_step
        self.drop_finals, self.reason = drop_finals, reason
        self.reqs: dict[str, dict] = {}
        self.added: list[tuple[str, list[int], object]] = []
        self.steps = 0

    def add_request(self, rid, prompt, params):
        ids = list(prompt["prompt_token_ids"])
        self.added.append((rid, ids, params))
        internal = rid + self.suffix
        self.reqs[internal] = {"plan": list(self.respond(ids)), "out": [], "lps": [], "max": params.max_tokens}
        return internal if self.suffix else None

    def has_unfinished_requests(self):
        return bool(self.reqs)

    def step(self):
        self.steps += 1
        if self.on_step:
            self.on_step(self.steps)
        outs = []
        for rid, r in list(self.reqs.items()):
            pos = len(r["out"])
            tok = r["plan"][pos] if pos < len(r["plan"]) else 7
            r["out"].append(tok)
            r["lps"].append({tok: SimpleNamespace(logprob=-0.5 - pos), 99: SimpleNamespace(logprob=-9.0)})
            reason = "stop" if tok == EOS else ("length" if len(r["out"]) >= r["max"] else None)
            reason = self.reason if (reason and self.reason) else reason
            if reason:
                del self.reqs[rid]
                if self.drop_finals:
                    continue
            res = SimpleNamespace(token_ids=list(r["out"]), logprobs=list(r["lps"]), finish_reason=reason)
            outs.append(SimpleNamespace(request_id=rid, finished=reason is not None, outputs=[res]))
        return outs


def params(max_tokens, i, part):
    return SimpleNamespace(max_tokens=max_tokens, index=i, part=part)


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
        vg.VllmGenerator(cfg, 0)


def test_backend_vllm_without_cuda_or_gpus_is_a_clear_user_error(monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        vg.VllmGenerator(_vllm_cfg(), 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(UserError, match="resources.generator_gpus"):
        vg.VllmGenerator(_vllm_cfg(**{"resources.generator_gpus": 0}), 0)


# --- engine options
FIELDS = {"model", "worker_extension_cls", "enable_prefix_caching", "async_scheduling", "generation_config", "max_num_seqs", "logprobs_mode"}


def test_engine_kwargs_ask_for_processed_logprobs_no_prefix_cache_and_fp32_head():
    kw = vg.build_engine_kwargs(_vllm_cfg(), "/m", FIELDS, dtype="bfloat16", seed=3, max_model_len=40, vllm_version="0.11.0")
    assert kw["logprobs_mode"] == "processed_logprobs"
    assert kw["enable_prefix_caching"] is False and kw["async_scheduling"] is False
    assert kw["generation_config"] == "vllm"  # the checkpoint's top_k/top_p defaults must not apply
    assert kw["hf_overrides"] == {"head_dtype": "float32"}
    assert kw["worker_extension_cls"] == vg.EXTENSION and kw["max_model_len"] == 40 and kw["seed"] == 3
    assert kw["gpu_memory_utilization"] == 0.85 and kw["tensor_parallel_size"] == 1
    no_fp32 = vg.build_engine_kwargs(_vllm_cfg(**{"recipe.fp32_head": False}), "/m", FIELDS, dtype="bfloat16", seed=0)
    assert "hf_overrides" not in no_fp32


def test_engine_kwargs_leave_out_options_an_older_vllm_lacks():
    old = {"model", "worker_extension_cls"}
    kw = vg.build_engine_kwargs(_vllm_cfg(), "/m", old, dtype="float16", seed=0)
    assert not {"logprobs_mode", "async_scheduling", "enable_prefix_caching"} & set(kw)
    hot = _vllm_cfg(**{"generation.temperature": 0.7})
    with pytest.raises(UserError, match="before temperature"):  # raw log-probs only match at T = 1
        vg.build_engine_kwargs(hot, "/m", old, dtype="float16", seed=0, vllm_version="0.9.2")
    with pytest.raises(UserError, match="before temperature"):  # logprobs_mode exists, but without temperature
        vg.build_engine_kwargs(hot, "/m", FIELDS, dtype="float16", seed=0, vllm_version="0.10.1")
    assert vg.build_engine_kwargs(hot, "/m", FIELDS, dtype="float16", seed=0, vllm_version="0.10.2")["logprobs_mode"] == "processed_logprobs"
    assert vg.build_engine_kwargs(_vllm_cfg(), "/m", FIELDS, dtype="float16", seed=0, vllm_version="0.10.1")["logprobs_mode"] == "raw_logprobs"
    with pytest.raises(UserError, match="worker_extension_cls"):
        vg.build_engine_kwargs(_vllm_cfg(), "/m", {"model"}, dtype="float16", seed=0)
    with pytest.raises(UserError, match="vllm_gpu_memory_utilization"):
        vg.build_engine_kwargs(_vllm_cfg(**{"generation.vllm_gpu_memory_utilization": 1.5}), "/m", FIELDS, dtype="float16", seed=0)


# --- decode loop
def test_decode_records_sampled_logprobs_versions_and_finish_state():
    plans = {5: [4, 6, EOS], 6: [4, 4, 4, 4, 4, 4]}
    engine = vg.StepEngine(ScriptedEngine(lambda ids: plans[ids[0]]))
    outs = vg.decode(engine, [[5, 3], [6]], make_params=params, max_new_tokens=4, max_model_len=64, version=2)
    a, b = outs
    assert a.prompt_tokens == [5, 3] and a.tokens == [4, 6, EOS] and a.finished
    assert a.logprobs == [-0.5, -1.5, -2.5]  # the sampled token's entry, not the decoy's
    assert b.tokens == [4, 4, 4, 4] and not b.finished  # cut at max_new_tokens
    assert all(c.sampled == [True] * len(c.tokens) and c.versions == [2] * len(c.tokens) for c in outs)


def test_decode_credits_tokens_to_the_version_in_force_at_their_step():
    versions = iter([0, 0, 3, 3, 3, 3])
    engine = vg.StepEngine(ScriptedEngine(lambda ids: [4] * 9))
    (c,) = vg.decode(engine, [[5]], make_params=params, max_new_tokens=5, max_model_len=64, on_step=lambda: next(versions))
    assert c.versions == [0, 0, 3, 3, 3]


def test_step_engine_maps_internal_request_ids_back():
    engine = vg.StepEngine(ScriptedEngine(lambda ids: [4, EOS], suffix="-a1b2c3"))
    (c,) = vg.decode(engine, [[5]], make_params=params, max_new_tokens=4, max_model_len=64)
    assert c.tokens == [4, EOS] and c.finished


def test_decode_fails_loudly_on_missing_outputs_abort_and_long_prompts():
    with pytest.raises(RuntimeError, match="without a final output"):
        vg.decode(vg.StepEngine(ScriptedEngine(lambda ids: [4], drop_finals=True)), [[5]], make_params=params, max_new_tokens=2, max_model_len=64)
    with pytest.raises(RuntimeError, match="finish_reason='abort'"):
        vg.decode(vg.StepEngine(ScriptedEngine(lambda ids: [4], reason="abort")), [[5]], make_params=params, max_new_tokens=2, max_model_len=64)
    with pytest.raises(UserError, match="max_model_len"):
        vg.decode(vg.StepEngine(ScriptedEngine(lambda ids: [4])), [[5] * 8], make_params=params, max_new_tokens=2, max_model_len=8)


def test_sampled_logprob_reads_logprob_objects_and_floats():
    assert vg.sampled_logprob({3: SimpleNamespace(logprob=-1.25)}, 3) == -1.25 and vg.sampled_logprob({3: -0.5}, 3) == -0.5
    with pytest.raises(RuntimeError, match="sampled token 4"):
        vg.sampled_logprob({3: -0.5}, 4)
    with pytest.raises(RuntimeError, match="no log-probs"):
        vg.sampled_logprob(None, 4)


def test_forced_interruption_runs_in_two_phases():
    phrase, marker = [90, 91, 99], 99
    fi = ForcedInterruption(phrase, 20, 4, 4, 3, end_think_ids=[marker])
    plans = {
        5: lambda ids: [4] * 30,  # never closes thinking: interrupted at 4, then a 3-token answer
        6: lambda ids: [4, marker, 4, 4, 4, 4, 4, 4] if len(ids) == 1 else [8] * 30,  # closed by itself
        7: lambda ids: [4, EOS],  # ends before the budget
    }
    raw = ScriptedEngine(lambda ids: plans[ids[0]](ids))
    outs = vg.decode(vg.StepEngine(raw), [[5], [6], [7]], make_params=params, max_new_tokens=20, max_model_len=64,
                     budgets=[4, 4, 4], interruption=fi)  # fmt: skip
    a, b, c = outs
    assert a.interrupted and not a.finished
    assert a.tokens == [4] * 4 + phrase + [4] * 3
    assert a.sampled == [True] * 4 + [False] * 3 + [True] * 3
    assert len(a.logprobs) == len(a.versions) == len(a.tokens)
    cont = {rid: (ids, p) for rid, ids, p in raw.added}
    assert cont["wb0p1"][0] == [5] + [4] * 4 + phrase and cont["wb0p1"][1].max_tokens == 3
    assert cont["wb0p0"][1].max_tokens == 4
    assert not b.interrupted and b.tokens[:4] == [4, marker, 4, 4] and len(b.tokens) == 20
    assert cont["wb1p1"][0] == [6, 4, marker, 4, 4] and cont["wb1p1"][1].max_tokens == 16
    assert c.tokens == [4, EOS] and c.finished and "wb2p1" not in cont


def test_batch_engine_runs_queued_requests_with_llm_generate():
    calls = []

    class LLM:
        def generate(self, prompts, sps, use_tqdm):
            calls.append(len(prompts))
            res = [SimpleNamespace(token_ids=[4, EOS], logprobs=[{4: -0.1}, {EOS: -0.2}], finish_reason="stop")]
            return [SimpleNamespace(request_id="x", finished=True, outputs=res) for _ in prompts]

    outs = vg.decode(vg.BatchEngine(LLM()), [[5], [6]], make_params=params, max_new_tokens=4, max_model_len=64,
                     on_step=lambda: 9)  # fmt: skip
    assert calls == [2] and all(c.tokens == [4, EOS] and c.versions == [9, 9] and c.finished for c in outs)


# --- fp32 head / worker extension
UnquantizedEmbeddingMethod = type("UnquantizedEmbeddingMethod", (), {})  # vLLM's class name for a plain head
Fp8LinearMethod = type("Fp8LinearMethod", (), {})


class FakeLogitsProcessor:
    org_vocab_size = 5

    def _get_logits(self, hidden, lm_head, bias=None):
        return F.linear(hidden, lm_head.weight)[..., : self.org_vocab_size]  # model dtype, like vLLM

    def _gather_logits(self, logits):
        return logits


def test_fp32_head_patch_projects_in_float32_from_the_live_weight():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(8, 16, generator=g).bfloat16()  # vocab padded to 8, 5 real tokens
    head = SimpleNamespace(weight=weight, quant_method=UnquantizedEmbeddingMethod())
    hidden = torch.randn(3, 16, generator=g).bfloat16()
    lp = FakeLogitsProcessor()
    assert lp._get_logits(hidden, head).dtype == torch.bfloat16
    assert vg.patch_fp32_logits(lp) == "patched"
    out = lp._get_logits(hidden, head, None)
    assert out.dtype == torch.float32 and out.shape == (3, 5)
    torch.testing.assert_close(out, F.linear(hidden.float(), weight.float())[:, :5])
    weight.mul_(2)  # an in-place weight update is seen at once (no cached fp32 copy)
    torch.testing.assert_close(lp._get_logits(hidden, head, None), F.linear(hidden.float(), weight.float())[:, :5])
    quantized = SimpleNamespace(weight=weight, quant_method=Fp8LinearMethod())
    assert lp._get_logits(hidden, quantized, None).dtype == torch.bfloat16  # left to vLLM
    native = FakeLogitsProcessor()
    native.head_dtype = torch.float32
    assert vg.patch_fp32_logits(native) == "native" and "_get_logits" not in vars(native)


def test_worker_extension_loads_the_state_dict_into_the_running_model():
    got = []
    worker = SimpleNamespace(model_runner=SimpleNamespace(model=SimpleNamespace(load_weights=lambda weights: got.extend(weights))))
    sd = {"a.weight": torch.ones(2), "b.bias": torch.zeros(1)}
    assert vg.WorkbenchWorkerExtension.workbench_load_weights(worker, sd) == 2
    assert [k for k, _ in got] == ["a.weight", "b.bias"]


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
        return ["patched"] if name == "workbench_fp32_head" else [len(args[0])]

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

    mods = {name: types.ModuleType(name) for name in ("vllm", "vllm.engine", "vllm.engine.arg_utils", "vllm.inputs", "vllm.sampling_params")}
    mods["vllm"].LLM, mods["vllm"].SamplingParams, mods["vllm"].__version__ = FakeLLM, FakeSamplingParams, "0.11.0"
    mods["vllm.engine.arg_utils"].EngineArgs = FakeEngineArgs
    mods["vllm.inputs"].TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    mods["vllm.sampling_params"].RequestOutputKind = SimpleNamespace(CUMULATIVE="cumulative")
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # the constructor must force 0
    monkeypatch.setattr(FakeLLM, "step_api_works", True)
    monkeypatch.setattr(FakeLLM, "on_step", None)
    overrides = {"generation.backend": "vllm", "resources.generator_gpus": 1, "model.dtype": "float16", "generation.max_new_tokens": 6,
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
    gen = vg.VllmGenerator(cfg, rank=1)
    kw = gen.llm.kwargs
    assert kw["model"] == cfg.model.path and kw["dtype"] == "float16" and kw["seed"] == cfg.seed + 1000
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["hf_overrides"] == {"head_dtype": "float32"}
    longest = max(len(ex.prompt) for ex in task.train + task.val)  # one token per character
    assert kw["max_model_len"] == longest + cfg.generation.max_new_tokens + 1
    assert gen.llm.rpc[0] == ("workbench_fp32_head", (True, "float16")) and gen.fp32_head_mode == "patched"
    assert gen.engine_mode == "step" and vg.os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert tok.eos_token_id == EOS == gen.eos_id  # the scripted engine stops on EOS like vLLM does


def test_the_vllm_evaluator_rank_gets_a_valid_engine_seed(fake_vllm):
    cfg, _, _ = fake_vllm
    ev = vg.VllmGenerator(cfg, rank=-1, gpus=1)  # spawn_workers makes the evaluator rank -1
    assert 0 <= ev.llm.kwargs["seed"] < 2**31 and ev.llm.kwargs["seed"] != cfg.seed  # numpy refuses negative seeds
    m = ev.evaluate(None, 0, num_prompts=4, k=2, seed=0)
    assert m["val/prompts"] == 4 and ev.ping()["backend"] == "vllm"


def test_generate_returns_a_scored_chunk_and_applies_weight_pushes_between_steps(fake_vllm):
    cfg, task, tok = fake_vllm
    FakeLLM.respond = staticmethod(_respond_with(lambda text: task.train[0].answer if text == task.train[0].prompt else "9999", tok))
    gen = vg.VllmGenerator(cfg, 0)
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
    assert chunk.weight_swaps == 1 and len(loads) == 1 and torch.equal(loads[0][0]["w"], torch.ones(1))
    assert chunk.tokens_generated == sum(len(c.tokens) for g in chunk.groups for c in g.completions)
    sent = engine.added[-4:]
    assert len({p.seed for _, _, p in sent}) == 4
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
    gen = vg.VllmGenerator(cfg, 0)
    m = gen.evaluate({"w": torch.zeros(1)}, 4, num_prompts=4, k=2, seed=0)
    assert m["val/pass_rate"] == 1.0 and m["val/prompts"] == 4 and m["policy/version"] == 4
    assert gen.version == 4 and [n for n, _ in gen.llm.rpc][-1] == "workbench_load_weights"


def test_falls_back_to_llm_generate_when_the_step_api_fails(fake_vllm):
    cfg, task, tok = fake_vllm
    FakeLLM.respond = staticmethod(_respond_with(lambda text: "12", tok))
    FakeLLM.step_api_works = False
    gen = vg.VllmGenerator(cfg, 0)
    assert gen.engine_mode == "batch"
    gen.set_weights({"w": torch.ones(1)}, 2)
    chunk = gen.generate(0, [0, 1, 2], 2, seed=1)
    comps = [c for g in chunk.groups for c in g.completions]
    assert len(comps) == 6 and all(tok.decode(c.tokens[:-1]) == "12" and c.finished and set(c.versions) == {2} for c in comps)
    assert chunk.meta["engine_mode"] == "batch"


# --- real vLLM on a GPU
def _gpu_ready() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_ready(), reason="needs CUDA and vllm")
class TestOnGpu:
    PHRASE = "00="

    @pytest.fixture(scope="class")
    def setup(self, tmp_path_factory):
        from transformers import GPT2Config, GPT2LMHeadModel

        from workbench.engine.model.builtin import build_char_tokenizer, task_alphabet
        from workbench.tasks.base import load_task

        lc = {"phrase": self.PHRASE, "end_think": "=", "budget_min": 4, "budget_max": 6, "answer_budget": 3}
        overrides = {"generation.backend": "vllm", "resources.generator_gpus": 1, "model.dtype": "float16",
                     "generation.max_new_tokens": 16, "generation.vllm_gpu_memory_utilization": 0.3, "task.difficulty": 1,
                     "task.num_train": 60, "task.num_val": 20, "eval.num_prompts": 8,
                     **{f"recipe.length_control.{k}": v for k, v in lc.items()}}  # fmt: skip
        mp = pytest.MonkeyPatch()
        mp.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # before vllm reads its environment
        mp.setattr(vg.VllmGenerator, "enforce_eager", True)  # fast start-up; CUDA graphs are not what is tested
        import vllm
        from vllm.engine.arg_utils import EngineArgs

        fields = {f.name for f in dataclasses.fields(EngineArgs)}
        if "logprobs_mode" in fields and vg._version_at_least(vllm.__version__, "0.10.2"):
            overrides["generation.temperature"] = 0.8  # exercise processed (temperature-scaled) log-probs
        task = load_task(run_config_from_dict({}, overrides).task)
        tok = build_char_tokenizer(task_alphabet(task))
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=128, n_layer=2, n_head=2,
                                           bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                           pad_token_id=tok.pad_token_id))  # fmt: skip
        d = tmp_path_factory.mktemp("tiny-gpt2")
        model.save_pretrained(d)
        tok.save_pretrained(d)
        cfg = run_config_from_dict({}, {**overrides, "model.path": str(d)})
        gen = vg.VllmGenerator(cfg, 0)
        yield cfg, gen, model
        gen.shutdown()
        mp.undo()

    def _reference_logprobs(self, model, cfg, completions):
        from workbench.rl.head import causal_lm_forward, token_logprobs

        ref = model.to("cuda", torch.float16).eval()
        out = []
        for c in completions:
            ids = torch.tensor([c.prompt_tokens + c.tokens], device="cuda")
            with torch.no_grad():
                logits, _ = causal_lm_forward(ref, ids, torch.ones_like(ids), fp32_head=True)
            lp = token_logprobs(logits[:, :-1], ids[:, 1:], temperature=cfg.generation.temperature)[0]
            out.append(lp[len(c.prompt_tokens) - 1 :].cpu())
        return out

    def test_chunk_types_and_logprobs_match_the_trainer_forward(self, setup):
        cfg, gen, model = setup
        assert gen.fp32_head_mode in ("native", "patched") and gen.engine_mode in ("step", "batch")
        chunk = gen.generate(0, [0, 1, 2], 4, seed=5)
        assert len(chunk.groups) == 3 and all(len(g.completions) == 4 for g in chunk.groups)
        comps = [c for g in chunk.groups for c in g.completions]
        for g in chunk.groups:
            assert all(isinstance(x, bool) for x in g.correct) and set(g.rewards) <= {1.0, -1.0}
        for c in comps:
            n = len(c.tokens)
            assert 1 <= n <= cfg.generation.max_new_tokens and len(c.logprobs) == len(c.versions) == len(c.sampled) == n
            assert all(isinstance(t, int) for t in c.tokens) and all(v == 0 for v in c.versions)
        ref = self._reference_logprobs(model, cfg, comps)
        for c, r in zip(comps, ref):
            mask = torch.tensor(c.sampled)
            torch.testing.assert_close(torch.tensor(c.logprobs)[mask], r[mask], atol=2e-2, rtol=0)

    def test_forced_interruption_marks_the_phrase_unsampled(self, setup):
        cfg, gen, _ = setup
        phrase = gen.tokenizer.encode(self.PHRASE, add_special_tokens=False)
        comps = [c for g in gen.generate(1, list(range(8)), 4, seed=9).groups for c in g.completions]
        for c in [c for c in comps if c.interrupted]:
            at = c.sampled.index(False)
            assert 4 <= at <= 6 and c.tokens[at : at + len(phrase)] == phrase
            assert c.sampled[at + len(phrase) :] == [True] * (len(c.tokens) - at - len(phrase))
            assert len(c.tokens) - at - len(phrase) <= 3

    def test_weight_update_changes_outputs_without_restarting(self, setup):
        cfg, gen, model = setup
        llm = gen.llm
        before = gen.generate(2, [0, 1], 4, seed=3)
        new = {k: v.detach().float().cpu() * 1.5 for k, v in model.state_dict().items()}
        model.load_state_dict(new)
        gen.set_weights(new, 1)
        after = gen.generate(3, [0, 1], 4, seed=3)
        assert gen.llm is llm and gen.ping()["version"] == 1 and after.weight_swaps == 1
        comps = [c for g in after.groups for c in g.completions]
        assert all(set(c.versions) == {1} for c in comps)
        old = [c.logprobs for g in before.groups for c in g.completions]
        assert old != [c.logprobs for c in comps]
        for c, r in zip(comps, self._reference_logprobs(model, cfg, comps)):
            mask = torch.tensor(c.sampled)
            torch.testing.assert_close(torch.tensor(c.logprobs)[mask], r[mask], atol=2e-2, rtol=0)

    def test_in_flight_push_is_credited_per_token(self, setup):
        cfg, gen, model = setup
        if gen.engine_mode != "step":
            pytest.skip("this vLLM runs in batch mode: versions are per call")
        calls, v0 = {"n": 0}, gen.version
        apply = gen._apply_pending

        def push_on_third_step():
            calls["n"] += 1
            if calls["n"] == 5:  # calls 1-2: start of generate and of the decode; calls 3-5: before engine steps 1-3
                gen.set_weights({k: v.detach().float().cpu() for k, v in model.state_dict().items()}, v0 + 1)
            return apply()

        gen._apply_pending = push_on_third_step
        try:
            chunk = gen.generate(4, [0, 1], 4, seed=4)
        finally:
            del gen._apply_pending
        long = [c for g in chunk.groups for c in g.completions if len(c.tokens) >= 4]
        assert all(c.versions == sorted(c.versions) for g in chunk.groups for c in g.completions)
        assert long and all(c.versions[:2] == [v0, v0] and c.versions[-1] == v0 + 1 for c in long)
