"""An environment trained end to end: a real Ray local cluster, a tiny Qwen2-shaped model with its BPE
tokenizer, a turn-based guessing game whose reset fails for a third of its rows. The run finishes its
steps; each step logs env/* and train/sampled_tokens / train/env_tokens; the failing rows' groups are
dropped and counted (reward/dropped_groups, env/errors) and the first fault is said once in events.log;
the kept samples hold whole conversations (the game's replies between the model's turns)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.engine.run.launch import run_to_end
from workbench.runs.samples import read_samples
from workbench.tracking.sink import read_jsonl

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _fixtures_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "helpers"))


def test_a_flaky_game_trains_and_its_faults_are_counted(ray_cluster, tiny_config, tmp_path, capsys):
    from tests.helpers.tiny_hf import build_tiny_hf

    rows = tmp_path / "games.jsonl"
    rows.write_text("".join(json.dumps({"prompt": "", "target": 1 + i % 4, "n": i}) + "\n" for i in range(40)))
    model = build_tiny_hf(tmp_path / "m", "qwen2", corpus=["Let's play a game. Guess it: reply with one number.",
                                                           "Higher. Lower. 1 2 3 4"], max_positions=1024)  # fmt: skip
    cfg = tiny_config({"model": {"path": str(model)},
                       "task": {"name": "env", "env": "env_fixtures:SometimesRaises", "path": str(rows), "num_val": 8},
                       "env": {"max_turns": 2, "max_episode_tokens": 600}, "generation.max_new_tokens": 6,
                       "train.max_steps": 3, "eval.every_steps": 3, "eval.num_prompts": 8}, name="envrun")  # fmt: skip
    summary = run_to_end(cfg, resume=False, timeout=600)
    assert summary["status"] == "finished" and summary["steps"] == 3
    out = Path(cfg.out_dir)
    train = [r for r in read_jsonl(out / "metrics.jsonl") if "train/reward_mean" in r]
    assert len(train) == 3
    for r in train:
        assert 0.0 < r["env/turns_mean"] <= 2.0 and r["env/tool_calls_mean"] == 0.0  # an errored episode has no turn
        assert r["train/sampled_tokens"] > 0 and r["train/env_tokens"] >= 0
        assert r["env/episode_tokens_mean"] > 0
    assert sum(r["env/errors"] for r in train) > 0 and sum(r["reward/dropped_groups"] for r in train) > 0
    assert sum(r["reward/verdict/env_error"] for r in train) == sum(r["env/errors"] for r in train)
    from tests.docs.test_metrics_glossary import covered, glossary_keys

    written = {k for r in read_jsonl(out / "metrics.jsonl") for k in r} - {"step"}
    assert not [k for k in written if not covered(k, glossary_keys())]  # docs/metrics.md explains every key
    events = (out / "events.log").read_text()
    assert events.count("environment error") == 1 and "simulator unreachable" in events
    kept = read_samples(out, kind="train")
    assert len(kept), "no samples kept"
    assert kept["prompt"].str.contains("I am thinking of a whole number").all()  # reset's text: the user turn
    two_turns = kept[kept["completion"].str.contains("guesses left")]  # the game's reply between the model's turns
    assert len(two_turns) and two_turns["completion"].str.contains("<|im_start|>user", regex=False).all()
    from workbench.cli import main

    assert main(["samples", str(out), "--train", "--full", "--contains", "guesses left"]) == 0  # the terminal: turn by turn
    shown = capsys.readouterr().out
    assert "── assistant ──" in shown and "── user ──" in shown and "guesses left" in shown


def test_an_environment_that_always_fails_stops_the_run_in_one_line(ray_cluster, tiny_config, tmp_path):
    from tests.helpers.tiny_hf import build_tiny_hf
    from workbench.engine.run.handle import RunFailed

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"Add {i} and 1.", "answer": i + 1}) + "\n" for i in range(30)))
    model = build_tiny_hf(tmp_path / "m", "qwen2", corpus=["Add 1 and 2."], max_positions=4096)
    cfg = tiny_config({"model": {"path": str(model)},
                       "task": {"name": "env", "env": "env_fixtures:ResetRaises", "path": str(rows), "num_val": 4},
                       "env": {"max_episode_tokens": 3000}, "generation.max_new_tokens": 6,
                       "train.max_steps": 3, "eval.num_prompts": 4}, name="envbroken")  # fmt: skip
    with pytest.raises(RunFailed, match=r"the environment failed in every episode of 3 chunks in a row.*ResetRaises.reset raised KeyError"):
        run_to_end(cfg, resume=False, timeout=300)


def test_on_vllm_cpu_an_environments_validation_runs_on_a_vllm_engine_with_the_trained_weights(ray_cluster, tiny_config, tmp_path):
    """generation.backend=vllm on a CPU run: the generator and the evaluator are both vLLM-CPU engines
    (plan/build.evaluator_on_vllm: each turn's context comes from the prefix cache); the evaluation
    after the last step samples the weights the trainer pushed, as the one at step 0 the start's."""
    pytest.importorskip("vllm")
    from tests.helpers.tiny_hf import build_tiny_hf

    rows = tmp_path / "games.jsonl"
    rows.write_text("".join(json.dumps({"prompt": "", "target": 1 + i % 4, "low": 1, "high": 4, "n": i}) + "\n" for i in range(40)))
    model = build_tiny_hf(tmp_path / "m", "qwen2", corpus=["Let's play a game. Guess it: reply with one number.",
                                                           "Higher. Lower. 1 2 3 4"], hidden=128, max_positions=1024)  # fmt: skip
    cfg = tiny_config({"model": {"path": str(model)}, "generation.backend": "vllm",
                       "task": {"name": "env", "env": "workbench.envs.guess:GuessNumberEnv", "path": str(rows), "num_val": 8},
                       "env": {"max_turns": 3, "max_episode_tokens": 600}, "generation.max_new_tokens": 6,
                       "train.max_steps": 2, "eval.every_steps": 2, "eval.num_prompts": 8, "eval.samples_per_prompt": 2},
                      name="envvllm")  # fmt: skip
    summary = run_to_end(cfg, resume=False, timeout=900)
    assert summary["status"] == "finished" and summary["steps"] == 2
    rows_out = read_jsonl(Path(cfg.out_dir) / "metrics.jsonl")
    evals = {int(r["step"]): r for r in rows_out if "val/pass_rate" in r}
    assert sorted(evals) == [0, 2]
    trained = max(r["policy/version"] for r in rows_out if "train/skipped" in r)  # a step all filtered trains nothing
    assert trained >= 1 and evals[0]["policy/version"] == 0
    assert evals[2]["policy/version"] == trained  # the trainer's last weights reached the evaluator's engine
    assert all(r["val/tokens"] > 0 and 0.0 <= r["val/pass_rate"] <= 1.0 for r in evals.values())
