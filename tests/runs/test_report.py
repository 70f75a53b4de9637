"""The end-of-run report: the fit, the run's own 40% backtest, its printed line and its chart."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.runs.report import (
    engine_summary_line, retirement_line,
    BACKTEST_FRACTION, FIT_FILES, backtest_run, eval_curve, fit_curves, fit_run, print_report, report_run_end, write_report,
)  # fmt: skip
from workbench.errors import UserError
from workbench.scaling import SigmoidFit
from workbench.tracking.sink import read_jsonl

X = "compute/device_hours"


def _sigmoid(c, r0=0.2, a=0.8, b=2.0, cmid=0.1):
    c = np.asarray(c, dtype=float)
    rise = np.zeros_like(c)
    rise[c > 0] = 1 / (1 + (cmid / c[c > 0]) ** b)
    return r0 + (a - r0) * rise


def _write_run(folder, compute, score):
    """metrics.jsonl as a run writes it: training rows, and evaluation rows every few steps."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "metrics.jsonl", "w") as fh:
        for i, (c, s) in enumerate(zip(compute, score)):
            fh.write(json.dumps({"step": 10 * i, X: float(c), "train/loss": 0.1}) + "\n")
            fh.write(json.dumps({"step": 10 * i, X: float(c), "val/pass_rate": float(s)}) + "\n")
    return folder


# 26 evaluations at compute 0, 0.02, ..., 0.5: the first 40% of compute (<= 0.2) holds 10 of them
# after compute 0, and 15 come later.
COMPUTE = np.linspace(0, 0.5, 26)


def test_backtest_of_a_sigmoid_forecasts_the_later_points(tmp_path):
    noise = np.random.default_rng(0).normal(0, 0.005, len(COMPUTE)) * (COMPUTE > 0)
    run = _write_run(tmp_path / "run", COMPUTE, _sigmoid(COMPUTE) + noise)
    rep = write_report(run)
    bt = rep["backtest"]
    assert bt["fraction"] == BACKTEST_FRACTION == 0.4
    assert bt["until"] == pytest.approx(0.2)
    assert (bt["n_fit"], bt["n_test"]) == (10, 15)
    assert bt["rmse"] < 0.015  # the noise is 0.005: the forecast is as good as the data
    assert bt["coverage"] >= 0.8
    assert abs(bt["A"] - 0.8) < 0.05 and not bt["error"]
    assert json.loads((run / "backtest.json").read_text()) == bt
    line = next(s for s in print_report(rep).splitlines() if s.startswith("backtest:"))
    assert line == (
        f"backtest: fit on the first 40% of compute (10 evals) forecasts the remaining 15 with "
        f"RMSE {bt['rmse']:.3f}, 95% band covers {bt['coverage']:.0%}"
    )


def test_backtest_reports_a_forecast_that_misses(tmp_path):
    # The run collapses after the prefix: the held-out RMSE is the size of the collapse.
    score = _sigmoid(COMPUTE)
    score[COMPUTE > 0.2] = 0.1
    run = _write_run(tmp_path / "run", COMPUTE, score)
    bt, prefix = backtest_run(read_jsonl(run / "metrics.jsonl"))
    forecast = prefix.predict(COMPUTE[COMPUTE > 0.2])
    assert bt["rmse"] == pytest.approx(float(np.sqrt(np.mean((forecast - 0.1) ** 2))))
    assert bt["rmse"] > 0.5 and bt["coverage"] == 0.0
    assert bt["final_error"] == pytest.approx(forecast[-1] - 0.1)


def test_chart_shows_the_prefix_forecast_beside_the_final_fit(tmp_path):
    run = _write_run(tmp_path / "run", COMPUTE, _sigmoid(COMPUTE))
    rep = write_report(run)
    names = [p.split("/")[-1] for p in rep["files"]]
    assert names == ["fit.json", "backtest.json", "fit.html", "fit.png"]
    html = (run / "fit.html").read_text()
    assert "forecast from the start of the run" in html and "held out (forecast)" in html
    assert "final fit" in html and "cdn.jsdelivr" not in html
    assert (run / "fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (run / "chart_error.txt").exists()


def test_a_prefix_too_short_to_fit_is_said_and_the_fit_is_kept(tmp_path):
    # Evaluations bunched at the end: only 2 lie in the first 40% of compute.
    compute = np.concatenate([[0, 0.05, 0.15], np.linspace(0.3, 0.5, 10)])
    run = _write_run(tmp_path / "run", compute, _sigmoid(compute))
    rep = write_report(run, charts=False)
    assert "a sigmoid fit needs at least 4" in rep["backtest"]["error"]
    assert math.isnan(rep["backtest"]["rmse"])
    strict = json.loads((run / "backtest.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in backtest.json"))
    assert strict["rmse"] is None and strict["n_fit"] == 2  # strict JSON: no NaN
    assert "backtest: fit on the first 40% of compute: not fitted: only 2 point(s)" in print_report(rep)
    assert (run / "fit.json").exists() and rep["r2"] > 0.99


def test_no_backtest_when_asked_and_too_few_evaluations_is_one_clear_error(tmp_path):
    run = _write_run(tmp_path / "run", COMPUTE, _sigmoid(COMPUTE))
    rep = write_report(run, charts=False, backtest_fraction=None)
    assert rep["backtest"] is None and not any(s.startswith("backtest") for s in print_report(rep).splitlines())
    short = _write_run(tmp_path / "short", COMPUTE[:3], _sigmoid(COMPUTE[:3]))
    with pytest.raises(UserError, match="only 3 evaluations so far; the sigmoid fit needs at least 4"):
        write_report(short)


def test_the_end_of_run_report_fits_a_curve_without_a_compute_0_point(tmp_path):
    # a resumed run's metrics.jsonl, or one whose step-0 evaluation was lost: the notebook's
    # RunView fits it with R0 = the first point, and `workbench run`'s report must too
    compute = COMPUTE[1:]
    run = _write_run(tmp_path / "run", compute, _sigmoid(compute))
    rep = write_report(run, charts=False)
    assert rep["R0"] == pytest.approx(_sigmoid(compute)[0]) and abs(rep["A"] - 0.8) < 0.02
    assert not rep["backtest"]["error"] and rep["backtest"]["n_fit"] == 10  # the prefix fit follows the rule too
    from workbench.runs.view import RunView

    (run / "config.json").write_text(json.dumps({"name": "run"}))
    assert RunView.open(run).fit().A == pytest.approx(rep["A"])  # one fit: the notebook's view agrees


def test_r0_is_the_score_at_compute_0_else_the_first_point():
    c = np.linspace(0, 0.5, 26)
    y = _sigmoid(c) + np.random.default_rng(1).normal(0, 0.003, len(c)) * (c > 0)
    measured = fit_curves([(c, y)])
    assert measured.R0 == pytest.approx(0.2)
    first = fit_curves([(c[1:], y[1:])])
    assert first.R0 == pytest.approx(y[1])
    # seeds fitted jointly: the compute-0 score is used only when every seed has one
    assert fit_curves([(c, y), (c, y + 0.001)]).R0 == pytest.approx(0.2005)  # both measured
    assert fit_curves([(c, y), (c[1:], y[1:] + 0.001)]).R0 == pytest.approx((y[0] + y[1] + 0.001) / 2)  # first points
    with pytest.raises(UserError, match="no curve"):
        fit_curves([])
    rows = [{"step": i, X: float(a), "val/pass_rate": float(b)} for i, (a, b) in enumerate(zip(c, y))]
    assert fit_run(rows).A == pytest.approx(measured.A)


def test_a_session_run_end_writes_the_one_layout_in_the_run_folder(tmp_path):
    from workbench.config import run_config_from_dict

    run = _write_run(tmp_path / "run", COMPUTE, _sigmoid(COMPUTE))
    def cfg(folder, **settings):
        return run_config_from_dict({"name": folder.name, "out_dir": str(folder), **settings})

    report, why = report_run_end(cfg(run), read_jsonl(run / "metrics.jsonl"), x=X, step=250, tracked=False)
    assert why == "" and report["A"] == pytest.approx(json.loads((run / "fit.json").read_text())["A"])
    assert sorted(p.name for p in run.iterdir() if p.name != "metrics.jsonl") == sorted(FIT_FILES)
    short = _write_run(tmp_path / "short", COMPUTE[:3], _sigmoid(COMPUTE[:3]))
    report, why = report_run_end(cfg(short), step=20, tracked=False)  # too few (read from the folder): no error
    assert report is None and "evaluation" in why
    assert not (short / "fit.json").exists()
    off = _write_run(tmp_path / "off", COMPUTE, _sigmoid(COMPUTE))  # eval.every_steps 0: rows scored elsewhere are not its own
    report, why = report_run_end(cfg(off, eval={"every_steps": 0}), step=250, tracked=False)
    assert report is None and "eval.every_steps: 0" in why and not (off / "fit.json").exists()


def test_eval_curve_is_in_step_order_and_keeps_the_last_evaluation_of_a_step():
    # evaluations can finish out of order; a step evaluated twice (around a resume) keeps the last
    rows = [{"step": 4, X: 0.2, "val/pass_rate": 0.5}, {"step": 0, X: 0.0, "val/pass_rate": 0.1},
            {"step": 4, X: 0.21, "val/pass_rate": 0.6}, {"step": 2, X: 0.1}]
    c, s = eval_curve(rows)
    assert c.tolist() == [0.0, 0.21] and s.tolist() == [0.1, 0.6]
    steps, _ = eval_curve(rows, x="step")
    assert steps.tolist() == [0.0, 4.0]


@pytest.mark.slow
@pytest.mark.long
def test_the_demo_config_learns_and_backtests_itself(tmp_path):
    """configs/demo.yaml as `make demo` runs it, cut to half of its steps: the pass rate
    rises, and the report prints the fit and the backtest line and draws the prefix forecast.
    (The full run's targets are checked by benchmarks/bench_learning.py, 3 seeds.)"""
    import yaml

    repo = Path(__file__).resolve().parents[2]
    config = repo / "configs" / "demo.yaml"
    steps = yaml.safe_load(config.read_text())["train"]["max_steps"] // 2
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "run", "--config", str(config), "--out", str(out), "--fresh", "--quiet",
         "--max-steps", str(steps), "--set", f"model.cache_dir={tmp_path / 'models'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == steps
    assert summary["val_pass_rate_last"] >= summary["val_pass_rate_first"] + 0.1  # it learns
    assert "sigmoid fit: A = " in proc.stdout
    bt = json.loads((out / "backtest.json").read_text())
    line = next(s for s in proc.stdout.splitlines() if s.startswith("backtest: fit on the first 40% of compute"))
    html = (out / "fit.html").read_text()
    if bt["error"]:  # a short run may leave fewer than 4 evaluations in its first 40%: said so
        assert "not fitted" in line and "forecast from the start of the run" not in html
    else:
        assert f"forecasts the remaining {bt['n_test']} with RMSE {bt['rmse']:.3f}" in line
        assert "forecast from the start of the run" in html


def test_the_end_line_says_how_the_vllm_generators_ran_and_nothing_for_torch():
    base = {"trainer_utilisation": 0.5, "trainer_wall_seconds": 10.0, "trainer_wait_seconds": 4.0, "samples_per_second": 100.0}
    vllm = {"backend": "vllm", "vllm_version": "0.32.0", "engine_mode": "batch", "fp32_head": "patched"}
    line = engine_summary_line({**base, "generation": vllm})
    assert line.endswith("; vLLM 0.32.0 in batch mode, FP32 head: patched")
    assert engine_summary_line({**base, "generation": {"backend": "torch"}}) == engine_summary_line(base)
    assert "vLLM" not in engine_summary_line(base)


def test_the_end_report_tells_the_retired_share_per_domain_and_nothing_with_the_rule_off():
    from workbench.rl.mixture import MixtureSampler

    s = MixtureSampler({"math": list(range(8)), "code": list(range(8, 12))}, {"math": 1.0, "code": 1.0}, seed=0,
                       max_retired_share=0.25)  # fmt: skip
    for pid in (0, 1, 2, 8):
        s.update(pid, [True] * 4)
    line = retirement_line({"retirement": s.retirement()})
    assert line == ("No-Positive-Resampling: 3 of 12 training prompts retired at the end (25.0%); cap "
                    "recipe.npr_max_retired_share = 0.25, 1 retired prompts returned to the pool by it; "
                    "per domain: math 2/8 (25.0%), code 1/4 (25.0%)")
    assert retirement_line({"retirement": {**s.retirement(), "enabled": False}}) == retirement_line({}) == ""


def test_the_report_says_when_the_run_does_not_pin_its_ceiling(tmp_path):
    """The CPU demo's own curve (examples/curves/demo/seed0.csv): the sigmoid's A interval sits
    above the task's true 0.512; the report prints the ceiling check with the range that holds it."""
    import csv

    with (Path(__file__).resolve().parents[2] / "examples" / "curves" / "demo" / "seed0.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    compute = np.array([float(r["compute"]) for r in rows])
    run = _write_run(tmp_path / "run", compute, np.array([float(r["val_pass_rate"]) for r in rows]))
    rep = write_report(run, charts=False)
    check = rep["ceiling_check"]
    assert check["family_dependent"] and check["ceiling_range"][0] <= 0.512 < rep["A_ci"][0]
    assert check["line"] in print_report(rep).splitlines()
    assert SigmoidFit.from_json((run / "fit.json").read_text()).ceiling_check == check
    # the verdict on 10x more compute spans both families and says why and what would settle it
    verdict = next(line for line in print_report(rep).splitlines() if line.startswith("10x more compute: "))
    assert "over both curve families" in verdict and "a stretched exponential fits these points as well" in verdict
    assert "10x the compute seen; backtested only to" in verdict and "to tell the families apart" in verdict
