"""The real-vocabulary path in CI: a 2-layer model of Qwen2.5-0.5B's shape with the full
151,936-token vocabulary (random weights, a BPE tokenizer padded to it) through the vLLM-CPU
generator, the bf16 trainer and a weight push after every step: 2 steps of 2 prompts x 2
completions of 32 tokens (benchmarks/bench_real_shape.py at CI size; the benchmark runs all 24 layers)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")


@pytest.mark.long  # the GGUF test (tests/engine/run/test_gguf_model.py) is CI's real vocabulary through vLLM
def test_a_full_vocabulary_model_trains_through_vllm_and_the_bf16_trainer(tmp_path):
    from benchmarks.bench_real_shape import VOCAB, hash_checker, parse_args, run_engine

    a = parse_args(["--steps", "2", "--layers", "2", "--prompts", "2", "--generations", "2", "--tokens", "32"])
    e = run_engine(a, tmp_path)  # asserts on the way that every id in [0, 151936) decodes
    config = json.loads((e.model / "config.json").read_text())
    assert (config["vocab_size"], config["hidden_size"], config["num_hidden_layers"], config["tie_word_embeddings"]) == (VOCAB, 896, 2, True)
    assert len(e.tokenizer) == VOCAB and e.tokenizer.decode([VOCAB - 1])  # the last padded id decodes to text
    assert [r["step"] for r in e.rows] == [1, 2] and [r["policy/version"] for r in e.rows] == [1.0, 2.0]
    for r in e.rows:  # every sequence trains (the hash checker, zero-variance filter off), no step skipped
        assert r["train/sequences_trained"] == 4 and r["train/skipped"] == 0 and r["train/nonfinite"] == 0
        assert 0 < r["train/response_len"] <= 32 and r["time/weight_gather"] > 0  # the step's push was gathered
    # at step 1 the generator (vLLM, bf16 with the fp32 head) and the trainer agree on the sampled tokens' log-probs
    assert e.rows[0]["train/ratio_mean"] == pytest.approx(1.0, abs=0.02)
    summary = json.loads((e.cfg.output_dir() / "summary.json").read_text())
    assert summary["generation"]["backend"] == "vllm" and summary["generation"]["fp32_head"] == "patched"
    assert summary["trainer_restarts"] == 0 and {"generator", "trainer"} <= set(e.peaks)
    verdicts = summary["reward_verdicts"]
    assert verdicts["pass"] + verdicts["fail"] == 8
    assert 400 < sum(hash_checker(f"completion {i}", "") for i in range(1000)) < 600  # passes about half
