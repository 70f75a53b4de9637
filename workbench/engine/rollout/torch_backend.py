"""The torch rollout backend: `Generator` (training rollouts) and `Evaluator` (validation).

Both are `RolloutWorker`s (worker.py: bookkeeping, scoring, chunks, evaluation) that
sample with `sampling.sample_batch` on a transformers model held in this process. A weight push
lands in a slot; the decode loop picks it up between two decode steps, so sequences in flight
continue with the new weights and their old KV cache (PipelineRL). Each token records the
version that produced it. They run as the Ray actors `ray::Generator` and `ray::Evaluator`.

    gen = Generator(**generator_parts(cfg), rank=0)      # its config parts: run/actors.generator_parts
    chunk = gen.generate(chunk_id=0, prompt_ids=[0, 1, 2], n_per_prompt=4, seed=3)

The vLLM backend with the same interface lives in vllm/backend.py.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from workbench.engine.model.devices import resolve_device, weights_dtype
from workbench.engine.model.lora import apply_lora, load_adapter
from workbench.engine.rollout.worker import RolloutWorker
from workbench.engine.model.sampling import Completion, sample_batch


class Generator(RolloutWorker):
    """Rollouts from a transformers model in this process (CPU or one GPU)."""

    def _start(self, gpus: float) -> None:
        from workbench.engine.model.load import load_policy

        self.device = resolve_device(gpus)
        dtype = weights_dtype(self.model_cfg.dtype, self.device)
        self.model, self.tokenizer = load_policy(self.model_cfg, self.task, device=self.device, dtype=dtype, progress=False)
        if self.model_cfg.lora is not None:  # the trainer's wrapping: its pushes are the adapters alone
            self.model = apply_lora(self.model, self.model_cfg.lora)
        self.model.eval()

    def _load_weights(self, state: dict[str, torch.Tensor]) -> None:
        if self.model_cfg.lora is not None:
            load_adapter(self.model, state)
            return
        # load_state_dict copies into the existing parameters: bf16 copies from a GPU trainer are
        # cast to this model's dtype and moved to its device.
        self.model.load_state_dict(state)

    def _decode(self, prompts: list[list[int]], *, seed: int, budgets: Optional[list[int]], on_step: Any,
                limits: Optional[list[int]] = None) -> list[Completion]:  # fmt: skip
        gen = torch.Generator(device=self.device).manual_seed(seed)
        # an environment's turns: each sequence stops at its own limit (the room its episode has left)
        states = None if budgets is None else [self._interruption.start(b) for b in budgets]
        return sample_batch(
            self.model,
            prompts,
            max_new_tokens=max(limits) if limits else self.generation.max_new_tokens,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            temperature=self.generation.temperature,
            fp32_head=self.fp32_head,
            generator=gen,
            on_step=on_step,
            version=self.version,
            interruptions=states,
            limits=limits,
        )

    def _release(self) -> None:
        self.model = None
        if str(self.device).startswith("cuda"):
            torch.cuda.empty_cache()


class Evaluator(Generator):
    """Validation worker (`evaluate`: mean pass rate over k samples per held-out prompt); its own
    class so that it shows as `ray::Evaluator`."""
