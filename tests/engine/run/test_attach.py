"""Session.attach without Ray: names resolved through the run registry, a live run followed from its
folder's files (rows as they are written, a rollback, the end), ambiguous and unknown names in one line."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest

from tests.helpers.run_folder import write_run
from workbench import Session
from workbench.config import RunConfig
from workbench.engine.run.registry import find_run, known_runs, register
from workbench.errors import UserError
from workbench.runs.follow import STOP_FILE
from workbench.runs.liveness import STALE_S, folder_status


@pytest.fixture(autouse=True)
def registry_home(tmp_path, monkeypatch):
    """A registry of this test's own (the state dir the engine's cluster records use)."""
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path / "state"))


def live_folder(folder, name="watched", n_evals=5, every=2):
    """A run folder as a live run leaves it mid-way: rows and a fresh heartbeat, no summary.json yet;
    recorded in the registry by a driver that is alive (this process)."""
    write_run(folder, n_evals, every=every)
    (folder / "summary.json").unlink()
    (folder / "heartbeat").write_text(f"{time.time()}\n")
    cfg = dataclasses.replace(RunConfig(), name=name, out_dir=str(folder))
    register(cfg, detached=False)
    return folder


def append_rows(folder, rows):
    with open(folder / "metrics.jsonl", "a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows))


def test_live_run_is_followed_from_its_folder_by_name(tmp_path):
    folder = live_folder(tmp_path / "a")
    s = Session.attach("watched")
    assert not s.finished and s.status()["status"] == "running" and s.status()["watch_only"]
    before = len(s.rows)
    assert s.view.state["step"] == 8
    # a line still being written is not read until it is whole; then it arrives with the next poll
    with open(folder / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 9, "compute/device_hours": 0.0045, "train/reward_mean": 0.1}\n{"step": 10, "comp')
    assert [r["step"] for r in s.update()] == [9]
    with open(folder / "metrics.jsonl", "a") as fh:
        fh.write('ute/device_hours": 0.005, "val/pass_rate": 0.5}\n')
    assert [r["step"] for r in s.update()] == [10]
    assert len(s.rows) == before + 2 and s.view.state["compute/device_hours"] == 0.005
    with pytest.raises(UserError, match="watched from its folder"):
        s.pause()
    # a trainer restart rolls metrics.jsonl back to its checkpoint: the view follows the file
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] <= 4))
    s.update()
    assert max(r["step"] for r in s.rows) == 4
    # stop() asks the driver through the folder; the driver's end (summary.json) ends the session
    s.feed.handle.stop()
    assert "notebook" in (folder / STOP_FILE).read_text()
    append_rows(folder, [{"step": 5, "train/reward_mean": 0.0}])
    (folder / "summary.json").write_text(json.dumps({"status": "stopped", "steps": 5}))
    assert s.wait(timeout=10, poll=0.05) == {"status": "stopped", "steps": 5}
    assert s.finished and not (folder / "fit.json").exists()  # the driver reports its end, not a watcher


def test_ended_run_attaches_read_only_by_folder_with_its_fit(tmp_path):
    folder = live_folder(tmp_path / "b", name="done", n_evals=6)
    (folder / "summary.json").write_text(json.dumps({"status": "finished", "steps": 10}))
    s = Session.attach(str(folder))
    assert s.finished and s.status()["status"] == "finished"
    assert len(s.curve) == 6 and s.fit().A > 0
    with pytest.raises(UserError, match="read-only"):
        s.stop()


def test_names_that_are_ambiguous_or_unknown_are_one_line(tmp_path):
    live_folder(tmp_path / "x1", name="twin")
    live_folder(tmp_path / "x2", name="twin")
    with pytest.raises(UserError) as e:
        find_run("twin")
    msg = str(e.value)
    assert "\n" not in msg and "2 runs are named 'twin'" in msg and str(tmp_path / "x1") in msg and str(tmp_path / "x2") in msg
    assert find_run(tmp_path / "x2").out_dir == str(tmp_path / "x2")  # the folder tells them apart
    with pytest.raises(UserError) as e:
        Session.attach("nobody")
    msg = str(e.value)
    assert "\n" not in msg and "no run named 'nobody'" in msg and "'twin' in" in msg
    # a deleted run folder frees its name
    for f in (tmp_path / "x1").iterdir():
        f.unlink()
    (tmp_path / "x1").rmdir()
    assert [e.out_dir for e in known_runs()] == [str(tmp_path / "x2")]
    assert find_run("twin").out_dir == str(tmp_path / "x2")


def test_folder_status_reads_the_end_and_death(tmp_path):
    folder = write_run(tmp_path / "r", 3)
    assert folder_status(folder) == ("finished", None)
    started = time.time() + 5  # a run started after that summary was written: the summary is an older run's
    assert folder_status(folder, since=started)[0] == "running"
    assert folder_status(folder, since=started, pid_gone=True)[0] == "failed"
    (folder / "summary.json").unlink()
    old = time.time() - STALE_S - 60
    for f in folder.iterdir():
        os.utime(f, (old, old))
    status, why = folder_status(folder)
    assert status == "failed" and "no sign of life" in why
