"""vLLM generator backend for GPU clusters: same interface and return types as the torch `Generator`.

Chosen with `generation.backend: vllm` (`workers.generator_class`). Targets vLLM >= 0.10.2 (V1).

    gen = VllmGenerator(cfg, rank=0)          # one vllm.LLM on cfg.model.path (local HF dir / builtin)
    chunk = gen.generate(chunk_id, prompt_ids, n_per_prompt=8, seed=1)      # -> Chunk
    gen.set_weights(trainer_state_dict, version=3)   # slot; loaded between two engine steps
    gen.evaluate(None, 3, num_prompts=200, k=4, seed=0)                     # Evaluator metrics

- Log-probs: one request per sequence, temperature T, top_p=1, top_k off, logprobs=1, engine
  logprobs_mode="processed_logprobs": the sampled token's log softmax(logits / T), as the trainer
  computes it. Older vLLM (no logprobs_mode) returns pre-temperature log-probs: only T=1 allowed.
- In-flight updates (PipelineRL): the engine core runs in-process and `generate` drives
  `llm.llm_engine.add_request/step`; between steps a pending push is copied into the running
  model (`collective_rpc` -> `model_runner.model.load_weights`), the KV cache is kept, and each
  token records the version that sampled it. If the step API fails a start-up probe, `engine_mode`
  is "batch": `llm.generate` per phase, weights swap between calls, versions are per call.
- FP32 head: `hf_overrides={"head_dtype": "float32"}` where vLLM honours it ("native"), else each
  `LogitsProcessor._get_logits` is patched to project in fp32 ("patched"); see `fp32_head_mode`.
- Forced interruption: phase 1 samples up to the thinking budget; `force_after` decides the phrase
  (appended with sampled=False), then a continuation request samples the answer.
- Prompt caching is off (a cached prefix would carry KV from older weights into new requests).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

import torch
import torch.nn.functional as F

from workbench.config import RunConfig
from workbench.engine.rollout.worker import RolloutWorker
from workbench.engine.model.sampling import Completion
from workbench.errors import UserError

log = logging.getLogger(__name__)

EXTENSION = "workbench.engine.rollout.vllm.backend.WorkbenchWorkerExtension"
_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


# --- worker side (vLLM process)
def patch_fp32_logits(lp: Any) -> str:
    """Make one vLLM `LogitsProcessor` project to logits in float32; returns "native" or "patched".

    Mirrors vLLM's `_get_logits` (project, gather over TP ranks, drop vocab padding) with an fp32
    projection from the head's weight on the fly: a tied embedding is untouched, updates seen.
    """
    if getattr(lp, "head_dtype", None) == torch.float32:
        return "native"  # vLLM with head_dtype support for generation models (hf_overrides)
    original = lp._get_logits

    def _get_logits(self, hidden_states, lm_head, embedding_bias=None):
        weight = getattr(lm_head, "weight", None)
        quant = type(getattr(lm_head, "quant_method", None)).__name__
        if weight is None or quant not in ("UnquantizedEmbeddingMethod", "NoneType"):
            return original(hidden_states, lm_head, embedding_bias)
        bias = embedding_bias.float() if embedding_bias is not None else None
        logits = None
        if getattr(self, "_wb_mm_out_dtype", True) and hidden_states.is_cuda and hidden_states.dtype != torch.float32:
            try:  # fp32 accumulation without materialising an fp32 copy of the weight
                flat = hidden_states.reshape(-1, hidden_states.shape[-1])
                logits = torch.mm(flat, weight.t(), out_dtype=torch.float32).reshape(*hidden_states.shape[:-1], -1)
                logits = logits + bias if bias is not None else logits
            except (TypeError, RuntimeError):  # torch without mm(out_dtype=...): cast instead, from now on
                self._wb_mm_out_dtype, logits = False, None
        if logits is None:
            logits = F.linear(hidden_states.float(), weight.float(), bias)
        logits = self._gather_logits(logits)
        if logits is not None:
            logits = logits[..., : self.org_vocab_size]
        return logits

    lp._get_logits = types.MethodType(_get_logits, lp)
    return "patched"


class WorkbenchWorkerExtension:
    """Mixed into vLLM's GPU worker (`worker_extension_cls`); called through `llm.collective_rpc`."""

    def workbench_load_weights(self, weights: dict[str, torch.Tensor]) -> int:
        """Copy a Hugging Face state dict into the running model in place (CUDA graphs stay valid)."""
        model = self.model_runner.model
        model.load_weights(weights=iter(weights.items()))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return len(weights)

    def workbench_fp32_head(self, enable: bool, dtype: str) -> str:
        from vllm.model_executor.layers.logits_processor import LogitsProcessor

        if not enable:
            return "off"
        if dtype == "float32":
            return "float32-model"
        model = self.model_runner.model
        modes = {patch_fp32_logits(m) for m in model.modules() if isinstance(m, LogitsProcessor)}
        if not modes:
            return "unavailable (no LogitsProcessor found)"
        return "native" if modes == {"native"} else "patched"


# --- engine adapters + decode loop
def _tokens_prompt(ids: list[int]) -> dict:
    return {"prompt_token_ids": ids}  # the dict form of vllm.inputs.TokensPrompt (a TypedDict)


class StepEngine:
    """Adapter over the V1 `LLMEngine` step API: one `step()` = one scheduler iteration."""

    def __init__(self, llm_engine: Any, make_prompt: Callable[[list[int]], Any] = _tokens_prompt):
        self.engine, self.make_prompt = llm_engine, make_prompt
        self._ids: dict[str, str] = {}  # id seen in outputs -> our id
        self._aliases: dict[str, list[str]] = {}

    def add(self, req_id: str, prompt_ids: list[int], params: Any) -> None:
        ret = self.engine.add_request(req_id, self.make_prompt(list(prompt_ids)), params)
        self._aliases[req_id] = [req_id]
        if isinstance(ret, str) and ret != req_id:  # newer vLLM may return an internal id (external + suffix)
            self._aliases[req_id].append(ret)
        for a in self._aliases[req_id]:
            self._ids[a] = req_id

    def has_unfinished(self) -> bool:
        return bool(self.engine.has_unfinished_requests())

    def _resolve(self, rid: str) -> Optional[str]:
        if rid in self._ids:
            return self._ids[rid]
        base = rid.rsplit("-", 1)[0]  # internal ids are "<external>-<random suffix>"
        return self._ids.get(base)

    def step(self) -> list[tuple[str, Any]]:
        out = []
        for o in self.engine.step():
            rid = self._resolve(o.request_id)
            if rid is None:
                continue
            out.append((rid, o))
            if o.finished:
                for a in self._aliases.pop(rid, []):
                    self._ids.pop(a, None)
        return out


class BatchEngine:
    """Fallback adapter: every `step()` runs all queued requests to completion with `llm.generate`."""

    def __init__(self, llm: Any, make_prompt: Callable[[list[int]], Any] = _tokens_prompt):
        self.llm, self.make_prompt = llm, make_prompt
        self._queue: list[tuple[str, list[int], Any]] = []

    def add(self, req_id: str, prompt_ids: list[int], params: Any) -> None:
        self._queue.append((req_id, list(prompt_ids), params))

    def has_unfinished(self) -> bool:
        return bool(self._queue)

    def step(self) -> list[tuple[str, Any]]:
        batch, self._queue = self._queue, []
        outs = self.llm.generate([self.make_prompt(p) for _, p, _ in batch], [sp for _, _, sp in batch], use_tqdm=False)
        return [(rid, o) for (rid, _, _), o in zip(batch, outs)]


def sampled_logprob(entry: Any, token: int) -> float:
    """The sampled token's log-prob from one position of vLLM's `logprobs` ({id: Logprob})."""
    if entry is None:
        raise RuntimeError("vLLM returned no log-probs for a position (was logprobs set in SamplingParams?)")
    value = entry.get(token) if hasattr(entry, "get") else entry[token]
    if value is None:
        raise RuntimeError(f"vLLM's log-probs at a position do not include the sampled token {token}")
    return float(getattr(value, "logprob", value))


@dataclass
class _Seq:
    prompt: list[int]
    completion: Completion
    budget: Optional[int]  # thinking budget (forced interruption); None: a single phase
    phase: str = "think"  # "think" (up to the budget) or "answer"
    seen: int = 0  # tokens of the current request already recorded


def decode(
    engine: Any, prompts: list[list[int]], *, make_params: Callable[[int, int, int], Any], max_new_tokens: int,
    max_model_len: int, budgets: Optional[list[int]] = None, interruption: Any = None,
    on_step: Optional[Callable[[], int]] = None, version: int = 0, id_prefix: str = "wb",
) -> list[Completion]:  # fmt: skip
    """Generate one completion per prompt through `engine` (StepEngine / BatchEngine interface).

    make_params(max_tokens, index, part) -> SamplingParams; part 0 = first request of sequence
    `index`, 1 = its continuation after the thinking budget. `on_step()` runs before every step
    (it may load new weights) and returns the version that the step's tokens are credited to.
    """
    seqs = [_Seq(list(p), Completion(prompt_tokens=list(p)), None if budgets is None else int(budgets[i])) for i, p in enumerate(prompts)]
    by_id: dict[str, int] = {}
    running: set[str] = set()

    def submit(i: int, prompt: list[int], max_tokens: int, part: int) -> None:
        rid = f"{id_prefix}{i}p{part}"
        by_id[rid] = i
        running.add(rid)
        seqs[i].seen = 0
        engine.add(rid, prompt, make_params(max_tokens, i, part))

    for i, s in enumerate(seqs):
        if len(s.prompt) >= max_model_len:
            raise UserError(f"a prompt has {len(s.prompt)} tokens; the vLLM engine's max_model_len is {max_model_len}")
        first = max_new_tokens if s.budget is None else min(s.budget, max_new_tokens)
        submit(i, s.prompt, min(first, max_model_len - len(s.prompt)), 0)

    while engine.has_unfinished():
        if on_step is not None:
            version = on_step()
        for rid, out in engine.step():
            i = by_id[rid]
            s, c = seqs[i], seqs[i].completion
            res = out.outputs[0]
            toks = list(res.token_ids)
            for j in range(s.seen, len(toks)):
                c.tokens.append(int(toks[j]))
                c.logprobs.append(sampled_logprob(res.logprobs[j] if res.logprobs is not None else None, int(toks[j])))
                c.versions.append(version)
                c.sampled.append(True)
            s.seen = len(toks)
            if not out.finished:
                continue
            running.discard(rid)
            reason = res.finish_reason
            if reason == "stop":
                c.finished = True
            elif reason != "length":
                raise RuntimeError(f"vLLM request {rid} ended with finish_reason={reason!r}")
            elif s.budget is not None and s.phase == "think" and len(c.tokens) >= s.budget:
                s.phase = "answer"
                phrase = interruption.force_after(c.tokens, s.budget)
                room = max_new_tokens - len(c.tokens)
                if phrase:
                    n = len(phrase)
                    c.tokens += phrase
                    c.logprobs += [0.0] * n
                    c.versions += [version] * n
                    c.sampled += [False] * n
                    c.interrupted = True
                    room = min(interruption.max_answer_tokens, room - n)
                context = s.prompt + c.tokens
                room = min(room, max_model_len - len(context))
                if room > 0:
                    submit(i, context, room, 1)
    if running:
        raise RuntimeError(f"vLLM finished without a final output for {len(running)} request(s), e.g. {min(running)}")
    return [s.completion for s in seqs]


# --- engine construction
def build_engine_kwargs(
    cfg: RunConfig, model_dir: str, engine_fields: Iterable[str], *, dtype: str, seed: int,
    max_model_len: Optional[int] = None, enforce_eager: bool = False, vllm_version: str = "",
) -> dict[str, Any]:  # fmt: skip
    """Keyword arguments for `vllm.LLM`, restricted to what the installed version accepts."""
    fields = set(engine_fields)
    # "processed_logprobs" includes temperature only since vLLM 0.10.2 (PR #22387).
    processed = "logprobs_mode" in fields and _version_at_least(vllm_version, "0.10.2")
    g = cfg.generation
    if g.vllm_tensor_parallel_size < 1:
        raise UserError(f"generation.vllm_tensor_parallel_size must be >= 1, got {g.vllm_tensor_parallel_size}")
    if not 0.0 < g.vllm_gpu_memory_utilization <= 1.0:
        raise UserError(f"generation.vllm_gpu_memory_utilization must be in (0, 1], got {g.vllm_gpu_memory_utilization}")
    if "worker_extension_cls" not in fields:
        raise UserError("the installed vLLM is too old for in-place weight updates (no worker_extension_cls); install vllm>=0.10.2")
    if not processed and abs(g.temperature - 1.0) > 1e-9:
        raise UserError(
            f"the installed vLLM ({vllm_version or '?'}) returns log-probs before temperature scaling, so with "
            f"generation.temperature={g.temperature} they would not match the trainer's; set generation.temperature=1 "
            "or install vllm>=0.10.2"
        )
    kw: dict[str, Any] = dict(
        model=model_dir, tokenizer=model_dir, dtype=dtype, tensor_parallel_size=g.vllm_tensor_parallel_size,
        gpu_memory_utilization=g.vllm_gpu_memory_utilization, seed=seed, enforce_eager=enforce_eager,
        worker_extension_cls=EXTENSION,
    )  # fmt: skip
    if max_model_len is not None:
        kw["max_model_len"] = int(max_model_len)
    if cfg.recipe.fp32_head and dtype != "float32":
        kw["hf_overrides"] = {"head_dtype": "float32"}
    if g.vllm_tensor_parallel_size > 1:
        kw["distributed_executor_backend"] = "mp"  # workers as child processes of this actor
    optional = {
        "enable_prefix_caching": False,  # a cached prefix would carry KV from older weights into new requests
        "async_scheduling": False,  # outputs must belong to the step that produced them (per-token versions)
        "generation_config": "vllm",  # ignore the checkpoint's sampling defaults (top_k/top_p) and extra stop ids
        "max_num_seqs": max(1, g.max_batch_sequences),
        "logprobs_mode": "processed_logprobs" if processed else "raw_logprobs",  # processed: after temperature
    }
    kw.update({k: v for k, v in optional.items() if k in fields})
    return kw


def _version_at_least(version: str, minimum: str) -> bool:
    """True when `version` >= `minimum`, or when it cannot be parsed (a source build: trust it)."""
    from packaging.version import InvalidVersion, Version
    try:
        return Version(version) >= Version(minimum)
    except InvalidVersion:
        return True


class VllmGenerator(RolloutWorker):
    """Generator (and Evaluator) on a vLLM engine; see the module docstring."""

    enforce_eager = False  # CUDA graphs on; tests set True for a fast start-up

    def __init__(self, cfg: RunConfig, rank: int = 0, gpus: Optional[float] = None):
        # Before importing vllm: an in-process engine core (exact per-token versions, weights by reference).
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
            log.warning("VLLM_ENABLE_V1_MULTIPROCESSING overridden to 0: per-token versions need an in-process engine core")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            import vllm  # noqa: F401 - fail before loading the task and tokenizer
        except ImportError:
            raise UserError(
                "generation.backend=vllm needs the vllm package, which is not installed "
                "(pip install -r env/requirements-gpu.txt on a Linux machine with CUDA GPUs), or use generation.backend=torch"
            ) from None
        if not torch.cuda.is_available():
            raise UserError("generation.backend=vllm needs a CUDA GPU, but torch sees none; use generation.backend=torch")
        if (cfg.resources.generator_gpus if gpus is None else gpus) <= 0:
            raise UserError("generation.backend=vllm needs GPUs for its generators: set resources.generator_gpus > 0")
        super().__init__(cfg, rank, gpus)

    def _start(self, gpus: float) -> None:
        import vllm
        from vllm import SamplingParams
        from vllm.engine.arg_utils import EngineArgs
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        from workbench.engine.model.devices import trainer_precision
        from workbench.engine.model.hf_dir import load_tokenizer
        from workbench.engine.model.load import policy_dir

        cfg = self.cfg
        self.device = "cuda"
        model_dir = policy_dir(cfg.model, self.task)  # vLLM loads the weights; only the tokenizer is read here
        self.tokenizer = load_tokenizer(model_dir, chat_template=self.task.chat_template)
        dtype = _DTYPES[trainer_precision(cfg.model.dtype, "cuda").compute]  # the trainer's compute dtype
        self.vllm_version = getattr(vllm, "__version__", "")
        fields = [f.name for f in dataclasses.fields(EngineArgs)]
        seed = (cfg.seed + 1000 * self.rank) % (2**31 - 1)  # the evaluator is rank -1; vLLM seeds numpy (needs >= 0)
        kwargs = build_engine_kwargs(cfg, str(model_dir), fields, dtype=dtype, seed=seed, max_model_len=self._needed_model_len(),
                                     enforce_eager=self.enforce_eager or cfg.generation.vllm_enforce_eager,
                                     vllm_version=self.vllm_version)  # fmt: skip
        try:
            self.llm = vllm.LLM(**kwargs)
        except ValueError as e:
            if "max_model_len" in str(e):
                raise UserError(
                    f"vLLM cannot fit the longest task prompt + generation.max_new_tokens "
                    f"({kwargs['max_model_len']} tokens) into {model_dir}: {e}"
                ) from None
            raise
        self.logprobs_mode = kwargs.get("logprobs_mode", "raw_logprobs")
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.fp32_head_mode = self.llm.collective_rpc("workbench_fp32_head", args=(bool(cfg.recipe.fp32_head), dtype))[0]
        self._SamplingParams, self._output_kind = SamplingParams, RequestOutputKind.CUMULATIVE
        self._top_k_off = SamplingParams().top_k  # -1 or 0 depending on the version: no truncation
        self._make_prompt = lambda ids: TokensPrompt(prompt_token_ids=ids)
        self._calls = 0
        self.engine_mode = "step" if self._probe_step_api() else "batch"
        log.info("vLLM %s generator %d: engine_mode=%s fp32_head=%s logprobs=%s dtype=%s", self.vllm_version,
                 self.rank, self.engine_mode, self.fp32_head_mode, self.logprobs_mode, dtype)  # fmt: skip

    def _needed_model_len(self) -> int:
        """Longest task prompt (as the generator encodes it) + max_new_tokens: keeps the KV-cache
        requirement to what runs need."""
        longest = max(
            len(self._prompt_ids(split, i)) for split in ("train", "val") for i in range(len(self._examples(split)))
        )
        return longest + self.cfg.generation.max_new_tokens + 1

    def _probe_step_api(self) -> bool:
        try:
            engine = StepEngine(self.llm.llm_engine, self._make_prompt)
            out = decode(engine, [self._prompt_ids("train", 0)], make_params=lambda m, i, p: self._params(1, 0),
                         max_new_tokens=1, max_model_len=self.max_model_len, id_prefix="probe")  # fmt: skip
            return len(out[0].tokens) == 1
        except Exception as e:  # noqa: BLE001 - any failure of the internal API: use LLM.generate
            log.warning("vLLM step API unusable (%s: %s); falling back to per-call weight updates", type(e).__name__, e)
            try:  # leave no half-run probe request behind for LLM.generate to return
                while self.llm.llm_engine.has_unfinished_requests():
                    self.llm.llm_engine.step()
            except Exception:  # noqa: BLE001
                pass
            return False

    def _params(self, max_tokens: int, seed: int) -> Any:
        # Full softmax (no top-k/top-p/min-p). logprobs=1: the sampled token's entry is always included.
        # stop_token_ids: stop on the EOS of the tokenizer the workbench scores with.
        return self._SamplingParams(
            n=1, temperature=self.cfg.generation.temperature, top_p=1.0, top_k=self._top_k_off, min_p=0.0,
            max_tokens=max(1, int(max_tokens)), logprobs=1, seed=int(seed) % (2**31 - 1), detokenize=False,
            output_kind=self._output_kind, stop_token_ids=[int(self.tokenizer.eos_token_id)],
        )  # fmt: skip

    def _load_weights(self, state: dict[str, torch.Tensor]) -> None:
        self.llm.collective_rpc("workbench_load_weights", args=(state,))

    def _prompts_per_call(self, n_per_prompt: int) -> int:
        return 1 << 30  # one engine run per call: vLLM batches (max_num_seqs) and schedules itself

    def _describe(self) -> dict[str, Any]:
        return {"backend": "vllm", "vllm_version": self.vllm_version, "engine_mode": self.engine_mode, "fp32_head": self.fp32_head_mode}

    def _decode(self, prompts: list[list[int]], *, seed: int, budgets: Optional[list[int]], on_step: Any) -> list[Completion]:
        self._calls += 1
        if self.engine_mode == "step":
            engine = StepEngine(self.llm.llm_engine, self._make_prompt)
        else:
            engine = BatchEngine(self.llm, self._make_prompt)
        return decode(
            engine, prompts, make_params=lambda m, i, part: self._params(m, seed * 1_000_003 + 2 * i + part),
            max_new_tokens=self.cfg.generation.max_new_tokens, max_model_len=self.max_model_len, budgets=budgets,
            interruption=self._interruption, on_step=on_step, version=self.version, id_prefix=f"c{self._calls}s",
        )  # fmt: skip

    def _release(self) -> None:
        self.llm = None
        gc.collect()
        torch.cuda.empty_cache()
