"""The frozen reference policy of the KL penalty (`recipe.loss.kl_coef > 0`).

The reference is the run's starting weights (model.path, read again on a resume, so it never
moves), held in the trainer's compute dtype on the trainer's device, with no gradients, and
sharded like the policy under FSDP2 when there are several trainer workers. The trainer asks it
for log-probs at exactly the positions it trains on, before the policy's own forward, so its
temporaries are gone before the policy's activations peak:

    ref = ReferencePolicy.load(model_cfg, device, precision, fp32_head)     # one worker
    ref = ReferencePolicy.sharded(model_cfg, device, precision, fp32_head)  # FSDP2, in connect()
    ref_at = ref.logprobs(ids, attn, positions, temperature, share)         # float32 [n], no grad

`losses.policy_loss` turns them into the k3 estimator (see its docstring). The memory plan counts
the reference's weights (engine/plan/memory.py, "KL reference weights").
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from workbench.engine.model.devices import Precision
from workbench.engine.model.forward import PromptShare
from workbench.engine.model.policy import PolicyForward


class ReferencePolicy:
    """A frozen `PolicyForward` over the starting weights (eval mode, no gradients)."""

    def __init__(self, forward: PolicyForward):
        self.forward = forward
        forward.eval()
        for p in forward.parameters():
            p.requires_grad_(False)

    @classmethod
    def load(cls, model_cfg: Any, device: torch.device, precision: Precision, fp32_head: bool) -> "ReferencePolicy":
        """One worker: the starting weights read in the compute dtype onto `device`."""
        from workbench.engine.model.load import load_policy

        model, _ = load_policy(model_cfg, device=str(device), dtype=precision.compute, compute=precision.compute,
                               progress=False)  # fmt: skip
        return cls(PolicyForward(model, fp32_head))

    @classmethod
    def sharded(cls, model_cfg: Any, device: torch.device, precision: Precision, fp32_head: bool) -> "ReferencePolicy":
        """Every rank at once, after the process group exists: a meta skeleton in the compute
        dtype, cut like the policy (each decoder layer, then the root), filled from rank 0's read."""
        from workbench.engine.train import fsdp

        model, _ = fsdp.load_skeleton(model_cfg, device=str(device), dtype=precision.compute, compute=precision.compute)
        flat = Precision(master=precision.compute, compute=precision.compute)  # stored as computed: nothing to cast
        root = fsdp.shard(model, device, flat, fp32_head)
        fsdp.load_from_rank0(root, device, model.workbench_info["dir"])
        return cls(root)

    @torch.no_grad()
    def logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor,
                 temperature: float, share: Optional[PromptShare]) -> torch.Tensor:  # fmt: skip
        """log p_ref(token) at `positions` (the policy forward's layout), float32, row-major."""
        with torch.autocast(device_type=input_ids.device.type, enabled=False):  # already in the compute dtype
            logp, _ = self.forward(input_ids, attention_mask, positions, temperature, share)
        return logp.float()
