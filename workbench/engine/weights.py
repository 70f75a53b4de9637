"""Policy weights as one flat byte buffer: how the trainer hands new weights to the generators.

A state dict of N tensors pickles as N torch storages (N copies, N headers); one numpy byte
buffer travels through Ray's object store in a single copy and is read back without another
(`tensors()` returns views into it). bf16 works too: tensors are stored as raw bytes and
reinterpreted with `Tensor.view(dtype)`.

    flat = FlatWeights.from_module(model)        # trainer side (any device; dtype= to cast, e.g. bf16;
                                                 # keep= tensors left uncast, e.g. the FP32 head)
    model.load_state_dict(as_state_dict(flat))   # generator side (copies into the params)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Union

import numpy as np
import torch

_ALIGN = 16  # byte offsets aligned so every dtype view is legal


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def _identity(t: torch.Tensor) -> tuple:
    """Where a tensor's values live: equal for the names of one tied parameter (a sharded
    DTensor is identified by its local shard)."""
    local = t.to_local() if hasattr(t, "to_local") else t
    ptr = local.untyped_storage().data_ptr() or id(t)  # no memory (meta, empty): only itself
    return (local.device, ptr, local.storage_offset(), tuple(t.shape), t.dtype)


@dataclass
class FlatWeights:
    buffer: np.ndarray  # uint8, every tensor's bytes back to back
    layout: list[tuple[str, str, tuple[int, ...], int, int]]  # name, dtype, shape, offset, nbytes

    @classmethod
    def from_state_dict(
        cls,
        state: dict[str, torch.Tensor],
        dtype: Optional[torch.dtype] = None,
        *,
        keep: Iterable[torch.Tensor] = (),
        gather: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        write: bool = True,
    ) -> "FlatWeights":
        """`dtype`: cast floating-point tensors to it (the trainer sends its compute dtype),
        except the tensors in `keep` (the FP32 head). Tensors that share memory (tied input
        and output embeddings) are stored once, every name a view of the same bytes.

        Each tensor is cast on its own device and copied straight into the host buffer, one at a
        time (no second copy of the model on the device). `gather(t)` makes a sharded tensor
        whole first (a collective: every rank calls this with the same state); ranks that only
        take part pass `write=False` and get a FlatWeights without a buffer.
        """
        kept = {_identity(t) for t in keep if t is not None}
        layout: list[tuple[str, str, tuple[int, ...], int, int]] = []
        todo: list[tuple[torch.Tensor, torch.dtype, int, int]] = []
        placed: dict[tuple, tuple[str, tuple[int, ...], int, int]] = {}
        offset = 0
        for name, t in state.items():
            key = _identity(t)
            if key not in placed:
                cast = dtype is not None and t.is_floating_point() and key not in kept
                out = dtype if cast else t.dtype
                nbytes = t.numel() * _itemsize(out)
                placed[key] = (str(out).removeprefix("torch."), tuple(t.shape), offset, nbytes)
                todo.append((t, out, offset, nbytes))
                offset += nbytes + (-nbytes) % _ALIGN
            layout.append((name, *placed[key]))
        buf = np.zeros(offset if write else 0, np.uint8)
        host = torch.from_numpy(buf)
        for t, out, off, nbytes in todo:
            full = gather(t) if gather is not None else t
            if write and nbytes:
                raw = full.detach().to(out).contiguous().reshape(-1).view(torch.uint8)
                host[off : off + nbytes].copy_(raw)  # one tensor's cast copy on the device at a time
        return cls(buf, layout)

    @classmethod
    def from_module(
        cls, model: torch.nn.Module, dtype: Optional[torch.dtype] = None, *, keep: Iterable[torch.Tensor] = ()
    ) -> "FlatWeights":
        return cls.from_state_dict(model.state_dict(), dtype=dtype, keep=keep)

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Views into the buffer (read-only when it came from Ray's object store: copy to keep)."""
        with warnings.catch_warnings():
            # buffers from the object store are read-only; load_state_dict only reads them
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            buf = torch.from_numpy(self.buffer)
        return {
            name: buf[off : off + n].view(getattr(torch, dtype)).view(shape)
            for name, dtype, shape, off, n in self.layout
        }


Weights = Union[FlatWeights, dict[str, torch.Tensor]]


def as_state_dict(weights: Weights) -> dict[str, torch.Tensor]:
    """Accept either form: generators are driven by the trainer (flat) and by tests (dicts)."""
    if isinstance(weights, FlatWeights):
        return weights.tensors()
    if isinstance(weights, dict):
        return weights
    raise TypeError(f"weights must be FlatWeights or a state dict, not {type(weights).__name__}")


def policy_push(
    model: torch.nn.Module, dtype: Optional[torch.dtype], fp32_head: bool, *,
    gather: Optional[Callable[[torch.Tensor], torch.Tensor]] = None, write: bool = True,
) -> FlatWeights:  # fmt: skip
    """The weights a trainer sends its generators: every tensor of `model` in `dtype` (the compute
    dtype), the output head left in fp32 with the recipe's FP32 head, a tied head sent once. The
    trainer's push (Trainer.get_weights) and a checkpoint scored in a running engine
    (benchmarks/bench_env_learning.py) both make it here."""
    head = model.get_output_embeddings() if fp32_head else None
    keep = (head.weight, getattr(head, "bias", None)) if head is not None else ()  # None: from_state_dict skips it
    return FlatWeights.from_state_dict(model.state_dict(), dtype=dtype, keep=keep, gather=gather, write=write)
