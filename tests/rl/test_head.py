"""FP32 LM head, tied embeddings, token log-probs/entropy, and the
trainer's chunked head (`completion_logprobs`: the full computation's values and gradients).

Tiny GPT-2 / Llama models are built from a config in memory (no downloads).
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from workbench.engine.model.forward import causal_lm_forward  # noqa: E402
from workbench.rl.head import (  # noqa: E402
    HEAD_CHUNK_BYTES,
    completion_logprobs,
    head_chunk_rows,
    lm_head_logits,
    token_entropy,
    token_logprobs,
)

VOCAB = 37


def gpt2(dtype=torch.float32):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(cfg).to(dtype).eval()


def llama(dtype=torch.float32, tied=False):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=tied,
    )
    return transformers.LlamaForCausalLM(cfg).to(dtype).eval()


IDS = torch.tensor([[5, 9, 2, 30, 11, 4]])


@pytest.mark.parametrize("build", [gpt2, llama])
def test_logits_are_float32_under_a_bf16_body(build):
    model = build(torch.bfloat16)
    mask = torch.ones_like(IDS)
    with torch.no_grad():
        logits, _ = causal_lm_forward(model, IDS, mask, fp32_head=True)
        plain, _ = causal_lm_forward(model, IDS, mask, fp32_head=False)
        hidden = model.base_model(input_ids=IDS, attention_mask=mask).last_hidden_state
    assert hidden.dtype == torch.bfloat16
    assert logits.dtype == torch.float32 and plain.dtype == torch.bfloat16
    w = model.get_output_embeddings().weight
    assert torch.allclose(logits, hidden.float() @ w.float().T, atol=1e-5)
    # the fp32 product keeps digits that the bf16 head rounds away
    assert not torch.equal(logits, plain.float())


@pytest.mark.parametrize("build", [gpt2, lambda dtype: llama(dtype, tied=True)])
def test_tied_embeddings_keep_their_dtype_and_values(build):
    model = build(torch.bfloat16)
    emb = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight.data_ptr() == emb.data_ptr()  # really tied
    before = emb.detach().clone()
    logits, _ = causal_lm_forward(model, IDS, torch.ones_like(IDS), fp32_head=True)
    logits.sum().backward()
    assert emb.dtype == torch.bfloat16 and torch.equal(emb.detach(), before)
    assert emb.grad is not None and emb.grad.dtype == torch.bfloat16
    assert model.get_output_embeddings().weight.data_ptr() == emb.data_ptr()


@pytest.mark.parametrize("build", [gpt2, llama])
def test_fp32_head_stays_exact_under_bf16_autocast(build):
    # the trainer computes in bf16 under autocast over fp32 weights; the head must not follow
    model = build(torch.float32)
    mask = torch.ones_like(IDS)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = causal_lm_forward(model, IDS, mask, fp32_head=True)
        hidden = model.base_model(input_ids=IDS, attention_mask=mask).last_hidden_state
        autocast_head = model.get_output_embeddings()(hidden)
    w = model.get_output_embeddings().weight
    assert logits.dtype == torch.float32 and autocast_head.dtype == torch.bfloat16
    torch.testing.assert_close(logits, hidden.float() @ w.T, atol=1e-6, rtol=1e-6)
    assert not torch.equal(logits, autocast_head.float())  # a plain head would have rounded
    assert w.dtype == torch.float32 and model.get_input_embeddings().weight.dtype == torch.float32


def test_untied_head_keeps_its_dtype():
    model = llama(torch.bfloat16, tied=False)
    causal_lm_forward(model, IDS, torch.ones_like(IDS), fp32_head=True)
    assert model.lm_head.weight.dtype == torch.bfloat16


def test_lm_head_logits_refuses_a_model_without_head():
    class NoHead:
        def get_output_embeddings(self):
            return None

    with pytest.raises(ValueError, match="no output embeddings"):
        lm_head_logits(NoHead(), torch.zeros(1, 2, 3), True)


def test_token_logprobs_and_entropy_match_log_softmax():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, VOCAB, generator=g).to(torch.bfloat16)
    tokens = torch.randint(0, VOCAB, (2, 5), generator=g)
    for temp in (1.0, 0.7):
        ref = torch.log_softmax(logits.float() / temp, -1)
        got = token_logprobs(logits, tokens, temperature=temp)
        assert got.dtype == torch.float32
        assert torch.allclose(got, ref.gather(-1, tokens[..., None])[..., 0], atol=1e-5)
        assert torch.allclose(token_entropy(logits, temperature=temp), -(ref.exp() * ref).sum(-1), atol=1e-5)


# -- completion_logprobs: the trainer's head, chunked ------------------------------------------


def _reference(model, hidden, targets, temperature, fp32_head):
    """The full computation: logits for every row, then log-probs and entropy (autograd)."""
    logits = lm_head_logits(model, hidden, fp32_head)
    return token_logprobs(logits, targets, temperature), token_entropy(logits, temperature)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("build", [gpt2, lambda dtype: llama(dtype, tied=False)])
def test_chunked_head_gives_the_full_computations_values_and_gradients(build, temperature):
    model = build(torch.float32).train()
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(23, 32, generator=g)
    targets = torch.randint(0, VOCAB, (23,), generator=g)
    a, c = torch.randn(23, generator=g), torch.randn(23, generator=g)  # weights on log-prob and entropy
    results = []
    for chunked in (True, False):
        model.zero_grad(set_to_none=True)
        h = hidden.clone().requires_grad_()
        if chunked:  # 4 rows per chunk: 6 chunks, the last one short
            logp, ent = completion_logprobs(model, h, targets, temperature=temperature, chunk_rows=4)
        else:
            logp, ent = _reference(model, h, targets, temperature, True)
        (a * logp + c * ent).sum().backward()
        grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        results.append((logp.detach(), ent.detach(), h.grad.clone(), grads))
    (lp1, e1, gh1, gp1), (lp2, e2, gh2, gp2) = results
    assert lp1.dtype == e1.dtype == torch.float32
    torch.testing.assert_close(lp1, lp2, atol=1e-5, rtol=0)
    torch.testing.assert_close(e1, e2, atol=1e-5, rtol=0)
    torch.testing.assert_close(gh1, gh2, atol=1e-5, rtol=0)
    head = model.get_output_embeddings().weight
    assert head.grad is not None and gp1.keys() == gp2.keys()
    for k in gp1:
        torch.testing.assert_close(gp1[k], gp2[k], atol=1e-5, rtol=0, msg=k)


def test_chunked_head_is_fp32_over_a_bf16_tied_embedding_and_leaves_it_bf16():
    model = gpt2(torch.bfloat16).train()
    emb = model.get_input_embeddings().weight
    hidden = torch.randn(9, 32).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, VOCAB, (9,))
    logp, ent = completion_logprobs(model, hidden, targets, chunk_rows=2)
    ref_lp, ref_ent = _reference(model, hidden, targets, 1.0, True)
    assert logp.dtype == torch.float32
    torch.testing.assert_close(logp, ref_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=0)
    (logp.sum() + ent.sum()).backward()
    assert emb.dtype == torch.bfloat16 and emb.grad.dtype == torch.bfloat16 and hidden.grad.dtype == torch.bfloat16


def test_without_fp32_head_the_head_runs_in_the_autocast_dtype():
    model = llama(torch.float32)
    hidden, targets = torch.randn(5, 32), torch.randint(0, VOCAB, (5,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain, _ = completion_logprobs(model, hidden, targets, fp32_head=False)
        exact, _ = completion_logprobs(model, hidden, targets, fp32_head=True)
        ref = token_logprobs(lm_head_logits(model, hidden, False), targets)
    torch.testing.assert_close(plain, ref, atol=1e-6, rtol=0)  # the bf16 head, as before
    assert not torch.equal(plain, exact)


def test_chunk_rows_bound_the_logits_in_memory():
    assert head_chunk_rows(151_936) == HEAD_CHUNK_BYTES // (4 * 151_936) > 100
    assert head_chunk_rows(37, chunk_bytes=4 * 37 * 3) == 3
    assert head_chunk_rows(10**12) == 1  # never zero rows


def test_no_rows_selected_gives_empty_outputs_and_zero_gradients():
    model = llama(torch.float32).train()
    h = torch.zeros(0, 32, requires_grad=True)
    logp, ent = completion_logprobs(model, h, torch.zeros(0, dtype=torch.long))
    assert logp.shape == ent.shape == (0,)
    (logp.sum() * 0.0).backward()
    assert float(model.lm_head.weight.grad.abs().sum()) == 0.0
