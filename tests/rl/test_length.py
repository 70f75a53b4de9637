"""Forced interruption (budget, phrase, marker, answer budget, loss mask) and the DAPO overlong penalty."""

from __future__ import annotations

import random

import pytest
import torch

from workbench.errors import UserError
from workbench.rl.length import ForcedInterruption, from_config, overlong_penalty, resolve_tokens
from workbench.rl.recipe import LengthControlConfig

PHRASE = [90, 91, 92, 99]  # ends with the end-of-thinking marker 99
END = [99]


def make(max_new=100, lo=0.5, hi=0.6, answer=0.2, end=END):
    return ForcedInterruption(PHRASE, max_new, lo, hi, answer, end_think_ids=end)


def test_budgets_resolve_fractions_and_absolute_counts():
    fi = make()
    assert (fi.budget_min, fi.budget_max, fi.max_answer_tokens) == (50, 60, 20)
    fi = ForcedInterruption(PHRASE, 16384, 10240, 12288, 2048)
    assert (fi.budget_min, fi.budget_max, fi.max_answer_tokens) == (10240, 12288, 2048)
    assert resolve_tokens(1.0, 64, "x") == 64 and resolve_tokens(2.0, 64, "x") == 2


@pytest.mark.parametrize("rng", [random.Random(0), torch.Generator().manual_seed(0)])
def test_drawn_budgets_cover_the_range_and_stay_inside(rng):
    fi = make()
    draws = {fi.draw_budget(rng) for _ in range(2000)}
    assert min(draws) == 50 and max(draws) == 60 and draws <= set(range(50, 61))


def test_phrase_is_forced_at_the_budget_and_masked_out():
    fi = make()
    st = fi.start(5)
    seq = []
    for i in range(4):
        seq.append(i)
        assert st.after_token(i) is None
    seq.append(4)
    forced = st.after_token(4)
    assert forced == PHRASE
    seq += forced
    assert st.interrupted and list(st.forced_positions) == [5, 6, 7, 8]
    for tok in (10, 11, 99, 12):  # answer tokens; a later marker changes nothing
        seq.append(tok)
        assert st.after_token(tok) is None
    assert st.loss_mask == [1] * 5 + [0] * 4 + [1] * 4
    assert len(st.loss_mask) == len(seq)
    # forced tokens are exactly the phrase
    assert [t for t, m in zip(seq, st.loss_mask) if m == 0] == PHRASE


def test_answer_budget_after_the_interruption_is_respected():
    fi = make()  # answer budget 20
    st = fi.start(3)
    for t in range(3):
        st.after_token(t)
    n_answer = 0
    while not st.done():
        st.after_token(7)
        n_answer += 1
    assert n_answer == fi.max_answer_tokens == 20
    assert st.n == 3 + len(PHRASE) + 20
    assert st.done(n_generated=st.n) and not st.done(n_generated=st.n - 1)


def test_no_interruption_when_the_marker_came_before_the_budget():
    fi = make()
    st = fi.start(5)
    for tok in (1, 2, 99, 3, 4, 5, 6, 7, 8):
        assert st.after_token(tok) is None
    assert st.thinking_closed and not st.interrupted and st.answer_start == 3
    assert not st.done() and st.loss_mask == [1] * 9
    assert list(st.forced_positions) == []


def test_multi_token_marker_is_matched_as_a_sequence():
    fi = make(end=[98, 99])
    st = fi.start(4)
    assert st.after_token(99) is None  # second half alone is not the marker
    assert st.after_token(98) is None
    assert st.after_token(99) is None and st.thinking_closed
    st = fi.start(2)
    st.after_token(98)
    assert st.after_token(5) == PHRASE  # a broken marker does not count


def test_force_after_for_two_phase_generation():
    fi = make()
    assert fi.force_after([1, 2, 3, 4, 5], budget=5) == PHRASE
    assert fi.force_after([1, 99, 3, 4, 5], budget=5) is None
    assert fi.force_after([1, 2, 3], budget=5) is None  # ended by itself before the budget


class CharTokenizer:
    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]


def test_from_config_encodes_phrase_and_marker():
    cfg = LengthControlConfig(phrase="Stop. </think>", budget_min=0.25, budget_max=0.5, answer_budget=0.25)
    fi = from_config(cfg, 100, CharTokenizer())
    assert fi.phrase_ids == [ord(c) for c in "Stop. </think>"]
    assert fi.end_think_ids == [ord(c) for c in "</think>"]
    st = fi.start(50)
    for c in "x</think>":
        assert st.after_token(ord(c)) is None
    assert st.thinking_closed
    with pytest.raises(UserError, match="must contain the end-of-thinking marker"):
        ForcedInterruption.from_config(LengthControlConfig(phrase="Stop."), 100, CharTokenizer())


def test_configurations_that_cannot_fit_are_refused():
    with pytest.raises(UserError, match="does not fit in max_new_tokens = 8"):
        ForcedInterruption.from_config(LengthControlConfig(), 8, CharTokenizer())
    with pytest.raises(UserError, match="budget_min <= budget_max"):
        make(lo=0.6, hi=0.5)
    with pytest.raises(UserError, match="no token"):
        ForcedInterruption([], 100, 0.5, 0.6, 0.2)


def test_overlong_penalty_values():
    lengths = torch.tensor([0, 60, 70, 75, 80, 81, 100])
    pen = overlong_penalty(lengths, 100, l_max=0.8, l_cache=0.2)  # L = 80, C = 20
    assert torch.allclose(pen, torch.tensor([0.0, 0.0, -0.5, -0.75, -1.0, -1.0, -1.0]))
    # the paper's setting in absolute tokens: L_max 14k, L_cache 2k
    pen = overlong_penalty(torch.tensor([12000, 13000, 14000, 14001]), 16384, 14000, 2000)
    assert torch.allclose(pen, torch.tensor([0.0, -0.5, -1.0, -1.0]))
    assert pen.dtype == torch.float32
    with pytest.raises(UserError, match="l_cache <= l_max"):
        overlong_penalty(lengths, 100, l_max=0.1, l_cache=0.2)


def test_a_bpe_tokenizer_closes_thinking_however_the_marker_is_spelled():
    from tests.helpers.tiny_hf import train_bpe

    tok = train_bpe(["12+34=46", "</think> </think>"], "qwen2")
    cfg = LengthControlConfig(phrase="Time is up. </think>", budget_min=20, budget_max=20, answer_budget=4)
    fi = from_config(cfg, 120, tok)
    assert len(fi.phrase_ids) > 1 and tok.decode(fi.phrase_ids) == cfg.phrase  # multi-token, same text back
    merged = tok.encode("</think>", add_special_tokens=False)
    spelled = [tok.encode(c, add_special_tokens=False)[0] for c in "</think>"]  # one token per character
    assert spelled != merged and tok.decode(spelled) == "</think>"
    for marker in (merged, spelled):
        st = fi.start(20)
        for t in tok.encode("12", add_special_tokens=False) + marker:
            assert st.after_token(t) is None
        assert st.thinking_closed
        assert fi.force_after(tok.encode("12", add_special_tokens=False) + marker + [7] * 30, 20) is None
    st = fi.start(20)
    forced = next(f for f in (st.after_token(t) for t in [7] * 20) if f)
    assert forced == fi.phrase_ids and st.loss_mask == [1] * 20 + [0] * len(fi.phrase_ids)
