"""torch.distributed for the trainer workers: process group, FSDP2 sharding, gathers, checkpoints.

Used by `Trainer` when `resources.trainer_workers > 1` (train/group.py starts the workers and
hands them the rendezvous address chosen by rank 0). gloo on CPU, NCCL on CUDA.

- The root FSDP2 shards is `PolicyForward` (engine/model/policy.py): its forward runs the body
  and the head together, so the root's parameters (embeddings, final norm, the head) are
  unsharded for the head too.
- Start-up without N copies of the model: each worker builds the model on the `meta` device
  from its config (`load_skeleton`: config and tokenizer only), `shard(...)` cuts it, and
  `load_from_rank0` allocates the shards and fills them by broadcast from rank 0, the only
  worker that reads the weights. With `model.lora` the skeleton is wrapped with PEFT on the meta
  device as one worker wraps its model; rank 0 wraps the base it read the same way (`wrap_like`),
  so the frozen base and rank 0's fresh adapters (B = 0) reach every worker. FSDP2 shards the
  frozen base and the fp32 adapters together; only the adapters get gradients and AdamW states.
- `shard(...)`: `fully_shard` on each decoder layer, then on the root; bf16 compute with fp32
  gradient reduction when the precision is mixed. With the FP32 head the root unit (embeddings,
  final norm, the head, tied or not) keeps fp32 parameters, so the head is computed from an
  fp32 all-gather exactly as one worker computes it from its fp32 master weights. FSDP averages
  gradients over the ranks; each rank's loss is weighted against the whole optimizer batch and
  scaled by the world size (`Trainer._accumulate`), so the result is the one-worker sum (gloo
  has no pre-multiplied sum).
- Checkpoints are `torch.distributed.checkpoint` folders for any number of workers (one worker
  writes one without a process group), so a run resumes with a different worker count: DCP
  reads the saved shards into the new layout (`save_state` / `load_state`). A `model.lora`
  policy's checkpoint holds its adapters and their AdamW states alone: the frozen base is
  model.path's, loaded again at every start.
"""

from __future__ import annotations

import contextlib
import datetime
from pathlib import Path
import warnings
from typing import Any, Iterator

import torch
import torch.distributed as dist

from workbench.engine.model.devices import Precision
from workbench.engine.model.policy import PolicyForward
from workbench.errors import UserError


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
        **group_device(device),
    )


def group_device(device: torch.device) -> dict[str, Any]:
    """`device_id` for init_process_group on CUDA: NCCL binds each rank to its GPU at once (eager
    communicator set-up, no guess of the device, clearer errors); gloo on CPU takes none."""
    return {"device_id": device} if device.type == "cuda" else {}


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
    root_mp = mp
    if fp32_head and precision.mixed:
        # the head (tied to the embedding or not) lives in the root unit: gathered in fp32, like
        # one worker's fp32 master weights; the layers hand back fp32 so the final norm sees one dtype
        mp = MixedPrecisionPolicy(param_dtype=precision.compute, reduce_dtype=torch.float32, output_dtype=torch.float32)
        root_mp = MixedPrecisionPolicy(reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    root = PolicyForward(model, fp32_head)
    fully_shard(root, mesh=mesh, mp_policy=root_mp)
    return root


def load_skeleton(
    model_cfg: Any, task: Any = None, *, device: str = "cpu", dtype: Any = None, compute: Any = None, progress: bool = False
) -> tuple[Any, Any]:
    """(model on the meta device, tokenizer), like `load_policy` (the same kernels for `compute`)
    but reading only the config and the tokenizer: the weights come from rank 0 in `load_from_rank0`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from workbench.engine.model.hf_dir import check_vocab, load_tokenizer, prepare_tokenizer
    from workbench.engine.model.kernels import fast_kernels
    from workbench.engine.model.load import policy_dir

    d = policy_dir(model_cfg, task, progress=progress)
    tokenizer = load_tokenizer(d, chat_template=bool(getattr(task, "chat_template", False)), template=model_cfg.chat_template)
    try:
        config = AutoConfig.from_pretrained(d, local_files_only=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype if isinstance(dtype, torch.dtype) else torch.float32)
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"model.path: cannot build the model from {d / 'config.json'}: {e}") from None
    check_vocab(tokenizer, model, str(d))
    prepare_tokenizer(tokenizer, model)
    model.workbench_info = {"from_cache": True, "dir": str(d), "params": sum(p.numel() for p in model.parameters())}
    return fast_kernels(model, compute if isinstance(compute, torch.dtype) else torch.float32, device), tokenizer


def load_from_rank0(root: PolicyForward, device: torch.device, model_dir: str) -> None:
    """Allocate the sharded (meta) model on `device` and fill it from the full fp32 weights that
    rank 0 alone reads from `model_dir`: parameters by FSDP's broadcast-and-shard, buffers
    (rotary tables and the like, which a meta model holds only as shapes) by broadcast. A
    `model.lora` policy gets the base and rank 0's freshly initialised adapters (B = 0) alike."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    from workbench.engine.model.load import load_hf_dir
    from workbench.engine.model.lora import is_lora, wrap_like

    root.to_empty(device=device)
    full: dict[str, torch.Tensor] = {}
    buffers: dict[str, torch.Tensor] = {}
    lora = is_lora(root.model)
    if dist.get_rank() == 0:
        # a LoRA base is held in the compute dtype (its frozen weights' dtype), the fp32 master otherwise
        dtype = next((p.dtype for p in root.parameters() if not p.requires_grad), torch.float32) if lora else torch.float32
        source = load_hf_dir(model_dir, device="cpu", dtype=dtype)[0]
        if lora:  # wrapped as the workers' skeleton is: its names, and rank 0's fresh adapters (B = 0)
            source = wrap_like(source, root.model)
        full = {f"model.{k}": v for k, v in source.state_dict().items()}
        buffers = dict(source.named_buffers())
        del source
    set_model_state_dict(root, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    del full
    with torch.no_grad():
        for name, buf in root.model.named_buffers():
            if dist.get_rank() == 0:
                buf.copy_(buffers[name])
            dist.broadcast(buf, src=0)


def to_local(x: Any) -> Any:
    """A DTensor's full value (collective), anything else unchanged."""
    from torch.distributed.tensor import DTensor

    return x.full_tensor() if isinstance(x, DTensor) else x


def gather_objects(obj: Any) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


@contextlib.contextmanager
def _single_process_quiet() -> Iterator[None]:
    """DCP warns on every single-process save/load that it 'assumes' one process: we mean it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def state_options(root: torch.nn.Module, **kw: Any) -> Any:
    """DCP's state-dict options for `root`: a `model.lora` policy's frozen base is left out (it is
    model.path's weights, read again at every start), so a checkpoint holds the adapters alone."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    from workbench.engine.model.lora import is_lora

    frozen_out = is_lora(getattr(root, "model", root))
    return StateDictOptions(ignore_frozen_params=frozen_out, strict=not frozen_out, **kw)


def trained_state(root: torch.nn.Module, options: Any, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """`get_state_dict` of `root` and `optimizer`; with frozen weights left out (`state_options`),
    its model part is the trained parameters' alone: DCP's filter misses a tied name (GPT-2's and
    Qwen2.5-0.5B's head, the frozen embedding under a second name) and keeps the buffers."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(root, optimizer, options=options)
    if options.ignore_frozen_params:
        trained = {n for n, p in root.named_parameters() if p.requires_grad}
        model_sd = {k: v for k, v in model_sd.items() if k in trained}
    return model_sd, optim_sd


def save_state(path: Path, root: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its shards of the trained weights and their AdamW states (fp32) under
    `path` (one worker, no process group: the whole state, in the same format). A `model.lora`
    policy writes its adapters alone (`state_options`): megabytes where the base is gigabytes."""
    import torch.distributed.checkpoint as dcp

    model_sd, optim_sd = trained_state(root, state_options(root), optimizer)
    with _single_process_quiet():
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path), no_dist=not dist.is_initialized())


def load_state(path: Path, root: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Read a `save_state` folder written by any number of workers into this layout (DCP reshards).
    A `model.lora` policy reads its adapters alone (from an adapter-only checkpoint, or from one of
    earlier versions that also held the base): its base is the one it loaded from model.path."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    options = state_options(root)
    model_sd, optim_sd = trained_state(root, options, optimizer)  # also creates the AdamW states to load into
    state = {"model": model_sd, "optim": optim_sd}
    with _single_process_quiet():
        dcp.load(state, checkpoint_id=str(path), no_dist=not dist.is_initialized())
    set_state_dict(root, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"], options=options)


def destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
