"""torch.distributed for the trainer workers: process group, FSDP2 sharding, gathers, sharded checkpoints.

Used by `Trainer` when `resources.trainer_workers > 1` (trainer_group.py starts the workers and
hands them the rendezvous address chosen by rank 0). gloo on CPU, NCCL on CUDA.

- `PolicyForward` is the module FSDP2 shards as its root: its forward runs the body and the FP32
  head together, so the root's parameters (embeddings, final norm, the head) are unsharded for
  the head too (`causal_lm_forward` calls `model.base_model` and the head separately, which
  would bypass the hooks of a root placed on the HF model itself).
- `shard(...)`: `fully_shard` on each decoder layer, then on the root; bf16 compute with fp32
  gradient reduction when the precision is mixed. FSDP averages gradients over the ranks; each
  rank's loss is weighted against the whole optimizer batch and scaled by the world size
  (`Trainer._accumulate`), so the result is the one-worker sum (gloo has no pre-multiplied sum).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from workbench.engine.model.devices import Precision
from workbench.rl.head import causal_lm_forward


class PolicyForward(torch.nn.Module):
    """Logits of a HF causal LM with the FP32 head, as one module (the unit FSDP2 hooks into)."""

    def __init__(self, model: torch.nn.Module, fp32_head: bool):
        super().__init__()
        self.model = model
        self.fp32_head = fp32_head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return causal_lm_forward(self.model, input_ids, attention_mask, fp32_head=self.fp32_head)[0]


def node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"


def init_group(device: torch.device, address: str, port: int, rank: int, world_size: int, timeout_s: float) -> None:
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{address}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks: the largest ModuleList under the body (GPT-2 `h`, Llama/Qwen `layers`)."""
    lists = [m for m in model.base_model.modules() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        raise ValueError(f"{type(model).__name__}: no decoder layers (ModuleList) found to shard")
    return list(max(lists, key=len))


def shard(model: torch.nn.Module, device: torch.device, precision: Precision, fp32_head: bool) -> PolicyForward:
    """FSDP2: each decoder layer, then the root `PolicyForward` (embeddings, final norm, head)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    mp = MixedPrecisionPolicy(param_dtype=precision.compute, reduce_dtype=torch.float32) if precision.mixed else MixedPrecisionPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if fp32_head and precision.mixed and head is not None and head.weight is not emb.weight:
        # an untied head keeps fp32 parameters in the forward (its own unit); a tied one follows the body
        fully_shard(head, mesh=mesh, mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.float32))
    root = PolicyForward(model, fp32_head)
    fully_shard(root, mesh=mesh, mp_policy=mp)
    return root


def full_state_dict(root: PolicyForward) -> dict[str, torch.Tensor]:
    """All ranks call; rank 0 gets the full (unsharded, CPU) weights, keyed like the HF model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(root, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k.removeprefix("model."): v for k, v in sd.items()}


def to_local(x: Any) -> Any:
    """A DTensor's full value (collective), anything else unchanged."""
    from torch.distributed.tensor import DTensor

    return x.full_tensor() if isinstance(x, DTensor) else x


def gather_objects(obj: Any) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def save_sharded(path: Path, root: PolicyForward, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its shards of the weights and the AdamW states (fp32) under `path`."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(root, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path))


def load_sharded(path: Path, root: PolicyForward, optimizer: torch.optim.Optimizer) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(root, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(root, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
