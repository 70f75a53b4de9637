"""The vLLM generator's LoRA adapter (`model.lora`): on disk in PEFT's layout, reloaded in place.

vLLM serves LoRA per request: each request names a `LoRARequest(name, int id, folder)` and the
engine loads that folder (PEFT's layout) into one of its `max_loras` slots. The generator keeps one
adapter, id 1, in a temporary folder of its own that every request names. A push rewrites the
folder's tensors (the earlier version's file replaced: one version on disk) and reloads them into
the slot in place (`load_inplace=True`) between two engine steps, as a full-weight push is taken
(backend.py). Every sequence then samples its next token with the new version, over the KV cache
the old one wrote, as with full weights; one engine step never mixes two versions.

    adapter = VllmAdapter(model_dir, cfg.model.lora)      # version 0 on disk: B = 0, the base model
    llm = vllm.LLM(..., **adapter.engine_kwargs())        # enable_lora, max_lora_rank, max_loras=1
    engine.add_request(rid, prompt, params, lora_request=adapter.request)
    adapter.load(llm.llm_engine, pushed_state)            # between two steps
    adapter.close()                                       # the folder removed

Version 0 is the trainer's adapter before any step: zeros of the shapes the trainer's wrapping gives
(engine/model/lora.adapter_shapes, the model on the meta device); with B = 0 the policy is the base
model, whatever A holds. `lora_target_modules` holds vLLM to the adapted layers (it fuses them into
its own qkv_proj / gate_up_proj), so the embeddings and the LM head stay vLLM's plain layers and the
FP32 head patch (extension.py) applies unchanged: the head is frozen base weight under LoRA.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from workbench.engine.model.lora import adapted_layers, adapter_shapes, check_pushed, write_adapter
from workbench.engine.plan.lora import vllm_max_rank

ADAPTER_ID = 1  # vLLM's ids start at 1; one adapter, every version in its place
ADAPTER_NAME = "workbench-policy"


class VllmAdapter:
    """One LoRA adapter served by one vLLM engine; see the module docstring."""

    def __init__(self, model_dir: str | Path, lora: Any):
        self.lora = lora
        shapes, peft_config = adapter_shapes(model_dir, lora)
        peft_config.base_model_name_or_path = str(model_dir)
        self.names = set(shapes)
        self.ops_mode = "vllm"  # "patched" once the CPU generator groups vLLM's LoRA ops (cpu_lora.py)
        self.layers = sorted(adapted_layers(shapes))  # q_proj, ...: what vLLM's lora_target_modules holds it to
        self.folder = Path(tempfile.mkdtemp(prefix="wb-lora-"))
        write_adapter(self.folder, {n: torch.zeros(s) for n, s in shapes.items()}, peft_config)
        from vllm.lora.request import LoRARequest

        self._request_cls = LoRARequest
        self.request = LoRARequest(ADAPTER_NAME, ADAPTER_ID, str(self.folder))

    def engine_kwargs(self) -> dict[str, Any]:
        """`vllm.LLM`'s LoRA options: one adapter slot of the smallest rank vLLM allows that holds
        it (as the memory plan counts it), and only the layers the trainer adapts (the head and the
        embeddings stay plain)."""
        return {"enable_lora": True, "max_loras": 1, "max_cpu_loras": 1,
                "max_lora_rank": vllm_max_rank(self.lora.rank), "lora_target_modules": self.layers}  # fmt: skip

    def load(self, llm_engine: Any, state: dict[str, torch.Tensor]) -> None:
        """Write the pushed adapter over the folder's and reload it into the engine's slot in place;
        call between two engine steps (the in-process engine core runs it at once)."""
        check_pushed(state, self.names)
        write_adapter(self.folder, state)
        llm_engine.add_lora(self._request_cls(ADAPTER_NAME, ADAPTER_ID, str(self.folder), load_inplace=True))

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
