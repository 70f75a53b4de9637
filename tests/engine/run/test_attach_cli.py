"""A `workbench run` started in a terminal (here: a subprocess) is watched from a notebook (here: this
process) by its name while it runs, goes on to its end once the watcher lets go, and attaches by
folder after it has ended, read-only, with its curve and fit."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time

import pytest

from tests.engine.run.test_run_command import WORKBENCH, write_config
from workbench import Session
from workbench.errors import UserError

STEPS = 40


@pytest.mark.slow
def test_cli_run_is_watched_by_name_then_opened_by_folder(tmp_path, model_cache):
    path = write_config(tmp_path, model_cache, name="cli-watched", train={"max_steps": STEPS},
                        eval={"every_steps": 5}, tracking={"mlflow": False},
                        checkpoint={"export_policy": False})
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own private Ray, as in a terminal
    proc = subprocess.Popen([*WORKBENCH, "run", "--config", str(path), "--out", str(out), "--quiet", "--no-report"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240  # Ray's start and the tiny model's warm-up on a loaded 2-core machine
        s = None
        while s is None:  # the run is found by name once its driver has recorded it
            assert proc.poll() is None, proc.communicate()[1]
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the run never became attachable by name: {proc.communicate()[1][-2000:]}")
            try:
                s = Session.attach("cli-watched")
            except UserError:
                time.sleep(0.3)
        assert s.out_dir == out.resolve() and s.status()["watch_only"]
        with pytest.raises(UserError, match="only stop"):
            s.pause()
        seen = []  # steps seen while the run is running
        while len(seen) < 2:  # steps arrive while it runs
            s.update()
            assert not s.finished, f"the run ended before two of its steps were seen live (saw {seen})"
            step = s.view.state["step"]
            if s.view.state["status"] == "running" and step and (not seen or step > seen[-1]):
                seen.append(step)
            time.sleep(0.1)
        assert seen[-1] < STEPS
        assert s.rows and s.rows[-1]["step"] == max(r["step"] for r in s.rows)
        del s  # the notebook lets go (a kernel closed): the run goes on
        gc.collect()
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == STEPS
    ended = Session.attach(str(out))  # by folder, after its end: read-only, with its curve and fit
    assert ended.finished and ended.status()["status"] == "finished"
    assert list(ended.curve["step"]) == list(range(0, STEPS + 1, 5))
    evals = [r["val/pass_rate"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "val/pass_rate" in r]
    assert list(ended.curve["val_pass_rate"]) == evals
    fit, why = ended.view.fit_or_none()  # the tiny run's curve may be too flat to fit: then the view says why
    assert (fit is not None and why == "") or (fit is None and why)
    ended.chart()  # the dashboard's chart: points, and the fit when there is one
    with pytest.raises(UserError, match="read-only"):
        ended.stop()
    assert not (out / "stop_request").exists()
