"""The dashboard widget on finished run folders (Session.open) and on a session not started."""

from __future__ import annotations

import asyncio

import pytest

from workbench import Session
from workbench.errors import UserError
from workbench.widgets.dashboard import WAITING, Dashboard


def test_no_evaluation_yet_says_it_is_waiting(run_folder):
    d = Session.open(run_folder(0)).dashboard()
    assert WAITING in d.message and WAITING in d._chart.value
    assert d.fit is None and d.chart_svg == "" and d.error is None
    assert "no train step yet" in d._train.value


def test_a_session_not_started_says_so(tmp_path):
    d = Session(overrides={"out_dir": str(tmp_path / "x")}).dashboard()
    assert WAITING in d.message and "has not started" in d.message
    assert "not started" in d._header.value and d._progress.value == 0


def test_only_the_start_evaluation_shows_r0(run_folder):
    d = Session.open(run_folder(1)).dashboard()
    assert d.chart_svg == "" and "R0 = 0.1000 measured at compute 0" in d._chart.value
    assert "at least 4" in d.message


def test_before_four_evaluations_the_points_are_drawn_without_a_fit(run_folder):
    d = Session.open(run_folder(3)).dashboard()
    assert d.fit is None and "at least 4" in d.message
    assert "mark-symbol" in d.chart_svg and "mark-area" not in d.chart_svg
    assert d._fit_text.value == ""


def test_full_dashboard_shows_fit_band_forecast_progress_and_train_metrics(run_folder):
    s = Session.open(run_folder(16))
    d = s.dashboard()
    assert d.error is None and d.message == ""
    assert d.fit.A == pytest.approx(0.62, abs=0.04)  # the curve the folder was written from
    assert d.fit.A_ci[0] <= d.fit.A <= d.fit.A_ci[1]
    for mark in ("mark-area", "mark-line", "mark-symbol", "mark-rule"):  # band, curve, points, A / C_mid markers
        assert mark in d.chart_svg
    latest = s.curve["compute_device_hours"].max()
    assert d.forecast["budget"] == pytest.approx(10 * latest)  # default budget: 10x the latest compute
    assert d.forecast["lo"] <= d.forecast["pass_rate"] <= d.forecast["hi"]
    assert "forecast at" in d._fit_text.value and "A = 0.6" in d._fit_text.value
    assert f"<span data-horizon style='color:#555'>({d.forecast['horizon']})</span>" in d._fit_text.value
    assert d.forecast["horizon"].startswith("10x the compute seen")
    # which forecast was used, and why, is shown beside it
    assert d.forecast["forecast_used"] == d.fit.forecast_used
    assert f"forecast: {d.fit.forecast_used.split()[0]}" in d._fit_text.value
    assert d._progress.value == 150 and "finished" in d._header.value
    for label in ("reward", "staleness (mean)", "truncation rate", "entropy"):
        assert label in d._train.value
    assert "retired share" in d._train.value and "<div data-metric='sampler/retired_share'>0.25</div>" in d._train.value


def test_a_run_that_does_not_learn_shows_its_flat_level_not_nan(run_folder):
    d = Session.open(run_folder(12, true={"A": 0.3, "B": 1.0, "C_mid": 0.01, "R0": 0.3})).dashboard()
    assert d.fit.no_gain
    assert f"no gain detected, flat at {d.fit.A:.4f}" in d._fit_text.value and "not identified" in d._fit_text.value
    assert abs(d.fit.A - 0.3) < 0.01
    assert "nan" not in d._fit_text.value


def test_an_explicit_budget_and_fit_window_are_used(run_folder):
    s = Session.open(run_folder(16))
    d = s.dashboard(budget=1.0, fit_from=0.02)
    assert d.forecast["budget"] == 1.0
    assert d.fit.fit_from == 0.02 and d.fit.n == int((s.curve["compute_device_hours"] >= 0.02).sum())


def test_bad_budget_or_poll_is_a_user_error(run_folder):
    s = Session.open(run_folder(5))
    with pytest.raises(UserError, match="budget"):
        s.dashboard(budget=-1)
    with pytest.raises(UserError, match="poll"):
        s.dashboard(poll=0)


def test_updates_run_as_an_asyncio_task_only_inside_an_event_loop(run_folder):
    s = Session.open(run_folder(5))
    d = Dashboard(s)
    assert d._task is None and d.start() is False  # plain Python: no loop, refresh() by hand

    async def inside():
        d2 = Dashboard(s, poll=0.05)
        task = d2._task
        await asyncio.wait_for(task, timeout=5)  # the run has ended: the task stops by itself
        return task

    task = asyncio.run(inside())
    assert task.done() and not task.cancelled()


def test_close_cancels_the_update_task(run_folder):
    s = Session(overrides={"out_dir": "/nonexistent/never-started"})

    async def inside():
        d = s.dashboard(poll=0.05)
        await asyncio.sleep(0.2)
        assert not d._task.done()  # a session not started yet: keeps waiting
        d.close()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return d._task

    assert asyncio.run(inside()).cancelled()


def test_a_not_learning_warning_stays_in_view_as_a_red_line(run_folder):
    """The coordinator's status carries the not-learning warning (engine/run/learning.py); the
    header keeps it in view after later events push it out of the last three."""
    s = Session.open(run_folder(3))
    warning = "not learning: no completion has passed the checker in 3 steps; 0 of 48 sampled completions passed"
    s.view.state = {**s.view.state, "learning": warning, "events": [warning, "a", "b", "c"]}
    header = Dashboard(s)._header_html()
    assert "workbench-not-learning" in header and "no completion has passed the checker in 3 steps" in header
    s.view.state = {**s.view.state, "learning": None}
    s.view.summary = {**(s.view.summary or {}), "training": "nothing was trained: every group was dropped"}
    assert "nothing was trained: every group was dropped" in Dashboard(s)._header_html()
