"""benchmarks/bench_env_vs_trl.py and its env_trl_sides.py without a model or Ray: the settings both sides
get (TRL's GRPOConfig read from the workbench run's config), the rows TRL trains on, the budget's clock,
the comparison, the prompt check, the kept scores and the resumable schedule.

    .venv/bin/python -m pytest tests/test_bench_env_vs_trl.py -q
"""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_env_vs_trl

    return bench_env_vs_trl


@pytest.fixture
def env_sides(bench):
    """benchmarks/env_trl_sides.py: the settings, the runs and the scores of the two sides."""
    import env_trl_sides

    return env_trl_sides


def args(bench, tmp_path, *extra: str) -> argparse.Namespace:
    return bench.parse(["--work", str(tmp_path / "work"), "--cache", str(tmp_path / "cache"), *extra])


@pytest.fixture
def setup(bench, env_sides, tmp_path):
    """(args, settings of seed 3) on 200 few-shot calculator rows and a template file."""
    from workbench.envs.calculator import write_jsonl

    a = args(bench, tmp_path, "--every", "3", "--minutes", "20", "--eval-prompts", "16")
    template = tmp_path / "qwen2_5.jinja"
    template.write_text("{{ messages }}")
    data = write_jsonl(tmp_path / "calc.jsonl", 200, 0, few_shot=True)
    return a, env_sides.run_settings(a, tmp_path / "model", data, template, 3)


# --- the settings ---------------------------------------------------------------------------------
def test_trl_micro_batch_is_a_divisor_of_the_batch_within_the_workbench_micro_batch_tokens(env_sides):
    assert env_sides.micro_batch(64, 4096, 1280) == 2  # 3 sequences fit, 3 does not divide 64
    assert env_sides.micro_batch(64, 8192, 1000) == 8
    assert env_sides.micro_batch(6, 4096, 1000) == 3
    assert env_sides.micro_batch(64, 512, 1280) == 1  # not even one fits: one at a time


def test_trl_completion_budget_is_what_the_longest_prompt_leaves_of_the_episode(env_sides):
    assert env_sides.completion_budget(1280, 878, 48) == 402
    with pytest.raises(SystemExit, match="less than one turn"):
        env_sides.completion_budget(900, 878, 48)


def test_both_sides_get_the_configs_environment_with_the_bench_model_template_batch_and_budgets(bench, setup, tmp_path):
    from bench_env_learning import training_settings

    from workbench.config import run_config_from_dict

    a, settings = setup
    cfg = run_config_from_dict(settings)
    assert cfg.seed == 3 and cfg.task.env == "workbench.envs.calculator:CalculatorEnv" and cfg.task.name == "env"
    assert cfg.model.dtype == "float32" and cfg.model.chat_template == str(tmp_path / "qwen2_5.jinja")
    assert (cfg.train.prompts_per_step, cfg.train.generations_per_prompt, cfg.train.lr, cfg.train.warmup_steps) == (8, 8, 3e-5, 0)
    assert (cfg.generation.max_new_tokens, cfg.generation.temperature, cfg.env.max_turns, cfg.env.max_episode_tokens) == (48, 1.0, 3, 1280)
    assert cfg.recipe.loss.type == "cispo" and cfg.recipe.length_control.type == "none"  # the config's scalerl
    assert (cfg.eval.num_prompts, cfg.eval.samples_per_prompt) == (16, 2) and not cfg.tracking.mlflow
    run = run_config_from_dict(training_settings(settings, a.every))
    assert not run.eval.enabled  # no evaluation (no evaluator) in the run: nothing inside its clock
    assert run.checkpoint.every_steps == 3 and run.checkpoint.keep > run.train.max_steps // 3


def test_trl_config_is_read_from_the_workbench_run(bench, env_sides, setup, tmp_path):
    from workbench.config import run_config_from_dict

    a, settings = setup
    rows = env_sides.train_rows(settings)
    spec = env_sides.trl_spec(a, settings, tmp_path / "out", 878, rows)
    t = run_config_from_dict(settings).train
    assert (spec["turn_tokens"], spec["max_turns"], spec["completion_tokens"], spec["micro_batch"]) == (48, 3, 402, 1)  # micro_batch_tokens 2048: one row of 1,280 at a time
    assert (spec["prompts"], spec["generations"], spec["lr"], spec["eps_max"], spec["save_steps"]) == (8, 8, 3e-5, 4.0, 3)
    assert (spec["weight_decay"], spec["adam_eps"], spec["adam_betas"], spec["grad_clip"]) == (t.weight_decay, t.adam_eps, list(t.adam_betas), t.grad_clip)
    assert spec["budget_s"] == 1200.0 and spec["chat_template"] == settings["model"]["chat_template"]
    assert spec["env"] == settings["task"]["env"] and spec["model"] == str(tmp_path / "model") and spec["seed"] == 3
    assert spec["check_rows"] == rows[: env_sides.CHECK_ROWS]
    b = args(bench, tmp_path, "--every", "3", "--minutes", "20", "--trl-minutes", "90", "--trl-every", "1")
    longer = env_sides.trl_spec(b, settings, tmp_path / "out", 878, rows)
    assert (longer["budget_s"], longer["save_steps"]) == (5400.0, 1)  # TRL's own budget and checkpoints
    assert (env_sides.budget_seconds(b, "workbench"), b.every) == (1200.0, 3)  # the workbench's unchanged


def test_trl_trains_on_the_workbench_training_split_row_for_row(env_sides, setup):
    from workbench.config import run_config_from_dict
    from workbench.tasks.base import load_task

    _, settings = setup
    task = load_task(run_config_from_dict(settings).task)
    rows = env_sides.train_rows(settings)
    assert rows == [dict(ex.columns) for ex in task.train] and len(task.val) == 64  # the config's num_val held out
    assert 100 < len(rows) <= 200 - 64  # repeated rows kept once
    assert set(rows[0]) == {"prompt", "answer", "kind"} and isinstance(rows[0]["prompt"], list)  # TRL's conversational rows
    held = {json.dumps(ex.columns, sort_keys=True) for ex in task.val}
    assert not held & {json.dumps(r, sort_keys=True) for r in rows}


def test_grpo_config_maps_turns_tokens_and_the_batch(env_sides, setup, tmp_path):
    pytest.importorskip("trl")
    from trl import GRPOConfig
    from vs_trl import trl_config
    from vs_trl_env import trl_env_args

    a, settings = setup
    spec = env_sides.trl_spec(a, settings, tmp_path / "out", 878, [])
    kw = trl_env_args(spec)
    c = GRPOConfig(**kw)
    assert c.max_tool_calling_iterations == 2  # 3 turns: 2 tool rounds, 3 generation calls
    assert c.generation_kwargs == {"max_new_tokens": 48} and c.max_completion_length == 402  # a turn's cap, the episode's
    assert (c.per_device_train_batch_size, c.gradient_accumulation_steps, c.generation_batch_size, c.steps_per_generation) == (1, 64, 64, 64)
    assert c.num_generations == 8 and not c.bf16 and c.use_cpu and c.save_steps == 3 and c.max_steps == a.max_steps
    # the single-turn bench's choices, unchanged: loss, advantages, AdamW, sampling
    single = trl_config({**spec, "steps": spec["max_steps"], "tokens": 48, "vllm": False, "max_model_len": 0})
    same = ("loss_type", "epsilon_high", "scale_rewards", "beta", "num_iterations", "temperature", "top_p", "top_k",
            "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay", "adam_epsilon", "adam_beta1",
            "adam_beta2", "max_grad_norm", "save_only_model", "seed")  # fmt: skip
    assert {k: getattr(c, k) for k in same} == {k: getattr(single, k) for k in same}
    with pytest.raises(ValueError, match="does not divide"):
        trl_env_args({**spec, "micro_batch": 3})


# --- the clock ------------------------------------------------------------------------------------
def P(step, rate, wall, se=0.05):
    from bench_vs_trl import Point  # on the path: the tests that call P take `bench` (or `env_sides`, through it)

    return Point(step, rate, se, wall)


def test_a_sides_points_end_at_the_first_at_or_past_the_budget(env_sides):
    pts = [P(s, 0.1, w) for s, w in [(4, 190.0), (0, 0.0), (2, 100.0), (6, 260.0), (8, 330.0)]]
    assert [p.step for p in env_sides.within_budget(pts, 200.0)] == [0, 2, 4, 6]  # step 6 is the step that reached it
    assert [p.step for p in env_sides.within_budget(pts, 190.0)] == [0, 2, 4]
    assert [p.step for p in env_sides.within_budget(pts, 1e9)] == [0, 2, 4, 6, 8]


def test_the_workbench_budget_step_counts_its_clock_without_saves_or_evaluations(env_sides):
    rows = [{"step": 1, "compute/wall_seconds": 30.0}, {"step": 2, "compute/wall_seconds": 60.0},
            {"step": 2, "val/pass_rate": 0.1, "compute/wall_seconds": 999.0},  # an evaluation row: not a step
            {"step": 3, "compute/wall_seconds": 95.0}]  # fmt: skip
    saves = {2: 5.0}  # saved after step 2: inside step 3's run clock
    assert env_sides.budget_step(rows, saves, 90.0) == 3
    assert env_sides.budget_step(rows, saves, 91.0) is None
    assert env_sides.budget_step(rows, {}, 60.0) == 2
    assert env_sides.budget_step([], {}, 1.0) is None


def test_the_workbench_is_asked_to_stop_once_its_clock_reaches_the_budget(env_sides, tmp_path):
    class Watch:
        rows = [(1.0, {"step": 1, "compute/wall_seconds": 40.0}), (2.0, {"step": 2, "compute/wall_seconds": 80.0})]
        saves = {1: (41.0, 43.0)}

    done = threading.Event()
    t = threading.Thread(target=env_sides.stop_at_budget, args=(Watch(), tmp_path, 200.0, done, 0.001))
    t.start()
    t.join(0.2)
    assert t.is_alive() and not (tmp_path / "stop_request").exists()  # under the budget: still watching
    done.set()
    t.join(2)
    env_sides.stop_at_budget(Watch(), tmp_path, 78.0, threading.Event(), every=0.001)  # 80 - 2 s of saves = 78
    assert "at step 2" in (tmp_path / "stop_request").read_text()


# --- the comparison -------------------------------------------------------------------------------
def test_each_side_is_timed_to_the_highest_pass_rate_both_reach(bench, env_sides):
    S = env_sides.EnvSide
    trl = S("trl", [P(0, 0.05, 0.0), P(2, 0.20, 1500.0), P(3, 0.25, 2300.0)], seed=0)
    wb = S("workbench", [P(0, 0.05, 0.0), P(2, 0.15, 200.0), P(4, 0.30, 420.0), P(6, 0.45, 640.0)], seed=0)
    c = bench.compare_env(trl, wb)
    assert c["target"] == 0.25 and c["target_from"] == "common" and c["gained"]  # TRL's best: the lower of the two
    assert (c["trl_step"], c["trl_s"], c["workbench_step"], c["workbench_s"]) == (3, 2300.0, 4, 420.0)
    assert c["ratio"] == pytest.approx(420.0 / 2300.0) and c["met"]
    given = bench.compare_env(trl, wb, target=0.2)
    assert (given["trl_s"], given["workbench_s"], given["target_from"]) == (1500.0, 420.0, "given")
    beyond = bench.compare_env(trl, wb, target=0.4)  # TRL never reaches it
    assert beyond["ratio"] is None and beyond["trl_s"] is None and beyond["workbench_s"] == 640.0
    flat = bench.compare_env(S("trl", [P(0, 0.05, 0.0), P(2, 0.05, 900.0)], seed=0), wb)
    assert not flat["gained"] and flat["ratio"] is None  # nothing learned: no time to compare, not a ratio of 0


def test_comparisons_pair_each_seed_and_spread_over_seeds(bench, env_sides):
    S = env_sides.EnvSide
    sides = [S("trl", [P(0, 0.1, 0.0), P(2, 0.3, 1000.0)], seed=0),
             S("workbench", [P(0, 0.1, 0.0), P(4, 0.3, 250.0)], seed=0),
             S("trl", [P(0, 0.1, 0.0), P(2, 0.3, 800.0)], seed=1),
             S("workbench", error="workbench run failed: x", seed=1),
             S("trl", [P(0, 0.1, 0.0), P(2, 0.2, 800.0)], seed=2),
             S("workbench", [P(0, 0.1, 0.0), P(2, 0.4, 400.0)], seed=2)]  # fmt: skip
    comps = bench.comparisons_env(sides)
    assert [(c["seed"], c["ratio"]) for c in comps] == [(0, 0.25), (2, 0.5)]  # seed 1's workbench has no figures
    (sp,) = bench.spread(comps)
    assert (sp["mean"], sp["min"], sp["max"], sp["met"]) == (pytest.approx(0.375), 0.25, 0.5, True)
    printed = bench.table(sides, comps)
    assert "ratio workbench/TRL 0.25" in printed and "did not run: workbench run failed: x" in printed


# --- the prompt check -----------------------------------------------------------------------------
def test_the_prompt_check_finds_the_first_differing_token(bench, env_sides):
    assert env_sides.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert env_sides.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert env_sides.first_difference([1, 2], [1, 2, 3]) == 2  # a prefix differs at its end
    ours = {"prompt_ids": [[1, 2, 3], [4, 5]], "suffix_ids": [7, 8]}
    same = env_sides.check_prompts(ours, {"prompt_ids": [[1, 2, 3], [4, 5]], "suffix_ids": [7, 8], "error": None})
    assert same["identical"] and same["first_difference"] == [None, None] and "= the workbench's on 2" in bench.prompt_line(same)
    other = env_sides.check_prompts(ours, {"prompt_ids": [[1, 2, 3], [4, 6]], "suffix_ids": [7, 8, 9], "error": None})
    assert other["identical"] is False and other["first_difference"] == [None, 1] and other["suffix_first_difference"] == 2
    assert "DIFFER" in bench.prompt_line(other)
    fewer = env_sides.check_prompts(ours, {"prompt_ids": [[1, 2, 3]], "suffix_ids": [7, 8], "error": None})
    assert fewer["identical"] is False  # a row TRL did not render is no match
    failed = env_sides.check_prompts(ours, {"prompt_ids": [], "suffix_ids": [], "error": "AttributeError: x"})
    assert failed["identical"] is None and "AttributeError" in bench.prompt_line(failed)


# --- scores kept, sides resumed -------------------------------------------------------------------
def test_scores_are_kept_and_step_zero_is_scored_once_for_both_sides(env_sides, setup, tmp_path):
    _, settings = setup
    calls = []

    def score(s, path, step):
        calls.append((path, step))
        return 0.1 * (step + 1), 0.01

    book = env_sides.ScoreBook(tmp_path / "scores.jsonl", score)
    assert book.get("trl", settings, 0, lambda: "unused") == (0.1, 0.01)
    assert book.get("workbench", settings, 0, lambda: "unused") == (0.1, 0.01)  # the same base model
    assert book.get("trl", settings, 2, lambda: "ckpt-2") == (pytest.approx(0.3), 0.01)
    assert calls == [(settings["model"]["path"], 0), ("ckpt-2", 2)]
    again = env_sides.ScoreBook(tmp_path / "scores.jsonl", score)  # a resumed bench
    assert again.get("trl", settings, 2, lambda: pytest.fail("a kept score is not scored again")) == (pytest.approx(0.3), 0.01)
    assert again.get("workbench", settings, 2, lambda: "wb-2") == (pytest.approx(0.3), 0.01) and calls[-1] == ("wb-2", 2)
    other = {**settings, "seed": 4}
    again.get("trl", other, 0, lambda: "unused")
    assert calls[-1] == (settings["model"]["path"], 0) and len(calls) == 4  # another seed: scored on its own


def test_the_sides_run_interleaved_and_a_finished_side_is_read_not_rerun(bench, env_sides, monkeypatch, tmp_path, capsys):
    import workbench.engine.model.gguf as gguf

    template = tmp_path / "qwen2_5.jinja"
    template.write_text("{{ messages }}")
    monkeypatch.setattr(bench, "qwen_template", lambda: template)
    monkeypatch.setattr(gguf, "smollm2_path", lambda: tmp_path / "smollm2.gguf")
    monkeypatch.setattr(gguf, "gguf_folder", lambda path, **kw: tmp_path / "model")
    monkeypatch.setattr(bench, "workbench_renderer", lambda settings: lambda rows: {"prompt_ids": [], "suffix_ids": []})
    monkeypatch.setattr(bench, "longest_prompt", lambda settings, render: 878)
    ran = []

    def fake_trl(a, settings, work, book, longest, render):
        ran.append((settings["seed"], "trl"))
        return env_sides.EnvSide("trl", [P(0, 0.1, 0.0), P(2, 0.3, 1000.0)], seed=settings["seed"], steps=2, train_s=1000.0)

    def fake_workbench(a, settings, work, book):
        ran.append((settings["seed"], "workbench"))
        return env_sides.EnvSide("workbench", [P(0, 0.1, 0.0), P(4, 0.3, 300.0)], seed=settings["seed"], steps=4, train_s=300.0)

    monkeypatch.setattr(bench, "run_trl", fake_trl)
    monkeypatch.setattr(bench, "run_workbench", fake_workbench)
    from workbench.envs.calculator import write_jsonl

    data = write_jsonl(tmp_path / "calc.jsonl", 120, 0, few_shot=True)
    argv = ["--work", str(tmp_path / "w"), "--data", str(data), "--json"]
    assert bench.main([*argv, "--seeds", "0", "1"]) == 0
    assert ran == [(0, "trl"), (0, "workbench"), (1, "trl"), (1, "workbench")]
    got = json.loads(capsys.readouterr().out)
    assert [(c["seed"], c["ratio"]) for c in got["comparisons"]] == [(0, 0.3), (1, 0.3)]
    assert got["trl_mapping"]["max_turns"] == 3 and got["trl_mapping"]["completion_tokens"] == 1280 - 878
    assert bench.main([*argv, "--seeds", "1", "2", "--sides", "workbench,trl"]) == 0
    assert ran[4:] == [(2, "workbench"), (2, "trl")]  # seed 1's sides were read from their side.json
    got = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["seed"], s["steps"]) for s in got["sides"]][:2] == [("workbench", 1, 4), ("trl", 1, 2)]
    assert [c["seed"] for c in got["comparisons"]] == [1, 2]
