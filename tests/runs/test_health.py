"""Run health (workbench/runs/health.py): each rule on synthetic metric series fires at the step
where the metric turns and not before, a noisy healthy run raises no flag, and the flags reach the
report, the forecast's verdict and the config's thresholds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.config import HealthConfig, load_run_config
from workbench.configtools import ConfigError
from workbench.runs.health import VERDICT_PREFIX, check_health, verdict_note
from workbench.runs.report import print_report, write_report

STEPS = 60
TURN = 30


def healthy(seed: int = 0, steps: int = STEPS) -> list[dict]:
    """A healthy run's rows: noisy, slowly improving training metrics; an evaluation every 10 steps."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(1, steps + 1):
        rows.append({
            "step": s,
            "train/entropy": 2.0 * (1 - 0.004 * s) * rng.normal(1, 0.05),
            "train/response_len": 30 + 0.1 * s + rng.normal(0, 3),
            "train/truncation_rate": float(np.clip(rng.normal(0.05, 0.03), 0, 1)),
            "train/grad_norm": float(rng.lognormal(0, 0.4)),
            "train/zero_variance_frac": float(np.clip(rng.normal(0.3, 0.1), 0, 1)),
            "train/mismatch_kl": float(abs(rng.normal(1e-4, 5e-5))),
            "train/pass_rate": float(np.clip(0.2 + 0.005 * s + rng.normal(0, 0.05), 0, 1)),
            "compute/device_hours": 0.01 * s,
        })  # fmt: skip
        if s % 10 == 0:
            rows.append({"step": s, "val/pass_rate": 0.2 + 0.004 * s + rng.normal(0, 0.01), "compute/device_hours": 0.01 * s})
    rows.insert(0, {"step": 0, "val/pass_rate": 0.2, "compute/device_hours": 0.0})
    return rows


def turned(key: str, value, rows: list[dict] | None = None) -> list[dict]:
    """A healthy run whose `key` takes `value(step, old)` from step TURN on."""
    rows = [dict(r) for r in (rows or healthy())]
    for r in rows:
        if key in r and r["step"] >= TURN:
            r[key] = value(r["step"], r[key])
    return rows


def unlearned(rows: list[dict]) -> list[dict]:
    """The same rows with validation flat at its start: a run that is not learning, so a fall in
    entropy is a collapse, not the policy learning to answer."""
    return [{**r, "val/pass_rate": 0.2} if "val/pass_rate" in r else r for r in rows]


def only(flags: list[dict], rule: str) -> dict:
    assert [f.rule for f in flags] == [rule], flags
    return flags[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_noisy_healthy_run_raises_no_flag(seed):
    assert check_health(healthy(seed)) == []


CASES = {
    "entropy": ("train/entropy", lambda s, v: 0.1 * v),
    "length": ("train/response_len", lambda s, v: 5 * v),
    "truncation": ("train/truncation_rate", lambda s, v: 0.8),
    "grad_spike": ("train/grad_norm", lambda s, v: 50.0 if s == TURN else v),
    "zero_variance": ("train/zero_variance_frac", lambda s, v: 0.97),
    "mismatch": ("train/mismatch_kl", lambda s, v: 0.05),
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_each_rule_fires_at_the_step_the_metric_turns_and_not_before(rule):
    key, value = CASES[rule]
    rows = unlearned(turned(key, value))
    flag = only(check_health(rows), rule)
    assert flag.step == TURN and flag.metric == key
    assert f"workbench samples RUN --step {TURN}" in flag.message
    assert check_health([r for r in rows if r["step"] < TURN + 2]) == [] or rule == "grad_spike"  # a window's median: not yet
    assert check_health([r for r in rows if r["step"] < TURN]) == []  # before the turn: nothing


def test_an_entropy_collapse_within_the_first_window_is_flagged_where_it_fell():
    """lr 100x collapses entropy by step 6 (benchmarks/bench_health.py): a median of the first
    window would already hold the fall and never flag; its peak is the start."""
    rows = unlearned(healthy())
    fall = {1: 0.61, 2: 0.49, 3: 0.36, 4: 0.15, 5: 0.11, 6: 0.03}
    for r in rows:
        if "train/entropy" in r:
            r["train/entropy"] = fall.get(r["step"], 0.04)
    flag = [f for f in check_health(rows) if f.rule == "entropy"]
    assert flag and flag[0].step == 5, flag  # 0.11 < 0.2 x 0.61: the first value past the threshold
    assert "fell 8" in flag[0].message
    assert not [f for f in check_health([r for r in rows if r["step"] <= 4]) if f.rule == "entropy"]


def test_training_pass_rate_rising_while_validation_falls_is_flagged_at_the_falling_evaluation():
    rows = turned("train/pass_rate", lambda s, v: min(1.0, v + 0.01 * (s - TURN)))
    best = max(r["val/pass_rate"] for r in rows if "val/pass_rate" in r and r["step"] < TURN)
    for r in rows:
        if "val/pass_rate" in r and r["step"] >= TURN + 10:
            r["val/pass_rate"] = best - 0.1
    flag = only(check_health(rows), "divergence")
    assert flag.step == TURN + 10 and flag.metric == "val/pass_rate"
    assert check_health([r for r in rows if r["step"] < TURN + 10]) == []
    # validation falling while training does not rise is not this rule (nor any other)
    flat = [{**r, "train/pass_rate": 0.3} if "train/pass_rate" in r else r for r in rows]
    assert check_health(flat) == []
    # the same fall on a small evaluation (10 prompts: standard error ~0.1) is noise, not a flag
    small = [{**r, "val/pass_rate_se": 0.1} if "val/pass_rate" in r else r for r in rows]
    assert check_health(small) == []


def learning(seed: int, se: float = 0.04) -> list[dict]:
    """A healthy run still learning: training and validation pass rates rise together; each
    evaluation's noise is its reported standard error."""
    rng = np.random.default_rng(seed)
    rows = [{"step": 0, "val/pass_rate": 0.2 + rng.normal(0, se), "val/pass_rate_se": se}]
    for s in range(1, 201):
        p = 0.2 + 0.4 * (1 - np.exp(-s / 60))
        rows.append({"step": s, "train/pass_rate": float(np.clip(p + rng.normal(0, 0.06), 0, 1))})
        if s % 10 == 0:
            rows.append({"step": s, "val/pass_rate": p + rng.normal(0, se), "val/pass_rate_se": se})
    return rows


def test_one_unlucky_evaluation_after_a_lucky_best_is_not_a_divergence():
    # "best" is the highest of many noisy evaluations, so one evaluation well under it is common on
    # a healthy run: the fall must hold at the next evaluation too (the flag names the first)
    flagged = [seed for seed in range(100) if check_health(learning(seed))]
    assert len(flagged) <= 1, flagged
    rows = learning(0)
    vals = [r for r in rows if "val/pass_rate" in r]
    best = max(r["val/pass_rate"] for r in vals if r["step"] <= 100)
    for r in rows:
        if "train/pass_rate" in r and r["step"] > 100:
            r["train/pass_rate"] += 0.2  # training keeps rising past validation
        if "val/pass_rate" in r and r["step"] > 100:
            r["val/pass_rate"] = best - 0.02  # validation stays under its best
    once = [{**r, "val/pass_rate": best - 0.25} if "val/pass_rate" in r and r["step"] == 150 else r for r in rows]
    assert check_health(once) == []
    held = [{**r, "val/pass_rate": best - 0.25} if "val/pass_rate" in r and r["step"] in (150, 160) else r for r in rows]
    assert only(check_health(held), "divergence").step == 150


def test_thresholds_come_from_the_health_config():
    rows = unlearned(turned("train/entropy", lambda s, v: 0.5 * v))  # a 50% fall: under the default 80%
    assert check_health(rows) == []
    flag = only(check_health(rows, HealthConfig(entropy_drop=0.4)), "entropy")
    assert flag.step == TURN and "entropy fell 5" in flag.message
    cfg = load_run_config(None, ["health.entropy_drop=0.4", "health.window=3"])
    assert cfg.health.entropy_drop == 0.4 and cfg.health.window == 3
    with pytest.raises(ConfigError, match="health.entropy_drop"):
        load_run_config(None, ["health.entropy_drop=1.5"])
    with pytest.raises(ConfigError, match="train.mismatch_bound"):
        load_run_config(None, ["train.mismatch_bound=[2.0, 3.0]"])


def test_the_verdict_names_the_first_active_flag():
    flags = check_health(unlearned(turned("train/entropy", lambda s, v: 0.1 * v)))
    note = verdict_note(flags)
    assert note.startswith(f"{VERDICT_PREFIX}; from step {TURN}, entropy fell 9")
    assert verdict_note([]) == ""


def test_the_report_prints_the_flags_and_its_verdict_carries_the_caveat(tmp_path):
    rows = turned("train/response_len", lambda s, v: 5 * v)
    for r in rows:  # a curve that bends, so the report can fit it
        if "val/pass_rate" in r:
            r["val/pass_rate"] = 0.2 + 0.5 * (1 - np.exp(-r["step"] / 15))
    rows += [{"step": s, "val/pass_rate": 0.2 + 0.5 * (1 - np.exp(-s / 15)), "compute/device_hours": 0.01 * s}
             for s in range(5, STEPS, 10)]
    rows.sort(key=lambda r: r["step"])
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = write_report(tmp_path, charts=False)
    assert [f["rule"] for f in rep["health"]] == ["length"]
    assert f"{VERDICT_PREFIX}; from step {TURN}, completion length ran away" in rep["verdict_10x"]
    text = print_report(rep)
    assert f"run health: length from step {TURN} (train/response_len)" in text
    healthy_rows = healthy()
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in healthy_rows))
    rep = write_report(tmp_path, charts=False)
    assert rep["health"] == [] and VERDICT_PREFIX not in (rep["verdict_10x"] or "")
    assert "run health: no flag" in print_report(rep)


def test_the_run_views_forecast_verdict_names_an_active_flag_with_the_runs_thresholds(tmp_path):
    from workbench.runs.view import RunView

    rows = turned("train/response_len", lambda s, v: 2 * v)  # 2x: under the default 3x
    for r in rows:
        if "val/pass_rate" in r:
            r["val/pass_rate"] = 0.2 + 0.5 * (1 - np.exp(-r["step"] / 15))
    rows += [{"step": s, "val/pass_rate": 0.2 + 0.5 * (1 - np.exp(-s / 15)), "compute/device_hours": 0.01 * s}
             for s in range(5, STEPS, 10)]
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["step"])))
    (run / "config.json").write_text(json.dumps({"name": "run", "train": {"max_steps": STEPS}}))
    assert VERDICT_PREFIX not in RunView.open(run).forecast(5.0)["verdict"]
    (run / "config.json").write_text(json.dumps({"name": "run", "train": {"max_steps": STEPS}, "health": {"length_growth": 1.5}}))
    verdict = RunView.open(run).forecast(5.0)["verdict"]
    assert f"{VERDICT_PREFIX}; from step {TURN}, completion length ran away" in verdict


def test_truncation_and_zero_variance_fire_on_a_rise_not_on_a_start_past_their_threshold():
    """SmolLM2 starts with 70% of its completions cut at 32 tokens and most groups all-fail, then
    learns to answer briefly: a start past the threshold that falls is learning, not a runaway."""
    rows = unlearned(healthy())
    for r in rows:
        if "train/truncation_rate" in r:
            r["train/truncation_rate"] = max(0.0, 0.75 - 0.02 * r["step"])
            r["train/zero_variance_frac"] = 0.95 if r["step"] < 20 else 0.4
    assert check_health(rows) == []
    # back past the threshold once the metric came down: that is a change, flagged where it turned
    for key, value, rule in (("train/truncation_rate", 0.8, "truncation"), ("train/zero_variance_frac", 0.97, "zero_variance")):
        back = [{**r, key: value} if key in r and r["step"] >= 50 else r for r in rows]
        flag = only(check_health(back), rule)
        assert flag.step == 50 and flag.metric == key
        assert check_health([r for r in back if r["step"] < 52]) == []  # the window's median: not yet


def test_truncation_back_up_while_validation_has_risen_is_not_a_runaway():
    """A SmolLM2 seed cuts most replies at 32 tokens again mid-run while validation holds at 0.6+:
    the sum comes before the cut ("Ines has 18 + 9 = 27 cards. Therefore"), so it passes."""
    rows = turned("train/truncation_rate", lambda s, v: 0.8)  # healthy(): validation rises 0.2 -> 0.44
    assert check_health(rows) == []
    assert only(check_health(unlearned(rows)), "truncation").step == TURN
    lost = [{**r, "val/pass_rate": 0.2} if "val/pass_rate" in r and r["step"] >= 50 else r for r in rows]
    flag = [f for f in check_health(lost) if f.rule == "truncation"]
    assert flag and flag[0].step == 50 - 5 + 1, flag  # the window at step 50, where the gain is gone


def test_entropy_falling_while_validation_rises_is_learning_to_answer_not_a_collapse():
    rows = turned("train/entropy", lambda s, v: 0.1 * v)  # healthy(): validation rises 0.2 -> 0.44 meanwhile
    assert check_health(rows) == [] and verdict_note(check_health(rows)) == ""
    # the same fall while validation stays at its start is a collapse
    assert only(check_health(unlearned(rows)), "entropy").step == TURN
    # and so is one while validation rose by less than twice its noise (a 10-prompt evaluation)
    noisy = [{**r, "val/pass_rate_se": 0.1} if "val/pass_rate" in r else r for r in rows]
    assert only(check_health(noisy), "entropy").step == TURN
    # once validation has lost its gain, the low entropy is flagged: the latest evaluation decides
    lost = [{**r, "val/pass_rate": 0.2} if "val/pass_rate" in r and r["step"] >= 50 else r for r in rows]
    flag = [f for f in check_health(lost) if f.rule == "entropy"]
    assert flag and flag[0].step == 50 - 5 + 1, flag  # the first low value of the window at step 50
    assert not [f for f in check_health([r for r in lost if r["step"] < 50]) if f.rule == "entropy"]
