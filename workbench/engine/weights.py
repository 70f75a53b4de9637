"""Policy weights as one flat byte buffer: how the trainer hands new weights to the generators.

A state dict of N tensors pickles as N torch storages (N copies, N headers); one numpy byte
buffer travels through Ray's object store in a single copy and is read back without another
(`tensors()` returns views into it). bf16 works too: tensors are stored as raw bytes and
reinterpreted with `Tensor.view(dtype)`.

    flat = FlatWeights.from_module(model)        # trainer side (any device; dtype= to cast, e.g. bf16)
    model.load_state_dict(as_state_dict(flat))   # generator side (copies into the params)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import torch

_ALIGN = 16  # byte offsets aligned so every dtype view is legal


@dataclass
class FlatWeights:
    buffer: np.ndarray  # uint8, every tensor's bytes back to back
    layout: list[tuple[str, str, tuple[int, ...], int, int]]  # name, dtype, shape, offset, nbytes

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor], dtype: Optional[torch.dtype] = None) -> "FlatWeights":
        """`dtype`: cast floating-point tensors to it (the trainer sends its compute dtype)."""
        layout, parts, offset = [], [], 0
        device = next(iter(state.values())).device if state else torch.device("cpu")
        for name, t in state.items():
            if dtype is not None and t.is_floating_point() and t.dtype != dtype:
                t = t.to(dtype)
            raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
            layout.append((name, str(t.dtype).removeprefix("torch."), tuple(t.shape), offset, raw.numel()))
            pad = (-raw.numel()) % _ALIGN
            parts.append(raw)
            if pad:
                parts.append(torch.zeros(pad, dtype=torch.uint8, device=device))
            offset += raw.numel() + pad
        flat = torch.cat(parts).cpu() if parts else torch.zeros(0, dtype=torch.uint8)
        return cls(flat.numpy(), layout)

    @classmethod
    def from_module(cls, model: torch.nn.Module, dtype: Optional[torch.dtype] = None) -> "FlatWeights":
        return cls.from_state_dict(model.state_dict(), dtype=dtype)

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

