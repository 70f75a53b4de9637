"""Earlier policy versions' weights, kept so the mismatch is measured under the version that
sampled the tokens (rl/mismatch.py).

In a pipelined run (PipelineRL-k) the tokens a step trains on were mostly sampled by earlier
versions than the trainer's: the generators run up to `generation.max_ahead_steps` steps ahead.
The trainer's own forward is under its current version, so comparing it with the generator's
log-probs would add the policy's change to the numerics. This keeps the trained weights of the
last few versions (a copy each, taken just before each optimizer step; as many as a token can
lag: `RunConfig.kept_versions`) and runs no-grad forwards with them over at most
`train.mismatch_rows` rows holding their tokens, through `torch.func.functional_call` on the
trainer's own module: the same code, autocast and FP32 head.

    kept = KeptVersions(policy, precision, fp32_head, depth=2)   # a slot per version, filled lazily
    part = kept.measure(rows, temperature, bound, max_rows, micro_rows, micro_tokens, autocast)
    kept.take(version)                                          # before optimizer.step(): the version held now

Each buffer is in the dtype the forward reads its parameter in, so the forward is the one the
trainer ran at that version, to the bit: a Linear's (or GPT-2's Conv1D's) weight and bias under bf16
autocast are read in bf16 (autocast casts them anyway), the rest (norms, embeddings, the FP32 head)
in the master dtype. Only trainable parameters are kept (frozen ones, a LoRA run's base, do not
change between versions). One trainer worker only: under FSDP2 the parameters are shards (the
config refuses it, config/train.py). The memory plan counts the copies (engine/plan/memory.py,
"earlier versions (mismatch)").
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional, Sequence

import torch
from torch.func import functional_call

from workbench.engine.model.devices import Precision
from workbench.engine.train.micro import add_partial, pack
from workbench.rl.mismatch import mismatch_partial
from workbench.rl.step import StepRows


def _read_in(module: torch.nn.Module, precision: Precision, fp32_head: bool) -> dict[int, torch.dtype]:
    """id(parameter) -> the dtype the forward reads it in (see the module docstring)."""
    from transformers.pytorch_utils import Conv1D  # GPT-2's linear layer (addmm: autocast casts it too)

    dtypes: dict[int, torch.dtype] = {}
    if precision.mixed:
        for m in module.modules():
            if isinstance(m, (torch.nn.Linear, Conv1D)):
                for p in m.parameters(recurse=False):
                    dtypes[id(p)] = precision.compute
    head = getattr(module, "model", module).get_output_embeddings() if fp32_head else None
    if head is not None:  # the FP32 head reads its weight in fp32, whatever autocast does
        for p in head.parameters(recurse=False):
            dtypes.pop(id(p), None)
    return dtypes


class KeptVersion:
    """The trainable parameters of one earlier policy version, and the forward over them."""

    def __init__(self, policy: torch.nn.Module, precision: Precision, fp32_head: bool):
        read_in = _read_in(policy, precision, fp32_head)
        by_id: dict[int, torch.Tensor] = {}
        self.names: dict[str, torch.Tensor] = {}  # every name, tied ones sharing a buffer
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (parameter, its buffer), once each
        for name, p in policy.named_parameters(remove_duplicate=False):
            if not p.requires_grad:
                continue
            if id(p) not in by_id:
                by_id[id(p)] = torch.empty(p.shape, dtype=read_in.get(id(p), p.dtype), device=p.device)
                self.pairs.append((p, by_id[id(p)]))
            self.names[name] = by_id[id(p)]
        self.version: Optional[int] = None  # none kept yet (a fresh or resumed trainer)

    @torch.no_grad()
    def take(self, version: int) -> None:
        """Copy the parameters as they are now (the trainer's `version`, before its update)."""
        for p, buf in self.pairs:
            buf.copy_(p.detach())
        self.version = version

    def rows_to_measure(self, rows: StepRows, max_rows: int) -> list[int]:
        """The first `max_rows` rows holding a token trained on that the kept version sampled."""
        if self.version is None or rows.versions is None or max_rows <= 0:
            return []
        hit = ((rows.versions == self.version) & (rows.loss_mask > 0)).any(1)
        return hit.nonzero().flatten()[:max_rows].tolist()

    @torch.no_grad()
    def measure_rows(
        self, policy: torch.nn.Module, rows: StepRows, picked: list[int], temperature: float, bound: Sequence[float],
        micro_rows: int, micro_tokens: int, autocast: Callable[[], Any],
    ) -> dict[str, float]:  # fmt: skip
        """The mismatch partial sums of this version's tokens on rows `picked`: its log-probs (this
        forward, in micro-batches like the trainer's) against the generator's."""
        sums: dict[str, float] = {}
        lengths = rows.lengths
        for part in pack(lengths, picked, micro_rows, micro_tokens):
            pick = torch.tensor(part, device=rows.input_ids.device)
            width = max(lengths[i] for i in part)
            ids, attn = rows.input_ids[pick, :width], rows.attention_mask[pick, :width]
            mask = rows.loss_mask[pick, : width - 1]
            pos = mask > 0
            with autocast():
                logp_at, _ = functional_call(policy, self.names, (ids, attn, pos, temperature), strict=False)
            logp = torch.zeros(mask.shape, dtype=logp_at.dtype, device=mask.device).masked_scatter(pos, logp_at)
            add_partial(sums, mismatch_partial(logp, rows.gen_logp[pick, : width - 1], mask,
                                               rows.versions[pick, : width - 1], self.version, bound))  # fmt: skip
        return sums


class KeptVersions:
    """The last `depth` versions' weights (slots allocated as versions come), newest first."""

    def __init__(self, policy: torch.nn.Module, precision: Precision, fp32_head: bool, depth: int):
        self.policy, self.precision, self.fp32_head, self.depth = policy, precision, fp32_head, max(1, depth)
        self.slots: list[KeptVersion] = []

    def take(self, version: int) -> None:
        """Keep the parameters as they are now (`version`, before its update), in the oldest slot."""
        if len(self.slots) < self.depth:
            self.slots.insert(0, KeptVersion(self.policy, self.precision, self.fp32_head))
        else:
            self.slots.insert(0, self.slots.pop())
        self.slots[0].take(version)

    def measure(
        self, rows: StepRows, temperature: float, bound: Sequence[float], max_rows: int,
        micro_rows: int, micro_tokens: int, autocast: Callable[[], Any] = contextlib.nullcontext,
    ) -> dict[str, float]:  # fmt: skip
        """The partial sums of every kept version's tokens on at most `max_rows` rows in all (the
        newest version's rows first: one forward per row and version). {} when nothing is measured."""
        sums: dict[str, float] = {}
        left = max_rows
        for slot in self.slots:
            picked = slot.rows_to_measure(rows, left)
            if picked:
                add_partial(sums, slot.measure_rows(self.policy, rows, picked, temperature, bound, micro_rows, micro_tokens, autocast))
                left -= len(picked)
        return sums
