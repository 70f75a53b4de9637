"""The model's forward (engine/model/forward.py): position ids from the mask, so a left-padded row
gives the logits of the same row unpadded (supervised warm-up, generation and training agree).

Tiny GPT-2 / Llama models are built from a config in memory (no downloads).
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from workbench.engine.model.forward import causal_lm_forward, position_ids_from_mask  # noqa: E402


def gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=37, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=37, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip
    return transformers.LlamaForCausalLM(cfg).eval()


def test_position_ids_from_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


@pytest.mark.parametrize("build", [gpt2, llama])
def test_left_padding_matches_an_unpadded_forward(build):
    model = build()
    a = torch.tensor([[5, 9, 2, 30]])
    b = torch.tensor([[7, 3, 12, 8, 21, 6]])
    pad = 0
    batch = torch.tensor([[pad, pad, 5, 9, 2, 30], [7, 3, 12, 8, 21, 6]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        padded, _ = causal_lm_forward(model, batch, mask)
        ref_a, _ = causal_lm_forward(model, a, torch.ones_like(a))
        ref_b, _ = causal_lm_forward(model, b, torch.ones_like(b))
    assert torch.allclose(padded[0, 2:], ref_a[0], atol=1e-5)
    assert torch.allclose(padded[1], ref_b[0], atol=1e-5)
