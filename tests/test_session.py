"""workbench.Session against the real engine: a Ray local cluster (one per module), the built-in
tiny model, and a SQLite MLflow store in a temp folder."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.conftest import TINY_SESSION

ray = pytest.importorskip("ray")
mlflow = pytest.importorskip("mlflow")

from workbench import Session  # noqa: E402
from workbench.errors import UserError  # noqa: E402
from workbench.widgets.dashboard import WAITING  # noqa: E402

# A tiny run: quickstart's model and task, few steps, a small evaluation every 2 steps.
TINY = {**TINY_SESSION, "checkpoint.every_steps": 2}


@pytest.fixture(scope="module")
def ray_cluster():
    if ray.is_initialized():  # another module's cluster: share it, leave it running
        yield
        return
    from workbench.engine.cluster import connect

    connect(num_cpus=4, lasting=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def make(tmp_path, uri, overrides_extra=None, **kwargs) -> Session:
    name = f"t-{uuid.uuid4().hex[:8]}"
    overrides = {**TINY, "out_dir": str(tmp_path / name), **(overrides_extra or {})}
    return Session(overrides=overrides, name=name, tracking_uri=uri, experiment="tests", **kwargs)


def wait_for(pred, timeout: float = 120.0, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def settled_step(s: Session, quiet: float = 3.0, timeout: float = 90.0) -> int:
    """The step once it has not moved for `quiet` seconds (a paused run finishes its step in flight)."""
    end = time.monotonic() + timeout
    step, since = s.status()["step"], time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.25)
        now = s.status()["step"]
        if now != step:
            step, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return step
    raise AssertionError("the step kept moving after pause()")


@pytest.fixture(scope="module")
def finished(ray_cluster, uri, tmp_path_factory):
    """One short run taken to the end by a dashboard's event-loop task (shared by the checks below)."""
    s = make(tmp_path_factory.mktemp("runs"), uri)
    with pytest.raises(UserError, match="at least 4"):
        s.fit()  # nothing evaluated yet
    s.start(max_steps=10)
    early = s.status()

    async def watch():
        d = s.dashboard(poll=0.2)
        assert d._task is not None  # an asyncio task on the running loop, not a thread
        for _ in range(3000):  # only the task touches the session while this coroutine sleeps
            await asyncio.sleep(0.2)
            if d._task.done():
                break
        return d

    dash = asyncio.run(watch())
    assert s._finished  # the task saw the end and finished the session (fit logged, actor released)
    return s, early, s.wait(), dash


@pytest.mark.slow
def test_dashboard_task_follows_the_run_to_its_end(finished):
    s, _, _, d = finished
    assert d._progress.value == 10 and d.fit is not None and "mark-area" in d.chart_svg
    assert "finished" in d._header.value


@pytest.mark.slow
def test_start_returns_while_the_run_is_still_going(finished):
    s, early, summary, _ = finished
    assert early["status"] in ("created", "starting", "running") and early["step"] < 10
    assert summary["status"] == "finished" and summary["steps"] == 10


@pytest.mark.slow
def test_curve_holds_every_evaluation(finished):
    s, _, _, _ = finished
    c = s.curve
    assert list(c.columns) == ["step", "compute_device_hours", "compute_flops", "val_pass_rate", "val_pass_rate_se"]
    assert list(c["step"]) == [0, 2, 4, 6, 8, 10]  # at start, then every 2 steps
    assert c["compute_device_hours"].iloc[0] == 0 and c["compute_device_hours"].is_monotonic_increasing
    assert c["val_pass_rate"].between(0, 1).all()
    assert s.history.index.max() == 10 and "train/reward_mean" in s.history


@pytest.mark.slow
def test_fit_and_forecast(finished):
    s, _, _, _ = finished
    f = s.fit()
    assert f.n == 5 and f.R0 == s.curve["val_pass_rate"].iloc[0]  # R0 is measured at compute 0
    assert f.A_ci[0] <= f.A <= f.A_ci[1]
    budget = 10 * s.curve["compute_device_hours"].max()
    fc = s.forecast(budget)
    assert fc["pass_rate"] == pytest.approx(f.predict(budget))
    assert fc["lo"] <= fc["pass_rate"] <= fc["hi"]
    assert fc["verdict"] and fc["gain"] == pytest.approx(f.predict(budget) - f.predict(fc["current"]))
    with pytest.raises(UserError, match="budget"):
        s.forecast(-1.0)
    with pytest.raises(UserError, match="at least 4"):
        s.fit(fit_from=1e9)


@pytest.mark.slow
def test_mlflow_run_has_the_curve_and_the_fit(finished, uri):
    s, _, _, _ = finished
    old = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        runs = mlflow.search_runs(experiment_names=["tests"], filter_string=f"attributes.run_id = '{s.run_id}'")
    finally:
        mlflow.set_tracking_uri(old)
    assert len(runs) == 1
    row = runs.iloc[0]
    assert row["status"] == "FINISHED"
    assert row["metrics.val/pass_rate"] == pytest.approx(s.curve["val_pass_rate"].iloc[-1])
    assert row["metrics.fit/A"] == pytest.approx(s.fit().A)
    assert row["metrics.fit/no_gain"] == float(s.fit().no_gain)
    # a no-gain fit (a few noisy evaluations may not show a rise yet) has no B or C_mid to log
    shape = () if s.fit().no_gain else ("fit/B", "fit/C_mid", "fit/C_mid_lo", "fit/C_mid_hi")
    for k in ("fit/A_lo", "fit/A_hi", *shape):
        assert f"metrics.{k}" in row
    client = mlflow.MlflowClient(tracking_uri=uri)
    arts = {a.path for a in client.list_artifacts(s.run_id, "fit")}
    assert {"fit/fit.json", "fit/fit.html", "fit/fit.png"} <= arts
    hist = client.get_metric_history(s.run_id, "val/pass_rate")
    assert sorted(m.step for m in hist) == [0, 2, 4, 6, 8, 10]


@pytest.mark.slow
def test_start_twice_is_an_error(finished):
    s, _, _, _ = finished
    with pytest.raises(UserError, match="already started"):
        s.start()
    assert s.stop()["status"] == "finished"  # stop after the end: just the summary


@pytest.mark.slow
def test_dashboard_after_the_run_shows_fit_band_and_forecast(finished):
    s, _, _, _ = finished
    d = s.dashboard(budget=5 * s.curve["compute_device_hours"].max())
    assert d.fit is not None and d.error is None
    assert "mark-area" in d.chart_svg and "mark-symbol" in d.chart_svg  # band and points
    assert d.forecast["budget"] == d.budget
    assert d._progress.value == d._progress.max == 10
    assert "reward" in d._train.value


def test_dashboard_without_evaluations_says_it_is_waiting(tmp_path, uri):
    s = make(tmp_path, uri)
    d = s.dashboard()
    assert WAITING in d.message and d.fit is None and d.error is None
    assert WAITING in d._chart.value


@pytest.mark.slow
def test_fresh_start_refuses_a_folder_with_checkpoints(finished, uri):
    s, _, _, _ = finished
    again = Session(overrides={**TINY, "out_dir": str(s.out_dir)}, name=s.name + "x", tracking_uri=uri, experiment="tests")
    with pytest.raises(UserError, match="resume_from"):
        again.start()


@pytest.mark.slow
def test_pause_resume_stop_attach_and_resume_from(ray_cluster, uri, tmp_path):
    from workbench.tracking.store import create_run

    parent = create_run("tests", "parent", tracking_uri=uri)
    child = create_run("tests", "child", parent_run_id=parent, tracking_uri=uri)
    # a sweep hands the session its run; a checkpoint every step, so the stopped step is one
    s = make(tmp_path, uri, run_id=child, parent_run_id=parent, overrides_extra={"checkpoint.every_steps": 1})
    with pytest.raises(UserError, match="not started"):
        s.pause()
    s.start(max_steps=500)
    wait_for(lambda: s.status()["step"] >= 2, what="step 2")
    s.pause()
    assert s.status()["status"] == "paused"
    held = settled_step(s)  # the trainer step in flight finishes, then nothing trains
    time.sleep(2.0)
    assert s.status()["step"] == held
    s.resume()
    wait_for(lambda: s.status()["step"] >= held + 2, what="training after resume")

    other = Session.attach(s.name)  # what a restarted kernel does
    assert other.run_id == s.run_id and other.out_dir == s.out_dir
    assert other.status()["status"] == "running"
    assert len(other.curve) >= 1

    summary = s.stop()
    stopped_at = summary["steps"]
    assert summary["status"] == "stopped" and stopped_at < 500
    assert summary["trainer_wall_seconds"] <= summary["wall_seconds"]  # the pause counts in neither
    latest = (s.out_dir / "checkpoints" / "LATEST").read_text().strip()
    assert latest == f"step_{stopped_at:06d}"  # stop() waited for the final checkpoint
    assert mlflow.MlflowClient(tracking_uri=uri).get_run(s.run_id).info.status == "KILLED"
    with pytest.raises(UserError, match="has ended"):
        s.pause()

    with pytest.raises(UserError, match=f"already at step {stopped_at}.*max_steps > {stopped_at}"):
        Session.resume_from(s.out_dir, max_steps=stopped_at)  # nothing to train: refused, config untouched
    r = Session.resume_from(s.out_dir, max_steps=stopped_at + 4)
    assert r.run_id == child and r.status()["resumed_from"] == stopped_at
    done = r.wait(timeout=300)
    assert done["steps"] == stopped_at + 4
    steps = list(r.curve["step"])
    assert steps == sorted(set(steps)) and steps[0] == 0 and steps[-1] == stopped_at + 4  # one curve, no step twice
    # the summary covers the whole run, not only the steps since the resume
    assert done["val_pass_rate_first"] == pytest.approx(r.curve["val_pass_rate"].iloc[0])
    assert done["val_pass_rate_last"] == pytest.approx(r.curve["val_pass_rate"].iloc[-1])
    with pytest.raises(UserError, match="already at step"):
        Session.resume_from(s.out_dir)  # finished at its target: resuming would end at once
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(child)
    assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.metrics["fit/A"] == pytest.approx(r.fit().A)


def test_bad_arguments_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="x must be"):
        Session(x="tokens")
    with pytest.raises(UserError, match="not found"):
        Session(tmp_path / "missing.yaml")
    with pytest.raises(UserError, match="overrides"):
        Session(overrides="train.lr=1")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="nothing to resume|no run"):
        Session.resume_from(tmp_path / "nowhere")
    with pytest.raises(UserError, match="max_steps must be a whole number"):
        Session().start(max_steps="abc")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="max_minutes must be a number"):
        Session().start(max_minutes="x")  # type: ignore[arg-type]


def test_recipe_swaps_the_preset_but_keeps_the_configs_own_adjustments():
    # quickstart.yaml turns length control off (2-character answers); a preset that leaves length
    # control as scalerl has it keeps that, one whose point is length control wins.
    no_fp32 = Session(recipe="scalerl-loo-no-fp32").cfg.recipe
    assert no_fp32.name == "scalerl-loo-no-fp32" and not no_fp32.fp32_head and no_fp32.length_control.type == "none"
    penalty = Session(recipe="scalerl-loo-length-penalty").cfg.recipe
    assert penalty.length_control.type == "penalty" and penalty.fp32_head
    with pytest.raises(UserError, match="unknown recipe"):
        Session(recipe="no-such-recipe")


def test_open_views_a_run_folder_without_ray(tmp_path):
    import json

    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"name": "old", "eval": {"every_steps": 5}}))
    rows = [{"step": 5 * i, "val/pass_rate": 0.1 + 0.05 * i, "compute/device_hours": 0.01 * i, "compute/flops": 1e9 * i}
            for i in range(6)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps({"status": "stopped", "steps": 25}))
    s = Session.open(folder)
    assert s.status()["status"] == "stopped" and s.status()["step"] == 25
    assert list(s.curve["val_pass_rate"]) == pytest.approx([0.1, 0.15, 0.2, 0.25, 0.3, 0.35])
    assert s.fit().n == 5
    with pytest.raises(UserError, match="read-only"):
        s.stop()


def test_curve_is_ordered_by_step_when_evaluations_arrive_out_of_order(tmp_path):
    import json

    folder = tmp_path / "ooo"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"name": "ooo"}))
    steps = [0, 4, 2, 6, 8]  # the evaluation of step 4 finished before that of step 2
    rows = [{"step": s, "val/pass_rate": 0.1 + 0.01 * s, "compute/device_hours": 0.001 * s} for s in steps]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = Session.open(folder)
    assert list(s.curve["step"]) == [0, 2, 4, 6, 8]
    assert s.fit().n == 4  # the fit needs compute in increasing order


def test_importing_the_session_loads_neither_the_sweep_nor_ray():
    """The session reads a sweep's stop request through workbench.runs.stop_request, not the sweep runner."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, workbench.session; "
            "print(sorted(m for m in sys.modules if m == 'workbench.sweep' or m.startswith(('workbench.sweep.', 'ray'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True, timeout=120, check=True).stdout  # fmt: skip
    assert out.strip() == "[]", out


def test_the_view_holds_a_copy_of_the_sessions_config(tmp_path):
    s = Session(overrides={"train.max_steps": 7}, name="copy", tracking=False)
    assert s.view.cfg is not s.cfg and s.view._cfg is not s.cfg
    s.cfg.train.max_steps = 99  # the live config, changed in place: the view's copy is not
    assert s.view.max_steps == 7
    s.view.cfg.train.max_steps = 55  # a copy handed out: changing it changes nothing
    assert s.view.max_steps == 7 and s.cfg.train.max_steps == 99
    s.cfg = s.cfg  # the owner sets its config: the view takes a fresh copy
    assert s.view.max_steps == 99 and s.max_steps == 99 and s.view._cfg is not s.cfg
