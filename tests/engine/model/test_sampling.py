"""The torch sampler: log-probs it reports are the ones a trainer forward computes; weight swaps mid-sequence."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from workbench.engine.model.sampling import sample_batch
from workbench.engine.model.forward import causal_lm_forward
from workbench.rl.head import token_logprobs


def tiny_gpt(seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=16, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=2, eos_token_id=1)
    return GPT2LMHeadModel(cfg).eval()


def test_logprobs_match_a_full_forward_with_left_padding():
    model = tiny_gpt(0)
    prompts = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12]]
    outs = sample_batch(model, prompts, max_new_tokens=6, eos_id=1, pad_id=0, temperature=0.7,
                        generator=torch.Generator().manual_seed(1))
    assert len(outs) == 3
    for o in outs:
        ids = torch.tensor([o.prompt_tokens + o.tokens])
        logits, _ = causal_lm_forward(model, ids, torch.ones_like(ids))
        ref = token_logprobs(logits[:, :-1], ids[:, 1:], temperature=0.7)[0, len(o.prompt_tokens) - 1 :]
        torch.testing.assert_close(torch.tensor(o.logprobs), ref, atol=1e-5, rtol=0)
        assert all(o.sampled) and o.versions == [0] * len(o.tokens)
        assert o.finished == (o.tokens[-1] == 1)


def test_a_prompt_sampled_several_times_is_prefilled_once_with_the_same_logprobs(monkeypatch):
    """Groups repeat their prompt (generations_per_prompt): the prefill runs each distinct prompt
    once and repeats its cache; the reported log-probs still equal a full forward's."""
    from workbench.engine.model import sampling

    model = tiny_gpt(0)
    prompts = [[3, 4, 5, 6, 7]] * 4 + [[8, 9]] * 3 + [[10, 11, 12]]
    widths = []
    real = sampling.causal_lm_forward
    monkeypatch.setattr(sampling, "causal_lm_forward", lambda m, ids, *a, **k: (widths.append(ids.shape), real(m, ids, *a, **k))[1])
    outs = sample_batch(model, prompts, max_new_tokens=5, eos_id=1, pad_id=0, generator=torch.Generator().manual_seed(3))
    assert widths[0] == (3, 5) and all(w[0] == 8 for w in widths[1:])  # 3 distinct prompts prefilled, 8 rows decoded
    assert [o.prompt_tokens for o in outs] == prompts
    assert len({tuple(o.tokens) for o in outs[:4]}) > 1  # the copies sample independently
    for o in outs:
        ids = torch.tensor([o.prompt_tokens + o.tokens])
        logits, _ = causal_lm_forward(model, ids, torch.ones_like(ids))
        ref = token_logprobs(logits[:, :-1], ids[:, 1:])[0, len(o.prompt_tokens) - 1 :]
        torch.testing.assert_close(torch.tensor(o.logprobs), ref, atol=1e-5, rtol=0)


def test_weight_swap_between_decode_steps_changes_version_mid_sequence():
    model, other = tiny_gpt(0), tiny_gpt(1)
    new_weights = {k: v * 3 for k, v in other.state_dict().items()}
    prompts = [[3, 4], [6, 7, 8]]
    kwargs = dict(max_new_tokens=6, eos_id=-1, pad_id=0)  # eos -1 never matches: run to the limit
    plain = sample_batch(tiny_gpt(0), prompts, generator=torch.Generator().manual_seed(0), **kwargs)
    calls = {"n": 0}

    def on_step() -> int:
        calls["n"] += 1
        if calls["n"] == 2:  # after two tokens: swap weights in flight, keep the KV cache
            model.load_state_dict(new_weights)
        return 1 if calls["n"] >= 2 else 0

    outs = sample_batch(model, prompts, generator=torch.Generator().manual_seed(0), on_step=on_step, **kwargs)
    for o, p in zip(outs, plain):
        assert o.versions == [0, 0, 1, 1, 1, 1]
        assert not o.finished  # cut at the length limit
        assert o.tokens[:2] == p.tokens[:2] and o.logprobs[:2] == p.logprobs[:2]
        # from the swap on, tokens come from the new weights
        assert o.logprobs[2] != p.logprobs[2]


def test_each_sequence_stops_at_its_own_limit_with_the_same_tokens():
    """An environment's turns have budgets of their own: a sequence stops at its limit (cut, not
    finished) and what it sampled up to there is what an unlimited decode samples."""
    model = tiny_gpt(3)
    prompts = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]
    free = sample_batch(model, prompts, max_new_tokens=8, eos_id=99, pad_id=0, generator=torch.Generator().manual_seed(4))
    cut = sample_batch(model, prompts, max_new_tokens=8, eos_id=99, pad_id=0, generator=torch.Generator().manual_seed(4),
                       limits=[2, 8, 5])  # fmt: skip
    assert [len(c.tokens) for c in cut] == [2, 8, 5] and not any(c.finished for c in cut)
    for f, c in zip(free, cut):
        assert c.tokens == f.tokens[: len(c.tokens)]
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(f.logprobs[: len(c.tokens)]), atol=1e-5, rtol=0)
