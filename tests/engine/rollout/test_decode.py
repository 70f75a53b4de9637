"""The vLLM decode loop (decode.py) against a scripted engine: per-token log-probs and versions,
finish states, forced interruption in two phases, internal request ids, loud failures, and work
per token that does not grow with the generation's length."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.engine.rollout.scripted import EOS, CountingList, ScriptedEngine, params
from workbench.engine.rollout.vllm import decode as vg
from workbench.errors import UserError
from workbench.rl.length import ForcedInterruption


def test_decode_records_sampled_logprobs_versions_and_finish_state():
    plans = {5: [4, 6, EOS], 6: [4, 4, 4, 4, 4, 4]}
    engine = vg.StepEngine(ScriptedEngine(lambda ids: plans[ids[0]]))
    outs = vg.decode(engine, [[5, 3], [6]], make_params=params, max_new_tokens=4, max_model_len=64, version=2)
    a, b = outs
    assert a.prompt_tokens == [5, 3] and a.tokens == [4, 6, EOS] and a.finished
    assert a.logprobs == [-0.5, -1.5, -2.5]  # the sampled token's entry, not the decoy's
    assert b.tokens == [4, 4, 4, 4] and not b.finished  # cut at max_new_tokens
    assert all(c.sampled == [True] * len(c.tokens) and c.versions == [2] * len(c.tokens) for c in outs)


def test_decode_credits_tokens_to_the_version_in_force_at_their_step():
    versions = iter([0, 0, 3, 3, 3, 3])
    engine = vg.StepEngine(ScriptedEngine(lambda ids: [4] * 9))
    (c,) = vg.decode(engine, [[5]], make_params=params, max_new_tokens=5, max_model_len=64, on_step=lambda: next(versions))
    assert c.versions == [0, 0, 3, 3, 3]


def test_step_engine_maps_internal_request_ids_back():
    engine = vg.StepEngine(ScriptedEngine(lambda ids: [4, EOS], suffix="-a1b2c3"))
    (c,) = vg.decode(engine, [[5]], make_params=params, max_new_tokens=4, max_model_len=64)
    assert c.tokens == [4, EOS] and c.finished


def test_decode_fails_loudly_on_missing_outputs_abort_and_long_prompts():
    with pytest.raises(RuntimeError, match="without a final output"):
        vg.decode(vg.StepEngine(ScriptedEngine(lambda ids: [4], drop_finals=True)), [[5]], make_params=params, max_new_tokens=2, max_model_len=64)
    with pytest.raises(RuntimeError, match="finish_reason='abort'"):
        vg.decode(vg.StepEngine(ScriptedEngine(lambda ids: [4], reason="abort")), [[5]], make_params=params, max_new_tokens=2, max_model_len=64)
    with pytest.raises(UserError, match="max_model_len"):
        vg.decode(vg.StepEngine(ScriptedEngine(lambda ids: [4])), [[5] * 8], make_params=params, max_new_tokens=2, max_model_len=8)


def test_sampled_logprob_reads_logprob_objects_and_floats():
    assert vg.sampled_logprob({3: SimpleNamespace(logprob=-1.25)}, 3) == -1.25 and vg.sampled_logprob({3: -0.5}, 3) == -0.5
    with pytest.raises(RuntimeError, match="sampled token 4"):
        vg.sampled_logprob({3: -0.5}, 4)
    with pytest.raises(RuntimeError, match="no log-probs"):
        vg.sampled_logprob(None, 4)


def test_forced_interruption_runs_in_two_phases():
    phrase, marker = [90, 91, 99], 99
    fi = ForcedInterruption(phrase, 20, 4, 4, 3, end_think_ids=[marker])
    plans = {
        5: lambda ids: [4] * 30,  # never closes thinking: interrupted at 4, then a 3-token answer
        6: lambda ids: [4, marker, 4, 4, 4, 4, 4, 4] if len(ids) == 1 else [8] * 30,  # closed by itself
        7: lambda ids: [4, EOS],  # ends before the budget
    }
    raw = ScriptedEngine(lambda ids: plans[ids[0]](ids))
    outs = vg.decode(vg.StepEngine(raw), [[5], [6], [7]], make_params=params, max_new_tokens=20, max_model_len=64,
                     budgets=[4, 4, 4], interruption=fi)  # fmt: skip
    a, b, c = outs
    assert a.interrupted and not a.finished
    assert a.tokens == [4] * 4 + phrase + [4] * 3
    assert a.sampled == [True] * 4 + [False] * 3 + [True] * 3
    assert len(a.logprobs) == len(a.versions) == len(a.tokens)
    cont = {rid: (ids, p) for rid, ids, p in raw.added}
    assert cont["wb0p1"][0] == [5] + [4] * 4 + phrase and cont["wb0p1"][1].max_tokens == 3
    assert cont["wb0p0"][1].max_tokens == 4
    assert not b.interrupted and b.tokens[:4] == [4, marker, 4, 4] and len(b.tokens) == 20
    assert cont["wb1p1"][0] == [6, 4, marker, 4, 4] and cont["wb1p1"][1].max_tokens == 16
    assert c.tokens == [4, EOS] and c.finished and "wb2p1" not in cont


def test_batch_engine_runs_queued_requests_with_llm_generate():
    calls = []

    class LLM:
        def generate(self, prompts, sps, use_tqdm):
            calls.append(len(prompts))
            res = [SimpleNamespace(token_ids=[4, EOS], logprobs=[{4: -0.1}, {EOS: -0.2}], finish_reason="stop")]
            return [SimpleNamespace(request_id="x", finished=True, outputs=res) for _ in prompts]

    outs = vg.decode(vg.BatchEngine(LLM()), [[5], [6]], make_params=params, max_new_tokens=4, max_model_len=64,
                     on_step=lambda: 9)  # fmt: skip
    assert calls == [2] and all(c.tokens == [4, EOS] and c.versions == [9, 9] and c.finished for c in outs)




def _reads_per_token(n: int) -> float:
    CountingList.reads = 0
    engine = vg.StepEngine(ScriptedEngine(lambda ids: [4] * (n + 1), seq=CountingList))
    (c,) = vg.decode(engine, [[5]], make_params=params, max_new_tokens=n, max_model_len=n + 8)
    assert len(c.tokens) == n
    return CountingList.reads / n


def test_decode_reads_each_token_once_whatever_the_length():
    # vLLM's cumulative outputs hand back the whole growing list at every step: copying it all
    # made a generation quadratic (16k tokens: minutes). The loop must read only the new tokens.
    short, long = _reads_per_token(200), _reads_per_token(1600)
    assert long <= 2.0 and long == pytest.approx(short, abs=0.05)  # one token id + one log-prob entry
