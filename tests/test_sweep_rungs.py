"""workbench.sweep.rungs: the decision round on synthetic curves (no MLflow, no Ray), and the
compute account behind sweep/compute_saved_frac."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import UserError
from workbench.sweep.rungs import Progress, RungMonitor, _Run, compute_account, fit_group


def curve(A: float, n: int, *, per_step: float = 0.01, every: int = 2, max_steps: int = 40, seed: int = 0) -> Progress:
    """Evaluations at steps 0, every, ... (n at compute > 0) of a sigmoid rising from 0.15 to A."""
    rng = np.random.default_rng(seed)
    steps = np.arange(0, n * every + 1, every)
    x = steps * per_step
    with np.errstate(divide="ignore"):
        y = np.where(x > 0, 0.15 + (A - 0.15) / (1 + (0.1 / np.maximum(x, 1e-12)) ** 1.5), 0.15)
    y = y + np.where(x > 0, rng.normal(0, 0.005, len(x)), 0)
    return Progress(x, y, int(steps[-1]), float(x[-1]), max_steps)


def monitor(tmp_path, **kw) -> tuple[RungMonitor, dict[str, _Run]]:
    mon = RungMonitor(f"sqlite:///{tmp_path / 'unused.db'}", "val/pass_rate", "compute/device_hours", rung_evals=4, **kw)
    runs = {
        "h": _Run("healthy", "healthy", "rid-h", tmp_path / "h.stop", ended=True, rung=5, last=curve(0.6, 20)),
        "c": _Run("crippled", "crippled", "rid-c", tmp_path / "c.stop", rung=1, last=curve(0.17, 4, seed=1)),
    }
    return mon, runs


def test_a_point_that_cannot_win_is_asked_to_stop_with_the_reason(tmp_path):
    mon, runs = monitor(tmp_path)
    assert mon.decide(runs) == ["c"]
    reason = (tmp_path / "c.stop").read_text()
    # 4 evaluations at compute > 0 and step 0's: the count a reader of the curve makes
    assert reason.startswith("stopped by forecast after 5 evaluations, at step 8:") and "healthy" in reason
    assert mon.requested == {"c": reason.strip()}
    assert not (tmp_path / "h.stop").exists()  # the best point never stops
    assert mon.rounds[-1]["budget"] == pytest.approx(0.01 * 40)  # default: a full point's compute
    assert mon.decide(runs) == []  # asked once


def test_nothing_stops_before_its_first_rung_or_without_a_fit(tmp_path):
    mon, runs = monitor(tmp_path)
    runs["c"].rung = 0
    assert mon.decide(runs) == []
    runs["c"].rung, runs["c"].last = 1, curve(0.17, 3)  # 3 evaluations: no fit yet, the point continues
    assert fit_group([runs["c"].last]) is None and mon.decide(runs) == []


def test_an_equal_point_continues(tmp_path):
    mon, runs = monitor(tmp_path)
    runs["c"].last = curve(0.6, 8, seed=2)
    assert mon.decide(runs) == []


def test_seeds_of_a_point_are_fitted_together():
    fit = fit_group([curve(0.6, 10, seed=0), curve(0.6, 10, seed=1)])
    assert len(fit.run_names) == 2 and fit.n == 20 and abs(fit.A - 0.6) < 0.05


def test_compute_account():
    p = curve(0.5, 5, per_step=0.01, every=2, max_steps=40)  # stopped at step 10 of 40
    assert compute_account(p, stopped=True) == pytest.approx({"spent": 0.10, "unspent": 0.30})
    assert compute_account(p, stopped=False) == pytest.approx({"spent": 0.10, "unspent": 0.0})
    assert compute_account(None, stopped=True) == {"spent": 0.0, "unspent": 0.0}


def test_bad_rung_size_and_budget_are_user_errors():
    with pytest.raises(UserError, match="at least 4"):
        RungMonitor("", "m", "x", rung_evals=3)
    with pytest.raises(UserError, match="--budget"):
        RungMonitor("", "m", "x", rung_evals=4, budget=0)


def tracked_run(tmp_path, max_steps: int):
    """(uri, run_id, sink): an MLflow run in a SQLite store, tagged with its folder, and the
    JsonlSink writing that folder's metrics.jsonl, as a point's Session sets it up."""
    from mlflow import MlflowClient

    from workbench.tracking.run_tracking import OUT_DIR_TAG
    from workbench.tracking.sink import JsonlSink

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = MlflowClient(uri)
    run_id = c.create_run(c.create_experiment("rungs")).info.run_id
    c.log_param(run_id, "train.max_steps", max_steps)
    c.set_tag(run_id, OUT_DIR_TAG, str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    return uri, run_id, JsonlSink(tmp_path / "run" / "metrics.jsonl")


def test_progress_reads_a_runs_own_rows_and_a_poller_reads_only_the_new_ones(tmp_path):
    """The monitor's view of a running point: the rows of its folder (found by the MLflow tag),
    grown between two polls; the tail kept between polls is the one used again."""
    from workbench.sweep.rungs import progress

    uri, run_id, sink = tracked_run(tmp_path, 40)

    def log(steps):
        for s in steps:
            sink.log_metrics({"compute/device_hours": 0.01 * s, "train/loss": 1.0}, step=s)
            if s % 2 == 0:
                sink.log_metrics({"val/pass_rate": 0.15 + 0.01 * s, "compute/device_hours": 0.01 * s}, step=s)

    log(range(0, 7))
    tails: dict = {}
    p = progress(run_id, "val/pass_rate", "compute/device_hours", uri, tails)
    assert (p.evaluations, p.last_step, p.max_steps) == (3, 6, 40) and p.last_x == pytest.approx(0.06)
    (tail,) = tails.values()
    log(range(7, 11))
    p = progress(run_id, "val/pass_rate", "compute/device_hours", uri, tails)
    assert (p.evaluations, p.last_step) == (5, 10) and p.y[-1] == pytest.approx(0.25)
    assert list(tails.values()) == [tail] and p.full == pytest.approx(0.4)


def test_progress_of_one_domain_reads_that_domains_curve_from_the_runs_rows(tmp_path):
    """`workbench sweep --metric val/pass_rate/code --stop-early`: the monitor follows the code curve."""
    from workbench.sweep.rungs import progress

    uri, run_id, sink = tracked_run(tmp_path, 40)
    for s in range(0, 9):
        sink.log_metrics({"compute/device_hours": 0.01 * s, "train/loss": 1.0}, step=s)
        if s % 2 == 0:
            sink.log_metrics({"val/pass_rate": 0.5, "val/pass_rate/code": 0.1 + 0.02 * s, "val/pass_rate/math": 0.9,
                              "compute/device_hours": 0.01 * s}, step=s)
    p = progress(run_id, "val/pass_rate/code", "compute/device_hours", uri)
    assert p.evaluations == 4 and list(p.y)[-4:] == pytest.approx([0.14, 0.18, 0.22, 0.26])  # compute 0 is R0, not counted


def test_a_stopped_points_reason_counts_the_evaluations_its_curve_ended_with(tmp_path):
    """The run goes on after the stop request (the steps in flight are finished, the last evaluated): the
    recorded reason must count the evaluations of the curve the run ended with, not the decision's."""
    from workbench.runs.report import eval_curve
    from workbench.sweep.rungs import progress
    from workbench.tracking.sink import read_jsonl

    uri, run_id, sink = tracked_run(tmp_path, 200)

    def log(steps, evals):
        for s in steps:
            sink.log_metrics({"compute/device_hours": 0.01 * s, "train/loss": 1.0}, step=s)
            if s in evals:
                sink.log_metrics({"val/pass_rate": 0.15 + 0.001 * s, "compute/device_hours": 0.01 * s}, step=s)

    log(range(0, 27), range(0, 27, 5))  # evaluations at 0, 5, ..., 25 when the decision is made
    mon, runs = monitor(tmp_path)
    runs["c"].run_id, runs["c"].last = run_id, progress(run_id, "val/pass_rate", "compute/device_hours", uri)
    mon.uri, mon.runs = uri, runs
    assert mon.decide(runs) == ["c"]
    assert mon.requested["c"].startswith("stopped by forecast after 6 evaluations, at step 26:")
    log(range(27, 33), (30, 31, 32))  # the request travels; the steps in flight are finished and evaluated
    reason = mon.final_reason("c")
    xs, _ = eval_curve(read_jsonl(tmp_path / "run" / "metrics.jsonl"), "compute/device_hours")
    assert len(xs) == 9  # steps 0..30 by 5, then 31 and 32
    assert reason.startswith("stopped by forecast after 9 evaluations, at step 32 (asked at step 26 after 6;")
    assert reason.endswith(mon.requested["c"].split(": ", 1)[1])  # the decision's why is kept
    assert mon.final_reason("h") is None  # not asked to stop
