"""Faster kernels for the same model (engine/model/kernels.py): the fused GELU computes what
transformers' `gelu_new` computes, and bf16 on the CPU gets eager attention."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.activations import NewGELUActivation

from workbench.engine.model.kernels import attention_for, fast_kernels, fused_gelu


def tiny_gpt() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=16, n_embd=32, n_layer=2, n_head=2, n_positions=64, activation_function="gelu_new")
    return GPT2LMHeadModel(cfg).eval()


def test_fused_gelu_replaces_gelu_new_and_computes_the_same_logits():
    model = tiny_gpt()
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    before = model(ids).logits
    assert fused_gelu(model) == 2  # one per block
    assert not any(isinstance(m, NewGELUActivation) for m in model.modules())
    torch.testing.assert_close(model(ids).logits, before, atol=1e-5, rtol=1e-5)
    assert fused_gelu(model) == 0  # nothing left to replace


def test_bf16_on_the_cpu_gets_eager_attention_and_everything_else_keeps_sdpa():
    assert attention_for(torch.bfloat16, "cpu") == "eager"
    assert attention_for(torch.float16, "cpu") == "eager"
    assert attention_for(torch.float32, "cpu") is None
    assert attention_for(torch.bfloat16, "cuda") is None
    model = fast_kernels(tiny_gpt(), torch.bfloat16, "cpu")
    assert model.config._attn_implementation == "eager"
    assert fast_kernels(tiny_gpt(), torch.float32, "cpu").config._attn_implementation != "eager"
