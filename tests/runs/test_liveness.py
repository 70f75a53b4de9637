"""Dead runs are marked dead: heartbeat, verdicts from a run folder, and MLflow runs ended for real."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
from mlflow import MlflowClient

from workbench.runs.liveness import STALE_S, Heartbeat, last_sign_of_life, mark_dead_runs, verdict
from workbench.tracking.store import create_run, ensure_experiment


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def _age(path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_heartbeat_keeps_touching_its_file_until_stopped(tmp_path):
    beat = Heartbeat(tmp_path, every=0.05).start()
    first = (tmp_path / "heartbeat").stat().st_mtime
    deadline = time.time() + 5
    while (tmp_path / "heartbeat").stat().st_mtime == first and time.time() < deadline:
        time.sleep(0.02)
    beat.stop()
    assert (tmp_path / "heartbeat").stat().st_mtime > first
    stopped = (tmp_path / "heartbeat").stat().st_mtime
    time.sleep(0.2)
    assert (tmp_path / "heartbeat").stat().st_mtime == stopped


def test_verdicts(tmp_path):
    now = time.time()
    assert verdict(tmp_path / "elsewhere", now - 10_000, now) is None  # folder not visible here: no verdict
    assert verdict(tmp_path, now - 10, now) is None  # just created: not started yet
    assert verdict(tmp_path, now - 10_000, now)[0] == "FAILED"  # never started
    (tmp_path / "heartbeat").write_text("x")
    assert verdict(tmp_path, now - 10_000, now) is None  # beating
    _age(tmp_path / "heartbeat", STALE_S + 5)
    status, reason = verdict(tmp_path, now - 10_000, now)
    assert status == "FAILED" and "died" in reason
    (tmp_path / "summary.json").write_text(json.dumps({"status": "stopped"}))
    _age(tmp_path / "summary.json", STALE_S + 5)
    assert verdict(tmp_path, now - 10_000, now)[0] == "KILLED"  # ended cleanly, MLflow never told
    _age(tmp_path / "summary.json", 10 * STALE_S)  # an old segment's summary, then a resume that died
    assert verdict(tmp_path, now - 10_000, now)[0] == "FAILED"
    assert last_sign_of_life(tmp_path) is not None


def test_mark_dead_runs_ends_only_dead_runs(tmp_path, tracking_uri):
    exp = f"live-{uuid.uuid4().hex[:6]}"
    ensure_experiment(exp, tracking_uri)
    dead, alive, remote = tmp_path / "dead", tmp_path / "alive", tmp_path / "not-here"
    for d in (dead, alive):
        d.mkdir()
        (d / "heartbeat").write_text("x")
    _age(dead / "heartbeat", STALE_S + 30)
    ids = {d.name: create_run(exp, d.name, {"workbench.out_dir": str(d)}, tracking_uri=tracking_uri)
           for d in (dead, alive, remote)}
    ended = mark_dead_runs(tracking_uri, experiments=[exp])
    assert [e["run_id"] for e in ended] == [ids["dead"]]
    c = MlflowClient(tracking_uri)
    assert c.get_run(ids["dead"]).info.status == "FAILED"
    assert "died" in c.get_run(ids["dead"]).data.tags["workbench.died"]
    assert c.get_run(ids["alive"]).info.status == "RUNNING"
    assert c.get_run(ids["not-here"]).info.status == "RUNNING"
    assert mark_dead_runs(tracking_uri, experiments=[exp]) == []  # already ended: nothing more to do
    assert mark_dead_runs("sqlite:///" + str(tmp_path / "nothing" / "x.db"), experiments=[exp]) == []
