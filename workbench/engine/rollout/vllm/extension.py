"""Code that runs inside vLLM's worker process: the weight-push entry point and the FP32 head.

vLLM mixes `WorkbenchWorkerExtension` into its worker (`worker_extension_cls`, the dotted name
`EXTENSION`); the generator calls its methods with `llm.collective_rpc(name, args=...)`:

    llm.collective_rpc("workbench_fp32_head", args=(True, "bfloat16"))  # -> "patched" / "off" / ...
    llm.collective_rpc("workbench_load_weights", args=(to_flat(state),))  # -> tensors loaded

- Weights travel as ONE `FlatWeights` (a numpy byte buffer + layout), never as a dict of views:
  with tensor parallelism vLLM pickles RPC arguments, and every view pickles its whole
  underlying buffer (N tensors -> N copies of the model). A numpy buffer pickles once, and
  out-of-band under protocol 5. The views are rebuilt here, in the worker.
- FP32 head: vLLM 0.32's own fp32 head (`hf_overrides={"head_dtype": "float32"}`) accumulates in
  fp32 but over the bf16 head weight, so each `LogitsProcessor._apply_head` is patched to project
  in fp32 from an fp32 copy of the head weight. The copy is refreshed from every push's `HEAD_KEY` tensor:
  the trainer sends that one tensor in fp32, so the generator's head is the trainer's fp32 head.
"""

from __future__ import annotations

import types
from typing import Any, Optional

import torch
import torch.nn.functional as F

from workbench.engine.weights import FlatWeights, Weights

EXTENSION = "workbench.engine.rollout.vllm.extension.WorkbenchWorkerExtension"
HEAD_KEY = "lm_head.weight"  # the Hugging Face name of the output head; sent in fp32 by the trainer


def to_flat(weights: Weights) -> FlatWeights:
    """One buffer + layout for a push: zero-copy when `weights` are views into one CPU buffer
    (what `FlatWeights.tensors()` hands out), else one packing copy."""
    if isinstance(weights, FlatWeights):
        return weights
    tensors = list(weights.values())
    if tensors and all(t.device.type == "cpu" and t.is_contiguous() for t in tensors):
        storage = tensors[0].untyped_storage()
        if all(t.untyped_storage().data_ptr() == storage.data_ptr() for t in tensors):
            buffer = torch.empty(0, dtype=torch.uint8).set_(storage)
            layout = [
                (name, str(t.dtype).removeprefix("torch."), tuple(t.shape), t.storage_offset() * t.element_size(),
                 t.numel() * t.element_size())
                for name, t in weights.items()
            ]  # fmt: skip
            return FlatWeights(buffer.numpy(), layout)
    return FlatWeights.from_state_dict(weights)


def _vocab_rows(lm_head: Any, full: torch.Tensor) -> torch.Tensor:
    """This rank's rows of a full [vocab, hidden] head, padded like vLLM's (vocab-parallel) head."""
    out = torch.zeros(lm_head.weight.shape, dtype=torch.float32, device=lm_head.weight.device)
    idx = getattr(lm_head, "shard_indices", None)
    start, end = (idx.org_vocab_start_index, idx.org_vocab_end_index) if idx is not None else (0, full.shape[0])
    out[: end - start].copy_(full[start:end])
    return out


def patch_fp32_logits(lp: Any) -> str:
    """Make one vLLM `LogitsProcessor` project to logits in fp32; returns "patched".

    Replaces vLLM 0.32's `_apply_head` (the projection; gathering over TP ranks and dropping the
    vocab padding stay vLLM's). The weight is `lp._wb_head` (an fp32 copy kept by
    `set_fp32_head`) when set, else the live head weight cast to fp32 (e.g. before the first push).
    A quantized head is left to vLLM.
    """
    original = lp._apply_head
    lp._wb_head = None

    def _apply_head(self, lm_head, hidden_states, embedding_bias=None):
        weight = getattr(lm_head, "weight", None)
        quant = type(getattr(lm_head, "quant_method", None)).__name__
        if weight is None or quant not in ("UnquantizedEmbeddingMethod", "UnquantizedLinearMethod", "NoneType"):
            return original(lm_head, hidden_states, embedding_bias)
        head = self._wb_head if self._wb_head is not None and self._wb_head.shape == weight.shape else weight.float()
        bias = embedding_bias.float() if embedding_bias is not None else None
        return F.linear(hidden_states.float(), head, bias)

    lp._apply_head = types.MethodType(_apply_head, lp)
    return "patched"


def set_fp32_head(lp: Any, lm_head: Any, full: Optional[torch.Tensor]) -> None:
    """Refresh a patched processor's fp32 head from the full pushed head (None: follow the live weight)."""
    lp._wb_head = None if full is None else _vocab_rows(lm_head, full.float())


class WorkbenchWorkerExtension:
    """Mixed into vLLM's worker (`worker_extension_cls`); called through `llm.collective_rpc`."""

    def _wb_heads(self) -> list[tuple[Any, Any]]:
        """(patched LogitsProcessor, the head module it projects with) pairs of the running model."""
        model = self.model_runner.model
        lps = [m for m in model.modules() if hasattr(m, "_wb_head")]
        return [(lp, getattr(model, "lm_head", None)) for lp in lps]

    def workbench_load_weights(self, weights: Weights) -> int:
        """Copy a pushed state (FlatWeights, or a dict in tests) into the running model in place."""
        state = weights.tensors() if isinstance(weights, FlatWeights) else weights
        runner = self.model_runner
        if hasattr(runner, "reload_weights"):  # vLLM >= 0.3x: in place, through the weights' post-load processing
            runner.reload_weights(weights_iterator=iter(state.items()))
        else:  # (CPU kernels repack weights and drop their loaders, so model.load_weights fails there)
            runner.model.load_weights(weights=iter(state.items()))
        head = state.get(HEAD_KEY)
        for lp, lm_head in self._wb_heads():
            if lm_head is not None:
                set_fp32_head(lp, lm_head, head)  # a push without the head: follow the live weight
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return len(state)

    def workbench_fp32_head(self, enable: bool, dtype: str) -> str:
        """Patch every LogitsProcessor of the model; the mode the generator reports as `fp32_head`."""
        from vllm.model_executor.layers.logits_processor import LogitsProcessor

        if not enable:
            return "off"
        if dtype == "float32":
            return "float32-model"
        model = self.model_runner.model
        lps = [m for m in model.modules() if isinstance(m, LogitsProcessor)]
        if not lps or not all(hasattr(m, "_apply_head") for m in lps):  # vLLM < 0.32: model-dtype head
            return "unavailable (no LogitsProcessor._apply_head in this vLLM)"
        return "patched" if {patch_fp32_logits(m) for m in lps} == {"patched"} else "unavailable"
