"""A push while a real vLLM generator decodes, shared by test_backend_engine.py (full weights) and
test_backend_lora.py (an adapter): the push lands before the third engine step, and each token
must be credited to the version that sampled it."""

from __future__ import annotations

from typing import Any, Callable


def check_push_before_third_step(gen: Any, weights: Callable[[], Any], chunk_id: int) -> None:
    """Generate 4 completions for each of 2 prompts, pushing `weights()` as the next version
    before the third engine step; assert the swap is credited per token."""
    calls, v0 = {"n": 0}, gen.version
    apply = gen._apply_pending

    def push_on_third_step():
        calls["n"] += 1
        if calls["n"] == 5:  # calls 1-2: start of generate and of the decode; calls 3-5: before engine steps 1-3
            gen.set_weights(weights(), v0 + 1)
        return apply()

    gen._apply_pending = push_on_third_step
    try:
        chunk = gen.generate(chunk_id, [0, 1], 4, seed=4)
    finally:
        del gen._apply_pending
    comps = [c for g in chunk.groups for c in g.completions]
    long = [c for c in comps if len(c.tokens) >= 4]
    assert chunk.weight_swaps == 1 and all(c.versions == sorted(c.versions) for c in comps)
    assert long and all(c.versions[:2] == [v0, v0] and c.versions[-1] == v0 + 1 for c in long)
