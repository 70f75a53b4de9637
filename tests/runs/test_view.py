"""workbench.runs.view.RunView: the read-only view of a run folder (no Ray)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.runs.report import eval_curve
from workbench.errors import UserError
from workbench.runs.view import RunView
from workbench.scaling.data import MIN_POINTS


def folder(tmp_path, rows, cfg=None):
    f = tmp_path / "run"
    f.mkdir()
    (f / "config.json").write_text(json.dumps(cfg or {"name": "run", "train": {"max_steps": 30}}))
    (f / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def evals(steps, rate=0.02):
    return [{"step": s, "val/pass_rate": 0.1 + rate * s / 5, "compute/device_hours": 0.01 * s, "compute/flops": 1e9 * s}
            for s in steps]


def test_a_step_evaluated_twice_keeps_the_last_and_report_agrees(tmp_path):
    rows = evals([0, 5, 10, 15]) + [{"step": 10, "val/pass_rate": 0.5, "compute/device_hours": 0.1, "compute/flops": 1e10}]
    v = RunView.open(folder(tmp_path, rows))
    assert list(v.curve["step"]) == [0, 5, 10, 15]
    assert v.curve.set_index("step").loc[10, "val_pass_rate"] == 0.5  # the later row (a resume redid the step)
    x, y = eval_curve(rows)  # the end-of-run report reads the same points
    assert list(x) == pytest.approx(list(v.curve["compute_device_hours"])) and y[2] == 0.5


def test_the_step_target_and_fit_minimum_have_one_owner(tmp_path):
    v = RunView.open(folder(tmp_path, evals([0, 5, 10])))
    assert v.max_steps == 30 and v.status()["max_steps"] == 30  # the config's train.max_steps
    with pytest.raises(UserError, match=f"needs at least {MIN_POINTS}"):
        v.fit()
    fit, why = v.fit_or_none()
    assert fit is None and str(MIN_POINTS) in why


def test_fit_forecast_chart_and_a_dashboard_of_the_view(tmp_path):
    from workbench.widgets.dashboard import Dashboard

    steps = list(range(0, 55, 5))
    rows = [{"step": s, "val/pass_rate": 0.1 + 0.5 / (1 + (0.2 / max(0.01 * s, 1e-9)) ** 1.5) + (0 if s == 0 else
             0.003 * np.sin(s)), "compute/device_hours": 0.01 * s} for s in steps]
    v = RunView.open(folder(tmp_path, rows))
    f = v.fit(x="compute/device_hours")
    assert f.n == len(steps) - 1 and f.R0 == pytest.approx(0.1)
    fc = v.forecast(1.0)
    assert fc["lo"] <= fc["pass_rate"] <= fc["hi"]
    assert v.chart() is not None
    d = Dashboard(v)  # a bare view: drawn once, nothing to poll
    assert d.fit is not None and d.error is None and "mark-area" in d.chart_svg


def test_bad_x_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="x must be"):
        RunView.open(folder(tmp_path, evals([0])), x="tokens")


def test_default_budget_is_ten_times_the_latest_compute(tmp_path):
    v = RunView.open(folder(tmp_path, evals([0, 5, 15])))
    assert v.default_budget() == pytest.approx(1.5) and v.default_budget(factor=2) == pytest.approx(0.3)
    assert RunView(v.cfg, rows=evals([0])).default_budget() is None  # only compute 0: no budget yet
    assert RunView(v.cfg, x="step", rows=evals([0, 5])).default_budget() == 50.0


def test_the_chart_follows_the_views_x(run_folder):
    from workbench.widgets.dashboard import to_svg

    v = RunView.open(run_folder(12), x="compute/flops")
    assert v.column == "compute_flops" and "compute/flops" in to_svg(v.chart())
    assert v.fit().compute.max() == v.curve["compute_flops"].max()


def test_load_rows_replaces_the_rows_up_to_a_step(tmp_path):
    path = folder(tmp_path, evals([0, 5, 10, 15])) / "metrics.jsonl"
    v = RunView(RunView.open(path.parent).cfg, rows=evals([99]))
    v.load_rows(path, until_step=10)
    assert [r["step"] for r in v.rows] == [0, 5, 10]
    v.load_rows(path)
    assert [r["step"] for r in v.rows] == [0, 5, 10, 15]
    v.load_rows(tmp_path / "missing.jsonl")
    assert v.rows == []


def test_end_records_the_summary_and_the_final_status(tmp_path):
    v = RunView.open(folder(tmp_path, evals([0, 5])))
    v.state = {"status": "running", "step": 7, "events": ["restart"]}
    v.end({"status": "stopped", "steps": 9})
    assert v.summary == {"status": "stopped", "steps": 9}
    assert v.state == {"status": "stopped", "step": 9, "error": None, "events": ["restart"]}
    v.state = {"status": "running", "step": 7}
    v.end(None, "trainer died")
    assert v.summary is None and v.state == {"status": "failed", "step": 7, "error": "trainer died"}


def test_the_view_never_holds_or_hands_out_the_live_config(tmp_path):
    cfg = RunView.open(folder(tmp_path, evals([0, 5]))).cfg
    v = RunView(cfg, rows=evals([0, 5]))
    cfg.train.max_steps, cfg.name = 3, "changed"  # the caller's config changes under the view
    assert v.max_steps == 30 and v.name == "run"
    v.cfg.train.max_steps = 4  # what `cfg` gives is a copy
    assert v.max_steps == 30 and v.cfg is not v.cfg
    with pytest.raises(AttributeError):
        v.cfg = cfg  # read-only: the owner says use_config
    v.use_config(cfg)
    assert v.max_steps == 3 and v.name == "changed"
