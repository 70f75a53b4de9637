"""Generator workers (torch backend): sample rollout groups, score them, take weight updates in flight.

`Generator` runs as a Ray actor with two concurrency groups: "compute" (one generate/evaluate
call at a time) and "io" (weight pushes, pings). A weight push lands in a slot; the decode loop
picks it up between two decode steps, so sequences in flight continue with the new weights and
their old KV cache (PipelineRL). Each token records the version that produced it.
`Evaluator` is the same worker used for validation (mean pass rate over k samples per prompt).

The vLLM backend with the same interface lives in vllm_generator.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Optional

import numpy as np
import torch

from workbench.config import RunConfig
from workbench.engine.logs import quiet_hf
from workbench.engine.rollouts import Chunk, Group
from workbench.engine.sampling import sample_batch
from workbench.engine.devices import resolve_device, weights_dtype
from workbench.engine.weights import Weights, as_state_dict

try:  # concurrency groups are a Ray feature; the class stays usable without Ray (tests)
    import ray

    _io = ray.method(concurrency_group="io")
    _compute = ray.method(concurrency_group="compute")
except ImportError:  # pragma: no cover
    _io = _compute = lambda f: f  # noqa: E731

CONCURRENCY_GROUPS = {"io": 1, "compute": 1}


def reward_for(correct: bool) -> float:
    """ScaleRL rewards: +1 correct, -1 incorrect."""
    return 1.0 if correct else -1.0


class Generator:
    def __init__(self, cfg: RunConfig, rank: int = 0, gpus: Optional[float] = None):
        from workbench.engine.models import load_policy
        from workbench.tasks.base import load_task

        self.cfg = cfg
        quiet_hf()
        self.rank = rank
        torch.set_num_threads(cfg.resources.torch_threads)
        gpus = cfg.resources.generator_gpus if gpus is None else gpus
        self.device = resolve_device(gpus)
        dtype = weights_dtype(cfg.model.dtype, self.device)
        self.task = load_task(cfg.task)
        self.model, self.tokenizer = load_policy(cfg.model, self.task, device=self.device, dtype=dtype, progress=False)
        self.model.eval()
        self._init_bookkeeping()

    def _init_bookkeeping(self) -> None:
        """State every backend shares: ids, the weight slot, prompt cache, length control."""
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id
        self.version = 0
        self._pending: Optional[tuple[Weights, int]] = None
        self._lock = threading.Lock()
        self._swaps = 0
        self._prompt_cache: dict[tuple[str, int], list[int]] = {}
        self._interruption = None
        lc = self.cfg.recipe.length_control
        if lc.type == "interrupt":
            from workbench.rl.length import ForcedInterruption

            self._interruption = ForcedInterruption.from_config(lc, self.cfg.generation.max_new_tokens, self.tokenizer)

    # -- weights (io group: runs while a generate call is decoding) ------------------------
    @_io
    def set_weights(self, weights: Weights, version: int) -> int:
        with self._lock:
            if self._pending is None or version > self._pending[1]:
                self._pending = (weights, version)
        return version

    @_io
    def ping(self) -> dict[str, Any]:
        return {"rank": self.rank, "version": self.version, "pid": __import__("os").getpid()}

    def _apply_pending(self) -> int:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None and pending[1] > self.version:
            self.model.load_state_dict(as_state_dict(pending[0]))
            self.version = pending[1]
            self._swaps += 1
        return self.version

    # -- sampling ------------------------------------------------------------------------
    def _prompt_ids(self, split: str, prompt_id: int) -> list[int]:
        key = (split, prompt_id)
        if key not in self._prompt_cache:
            ex = (self.task.train if split == "train" else self.task.val)[prompt_id]
            self._prompt_cache[key] = self.tokenizer.encode(ex.prompt, add_special_tokens=False)
        return self._prompt_cache[key]

    def _score(self, split: str, prompt_id: int, completion_tokens: list[int]) -> bool:
        from workbench.tasks.base import safe_check

        ex = (self.task.train if split == "train" else self.task.val)[prompt_id]
        if completion_tokens and completion_tokens[-1] == self.eos_id:
            completion_tokens = completion_tokens[:-1]
        text = self.tokenizer.decode(completion_tokens, skip_special_tokens=True)
        return bool(safe_check(self.task.checker, text, ex.answer, example_id=ex.id))

    def _sample(self, split: str, prompt_ids: list[int], n: int, seed: int, in_flight: bool):
        prompts = [self._prompt_ids(split, p) for p in prompt_ids for _ in range(n)]
        gen = torch.Generator(device=self.device).manual_seed(seed)
        interruptions = None
        if self._interruption is not None and split == "train":
            rng = torch.Generator().manual_seed(seed + 1)
            interruptions = [self._interruption.start(self._interruption.draw_budget(rng)) for _ in prompts]
        if in_flight:
            self._apply_pending()
        return sample_batch(
            self.model,
            prompts,
            max_new_tokens=self.cfg.generation.max_new_tokens,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            temperature=self.cfg.generation.temperature,
            fp32_head=self.cfg.recipe.fp32_head,
            generator=gen,
            on_step=self._apply_pending if in_flight else None,
            version=self.version,
            interruptions=interruptions,
        )

    @_compute
    def generate(
        self, chunk_id: int, prompt_ids: list[int], n_per_prompt: int, seed: int, in_flight: bool = True
    ) -> Chunk:
        """Sample `n_per_prompt` completions for each training prompt.

        in_flight=True (PipelineRL): weights pushed meanwhile are taken between decode steps.
        in_flight=False: the whole chunk uses the weights in force when it starts.
        """
        t0 = time.perf_counter()
        swaps0 = self._swaps
        self._apply_pending()
        outs = []
        step = max(1, self.cfg.generation.max_batch_sequences // n_per_prompt)
        for s in range(0, len(prompt_ids), step):
            outs += self._sample("train", prompt_ids[s : s + step], n_per_prompt, seed + s, in_flight=in_flight)
        return self._make_chunk(chunk_id, prompt_ids, n_per_prompt, outs, t0, swaps0)

    def _make_chunk(
        self, chunk_id: int, prompt_ids: list[int], n_per_prompt: int, outs: list, t0: float, swaps0: int,
        meta: Optional[dict] = None,
    ) -> Chunk:  # fmt: skip
        """Score the completions (prompt-major order) into groups; shared by every backend."""
        groups = []
        for gi, pid in enumerate(prompt_ids):
            comps = outs[gi * n_per_prompt : (gi + 1) * n_per_prompt]
            correct = [self._score("train", pid, c.tokens) for c in comps]
            groups.append(Group(pid, chunk_id, comps, correct, [reward_for(c) for c in correct]))
        return Chunk(
            chunk_id=chunk_id,
            groups=groups,
            generator_rank=self.rank,
            gen_seconds=time.perf_counter() - t0,
            tokens_generated=sum(len(c.tokens) for c in outs),
            prompt_tokens=sum(len(c.prompt_tokens) for c in outs),
            weight_swaps=self._swaps - swaps0,
            meta=meta or {},
        )


class Evaluator(Generator):
    """Validation worker: sampled mean pass rate over k generations per held-out prompt."""

    @_compute
    def evaluate(self, weights: Optional[Weights], version: int, num_prompts: int, k: int, seed: int) -> dict[str, float]:
        t0 = time.perf_counter()
        if weights is not None:
            self.model.load_state_dict(as_state_dict(weights))
            self.version = version
        ids = list(range(min(num_prompts, len(self.task.val))))
        per_prompt = []
        tokens = 0
        step = max(1, self.cfg.generation.max_batch_sequences // k)
        for s in range(0, len(ids), step):
            batch = ids[s : s + step]
            outs = self._sample("val", batch, k, seed + s, in_flight=False)
            tokens += sum(len(c.tokens) for c in outs)
            for gi, pid in enumerate(batch):
                comps = outs[gi * k : (gi + 1) * k]
                per_prompt.append(np.mean([self._score("val", pid, c.tokens) for c in comps]))
        per_prompt = np.asarray(per_prompt)
        return {
            "val/pass_rate": float(per_prompt.mean()),
            # standard error over prompts: the noise a curve fit should expect at this point
            "val/pass_rate_se": float(per_prompt.std(ddof=1) / np.sqrt(len(per_prompt))) if len(per_prompt) > 1 else 0.0,
            "val/pass_at_k": float((per_prompt > 0).mean()),
            "val/prompts": float(len(per_prompt)),
            "val/samples_per_prompt": float(k),
            "val/tokens": float(tokens),
            "time/eval": time.perf_counter() - t0,
            "policy/version": float(version),
        }
