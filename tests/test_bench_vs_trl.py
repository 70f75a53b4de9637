"""benchmarks/bench_vs_trl.py without TRL or a model: the shared reward scores a completion the same
whether TRL or the workbench calls it, TRL trains on the workbench's training split, and the
comparison's figures are right on fixed numbers."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_vs_trl

    return bench_vs_trl


COMPLETIONS = ["7 + 5 = 12.", "The answer is 11", "12.0", "To add 7 and 5, you take 7 and"]
EXPECTED = [1.0, -1.0, 1.0, -1.0]  # the last number decides; a cut-off ramble ends on a wrong one


def test_the_reward_scores_the_same_called_by_trl_or_by_the_workbench(bench):
    from vs_trl import sum_correct

    from workbench.rl.reward_functions import RewardState, load_reward_functions, score_batch

    prompt = [{"role": "system", "content": bench.SYSTEM_PROMPT}, {"role": "user", "content": "What is 7 + 5?"}]
    conversational = [[{"role": "assistant", "content": c}] for c in COMPLETIONS]
    # GRPOTrainer's call: keywords only, the dataset's other columns among them
    by_trl = sum_correct(prompts=[prompt] * 4, completions=conversational, completion_ids=[[1]] * 4,
                         trainer_state=RewardState(0), answer=["12"] * 4)  # fmt: skip
    fns = load_reward_functions([{"fn": "vs_trl:sum_correct"}])  # TRL's shape: the only function decides, no flag
    by_workbench = score_batch(fns, [prompt] * 4, conversational, {"answer": ["12"] * 4, "task_passed": [False] * 4},
                               example_ids=[0, 1, 2, 3])  # fmt: skip
    assert by_trl == by_workbench.rewards == EXPECTED
    assert by_workbench.passed == [True, False, True, False]
    assert sum_correct([prompt] * 4, COMPLETIONS, ["12"] * 4) == EXPECTED  # plain-text completions too


def test_trl_trains_on_the_workbench_training_split_with_the_system_turn(bench, tmp_path):
    from workbench.config import run_config_from_dict
    from workbench.tasks.base import load_task

    a = argparse.Namespace(seed=0, cache=str(tmp_path), eval_prompts=16, backend="torch", tokens=16, prompts=4,
                           generations=4, steps=6, workbench_steps=12, lr=1e-5, eval_every=3, eval_samples=2, threads=2)  # fmt: skip
    settings = bench.run_settings(a, tmp_path / "model", bench.write_sums(tmp_path / "sums.jsonl"))
    spec = bench.trl_spec("trl", a, settings, tmp_path / "out")
    task = load_task(run_config_from_dict(settings).task)
    assert [r["prompt"][-1]["content"] for r in spec["train"]] == [ex.prompt for ex in task.train]
    assert all(r["prompt"][0] == {"role": "system", "content": bench.SYSTEM_PROMPT} for r in spec["train"])
    assert [r["answer"] for r in spec["train"]] == [ex.answer for ex in task.train]
    assert not {ex.prompt for ex in task.val} & {r["prompt"][-1]["content"] for r in spec["train"]}
    assert (spec["generations"], spec["prompts"], spec["tokens"], spec["save_steps"], spec["vllm"]) == (4, 4, 16, 3, False)
    assert (spec["steps"], settings["train"]["max_steps"]) == (6, 12)  # the workbench may run on past TRL's step N
    assert spec["eps_max"] == 4.0  # the workbench recipe's CISPO cap is TRL's epsilon_high


def test_the_comparison_on_fixed_numbers(bench):
    P, S = bench.Point, bench.Side
    trl = S("trl", [P(0, 0.20, 0.05, 0.0), P(5, 0.28, 0.05, 100.0), P(10, 0.40, 0.05, 200.0)])
    wb = S("workbench", [P(0, 0.20, 0.05, 0.0), P(5, 0.35, 0.05, 60.0), P(10, 0.45, 0.05, 90.0)])
    c = bench.compare(trl, wb)
    assert (c["target"], c["workbench_step"], c["workbench_s"], c["trl_s"]) == (0.40, 10, 90.0, 200.0)
    assert c["ratio"] == pytest.approx(0.45) and c["met"]
    assert bench.sequences_per_second(wb.points[1], 64) == pytest.approx(5 * 64 / 60.0)
    assert bench.sequences_per_second(wb.points[0], 64) is None
    slow = S("workbench", [P(0, 0.20, 0.05, 0.0), P(5, 0.41, 0.05, 150.0)])
    assert bench.compare(trl, slow)["ratio"] == pytest.approx(0.75) and not bench.compare(trl, slow)["met"]
    never = bench.compare(trl, S("workbench", [P(0, 0.2, 0.05, 0.0), P(5, 0.3, 0.05, 50.0)]))
    assert never["ratio"] is None and never["workbench_step"] is None
    flat = bench.compare(S("trl", [P(0, 0.20, 0.05, 0.0), P(5, 0.15, 0.05, 100.0)]), wb)
    assert not flat["gained"] and flat["ratio"] is None  # nothing to reach: not a ratio of 0
    printed = bench.table([trl, S("trl-vllm", error="AttributeError: x"), wb], 64)
    assert "ratio 0.45 (meets the target <= 0.5)" in printed and "trl-vllm   did not run: AttributeError: x" in printed
    assert [c["trl_side"] for c in bench.comparisons([trl, S("trl-vllm", error="x"), wb])] == ["trl"]


def test_trl_missing_is_one_line(bench, monkeypatch):
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit, match="TRL is not installed; pip install --no-deps trl==1.16.0"):
        bench.main(["--sides", "trl"])


# --- the fair clock (issue 52): seeds interleaved, saves out, the ratio's spread ------------------
def test_the_sides_run_interleaved_by_seed(bench):
    assert bench.schedule(["trl", "workbench"], [0, 1]) == [(0, "trl"), (0, "workbench"), (1, "trl"), (1, "workbench")]
    assert bench.schedule(["workbench", "trl", "trl-vllm"], [3]) == [(3, "workbench"), (3, "trl"), (3, "trl-vllm")]


def test_seeds_default_to_two_and_seed_picks_one(bench):
    assert bench.parse([]).seeds == [0, 1]
    assert bench.parse(["--seed", "3"]).seeds == [3] and bench.parse(["--seed", "3"]).seed == 3
    assert bench.parse(["--seeds", "2,5,2"]).seeds == [2, 5]
    with pytest.raises(SystemExit):
        bench.parse(["--seed", "1", "--seeds", "0,1"])  # one or the other
    with pytest.raises(SystemExit):
        bench.parse(["--seeds", "0,x"])


def test_each_seed_is_compared_with_its_own_workbench_run(bench):
    P, S = bench.Point, bench.Side
    trl0 = S("trl", [P(0, 0.2, 0.05, 0.0), P(8, 0.6, 0.05, 100.0)], seed=0)
    trl1 = S("trl", [P(0, 0.2, 0.05, 0.0), P(8, 0.5, 0.05, 200.0)], seed=1)
    wb0 = S("workbench", [P(0, 0.2, 0.05, 0.0), P(8, 0.6, 0.05, 50.0)], seed=0)
    wb1 = S("workbench", [P(0, 0.2, 0.05, 0.0), P(8, 0.5, 0.05, 150.0)], seed=1)
    comps = bench.comparisons([trl0, wb0, trl1, wb1])
    assert [(c["seed"], c["ratio"]) for c in comps] == [(0, pytest.approx(0.5)), (1, pytest.approx(0.75))]
    # seed 1's TRL has no workbench run of its own: not compared with seed 0's
    assert [c["seed"] for c in bench.comparisons([trl0, wb0, trl1])] == [0]


def test_the_ratio_spread_over_seeds(bench):
    def c(seed, ratio, side="trl"):
        return {"trl_side": side, "seed": seed, "ratio": ratio, "met": ratio is not None and ratio <= bench.TARGET_RATIO}

    (sp,) = bench.spread([c(0, 0.4), c(1, 0.7), c(2, 0.5)])
    assert sp["seeds"] == [0, 1, 2] and sp["ratios"] == [0.4, 0.7, 0.5]
    assert (sp["mean"], sp["min"], sp["max"]) == (pytest.approx(1.6 / 3), 0.4, 0.7)
    assert not sp["met"] and sp["missing"] == []  # one seed over the target misses it
    assert bench.spread([c(0, 0.4), c(1, 0.5)])[0]["met"]
    never, other = bench.spread([c(0, 0.4), c(1, None), c(0, None, "trl-vllm")])
    assert (never["mean"], never["min"], never["max"], never["missing"], never["met"]) == (0.4, 0.4, 0.4, [1], False)
    assert other["trl_side"] == "trl-vllm" and other["mean"] is None and other["missing"] == [0]


def test_the_workbench_clock_has_its_saves_taken_out(bench):
    rows = [{"step": 1, "compute/wall_seconds": 30.0, "time/train": 1.0},
            {"step": 2, "compute/wall_seconds": 60.0, "time/train": 1.0},
            {"step": 2, "val/pass_rate": 0.1, "compute/wall_seconds": 60.0},  # an evaluation row: ignored
            {"step": 3, "compute/wall_seconds": 95.0, "time/train": 1.0},
            {"step": 4, "compute/wall_seconds": 125.0, "time/train": 1.0}]  # fmt: skip
    saves = bench.save_seconds({2: (60.0, 65.0), 4: (126.0, 131.0), 6: (None, 140.0)})
    assert saves == {2: 5.0, 4: 5.0, 6: 0.0}  # a save whose start was not seen counts as none
    assert bench.saves_before(saves, 2) == 0.0 and bench.saves_before(saves, 4) == 5.0  # step 2's save is in step 3's clock
    points = bench.workbench_points(rows, saves, {0: (0.1, 0.02), 2: (0.3, 0.03), 4: (0.5, 0.04)})
    assert [(p.step, p.pass_rate, p.wall_s) for p in points] == [(0, 0.1, 0.0), (2, 0.3, 60.0), (4, 0.5, 120.0)]


def test_the_start_up_is_the_least_lag_of_a_row_behind_the_run_clock(bench):
    seen = [(12.0, {"step": 0, "val/pass_rate": 0.1}), (41.5, {"step": 1, "compute/wall_seconds": 30.0}),
            (71.0, {"step": 2, "compute/wall_seconds": 60.0}), (90.0, {"step": 2, "val/pass_rate": 0.2, "compute/wall_seconds": 60.0})]  # fmt: skip
    assert bench.startup_seconds(seen) == pytest.approx(11.0)
    assert bench.startup_seconds([]) is None


def test_the_workbench_run_evaluates_nothing_inside_its_clock_and_checkpoints_each_scoring_step(bench, tmp_path):
    from workbench.config import run_config_from_dict

    a = argparse.Namespace(seed=0, cache=str(tmp_path), eval_prompts=16, backend="torch", tokens=16, prompts=4,
                           generations=4, steps=6, workbench_steps=12, lr=1e-5, eval_every=3, eval_samples=2, threads=2)  # fmt: skip
    settings = bench.run_settings(a, tmp_path / "model", bench.write_sums(tmp_path / "sums.jsonl"), seed=5)
    run = run_config_from_dict(bench.unscored(settings))
    assert run.seed == 5 and not run.eval.at_start and run.eval.every_steps == 12  # only the engine's last one
    assert (run.eval.num_prompts, run.eval.samples_per_prompt) == (1, 1)
    assert run.checkpoint.every_steps == 3 and run.checkpoint.keep >= 12 // 3 + 1 and not run.checkpoint.export_policy
    assert run.task == run_config_from_dict(settings).task  # the same validation prompts as the scoring's
    assert settings["eval"]["num_prompts"] == 16  # the scoring keeps the bench's


def test_the_watch_sees_saves_begin_and_end_and_rows_as_they_are_written(bench, tmp_path):
    run = tmp_path / "run"
    watch = bench.RunWatch(run)
    watch._t0, watch._wall0 = bench.time.monotonic(), bench.time.time()  # as __enter__ sets them; polled by hand here
    watch.poll()  # nothing yet
    ck = run / "checkpoints"
    (ck / ".tmp_step_000002").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1, "compute/wall_seconds": 3.0}\n{"step": 2, "compute/')
    watch.poll()
    assert watch.saves[2][0] is not None and watch.saves[2][1] is None
    assert [r["step"] for _, r in watch.rows] == [1]  # the half-written row waits
    (ck / ".tmp_step_000002").rename(ck / "step_000002")
    with (run / "metrics.jsonl").open("a") as f:
        f.write('wall_seconds": 6.0}\n')
    watch.poll()
    begin, end = watch.saves[2]
    assert end is not None and end >= begin
    assert [r for _, r in watch.rows] == [{"step": 1, "compute/wall_seconds": 3.0}, {"step": 2, "compute/wall_seconds": 6.0}]
    watch.poll()
    assert len(watch.rows) == 2 and watch.saves[2] == (begin, end)  # nothing read or timed twice


def test_the_json_holds_each_seeds_comparison_with_its_ratio_and_the_spread(bench, monkeypatch, capsys, tmp_path):
    import json

    import workbench.engine.model.gguf as gguf

    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(gguf, "smollm2_path", lambda: tmp_path / "smollm2.gguf")
    monkeypatch.setattr(gguf, "gguf_folder", lambda path, **kw: tmp_path / "model")
    ran = []
    P, S = bench.Point, bench.Side

    def fake_trl(name, a, settings, work, scorer):
        ran.append((settings["seed"], name))
        return S(name, [P(0, 0.2, 0.05, 0.0), P(2, 0.5, 0.05, 100.0)], seed=settings["seed"], train_s=100.0, total_s=150.0)

    def fake_workbench(settings, work, scorer):
        ran.append((settings["seed"], "workbench"))
        wall = 40.0 if settings["seed"] == 0 else 70.0
        return S("workbench", [P(0, 0.2, 0.05, 0.0), P(2, 0.55, 0.05, wall)], seed=settings["seed"], train_s=wall, total_s=90.0)

    monkeypatch.setattr(bench, "run_trl", fake_trl)
    monkeypatch.setattr(bench, "run_workbench", fake_workbench)
    assert bench.main(["--sides", "trl,workbench", "--steps", "2", "--work", str(tmp_path / "w"), "--json"]) == 0
    assert ran == [(0, "trl"), (0, "workbench"), (1, "trl"), (1, "workbench")]
    got = json.loads(capsys.readouterr().out)
    assert [(c["seed"], c["trl_side"]) for c in got["comparisons"]] == [(0, "trl"), (1, "trl")]
    assert [c["ratio"] for c in got["comparisons"]] == [pytest.approx(0.4), pytest.approx(0.7)]
    (sp,) = got["spread"]
    assert (sp["mean"], sp["min"], sp["max"], sp["met"]) == (pytest.approx(0.55), pytest.approx(0.4), pytest.approx(0.7), False)
    assert [(s["name"], s["seed"], s["train_s"], s["total_s"]) for s in got["sides"]][:2] == [("trl", 0, 100.0, 150.0), ("workbench", 0, 40.0, 90.0)]
    assert got["settings"]["seeds"] == [0, 1]
    assert bench.main(["--sides", "workbench,trl", "--seed", "4", "--work", str(tmp_path / "w"), "--json"]) == 0
    assert ran[4:] == [(4, "workbench"), (4, "trl")]
    assert [c["seed"] for c in json.loads(capsys.readouterr().out)["comparisons"]] == [4]
