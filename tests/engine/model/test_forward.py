"""The model's forward (engine/model/forward.py): position ids from the mask, so a left-padded row
gives the logits of the same row unpadded (supervised warm-up, generation and training agree).

Tiny GPT-2 / Llama models are built from a config in memory (no downloads).
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from workbench.engine.model.forward import (  # noqa: E402
    PromptShare, body_hidden, causal_lm_forward, position_ids_from_mask, shared_prompt_hidden,
)


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


def _rows(model, spec):
    """Right-padded rows [prompt | completion | pad] for `spec` = [(prompt, completion, trained from)],
    the loss positions (t predicts t+1) from each completion's `trained from` token on."""
    width = max(len(p) + len(c) for p, c, _ in spec)
    ids = torch.zeros(len(spec), width, dtype=torch.long)
    attn, pos = torch.zeros_like(ids), torch.zeros(len(spec), width - 1, dtype=torch.bool)
    for r, (p, c, first) in enumerate(spec):
        ids[r, : len(p) + len(c)] = torch.tensor(p + c)
        attn[r, : len(p) + len(c)] = 1
        pos[r, len(p) - 1 + first : len(p) + len(c) - 1] = True
    return ids, attn, pos


@pytest.mark.parametrize("build", [gpt2, llama])
def test_a_groups_prompt_run_once_gives_the_same_hidden_states_and_gradients(build):
    """The trainer's shared-prompt forward: values and gradients at the trained positions equal
    the whole-row forward's, with prompts of several lengths, groups of unequal completions and a
    forced (untrained) first token."""
    model = build()  # eval: no dropout, so the two forwards are comparable (gradients flow all the same)
    a, b = [5, 9, 2, 30], [7, 3, 12, 8, 21, 6]
    spec = [(a, [11, 4, 1], 0), (a, [13], 0), (a, [4, 4, 4, 4, 1], 1), (b, [2, 1], 0), (b, [9, 8, 7], 0), ([17], [3, 3], 0)]
    groups = [0, 0, 0, 1, 1, 2]
    ids, attn, pos = _rows(model, spec)
    share = PromptShare([len(p) for p, _, _ in spec], attn.sum(1).tolist(), groups)
    assert share.distinct() == ([0, 3, 5], [0, 0, 0, 1, 1, 2])
    whole = body_hidden(model, ids, attn)[:, :-1][pos]
    whole.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}  # the body (no head)
    model.zero_grad()
    shared = shared_prompt_hidden(model, ids, attn, pos, share)
    shared.square().sum().backward()
    assert shared.shape == whole.shape == (int(pos.sum()), model.config.hidden_size)
    torch.testing.assert_close(shared, whole, atol=1e-5, rtol=1e-5)
    assert grads and {n for n, p in model.named_parameters() if p.grad is not None} == set(grads)
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, grads[n], atol=1e-5, rtol=1e-4, msg=n)


def test_a_cache_that_cannot_be_repeated_runs_the_rows_whole(monkeypatch):
    """A model whose KV cache has no `batch_select_indices` still trains: the rows run whole."""
    model = gpt2()
    a = [5, 9, 2, 30]
    spec = [(a, [11, 4, 1], 0), (a, [13], 0)]
    ids, attn, pos = _rows(model, spec)
    share = PromptShare([len(a)] * 2, attn.sum(1).tolist(), [0, 0])
    owner = next(c for c in transformers.DynamicCache.__mro__ if "batch_select_indices" in vars(c))
    monkeypatch.delattr(owner, "batch_select_indices")
    torch.testing.assert_close(shared_prompt_hidden(model, ids, attn, pos, share), body_hidden(model, ids, attn)[:, :-1][pos])
