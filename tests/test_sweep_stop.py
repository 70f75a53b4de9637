"""The sweep's stop-request protocol, both sides: the sweep asks through a file, the run's watch acts once."""

from __future__ import annotations

import os

from workbench.runs.stop_request import STOP_REQUEST_ENV, StopWatch, request_stop, stop_env, stop_requested


def test_no_request_until_the_sweep_writes_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv(STOP_REQUEST_ENV, raising=False)
    assert stop_requested() is None  # outside a sweep
    path = tmp_path / "point.stop"
    monkeypatch.setitem(os.environ, *next(iter(stop_env(path).items())))
    assert os.environ[STOP_REQUEST_ENV] == str(path) and stop_requested() is None
    request_stop(path, "stopped by forecast: cannot win\n")
    assert path.read_text() == "stopped by forecast: cannot win\n" and stop_requested() == "stopped by forecast: cannot win"


def test_the_watch_stops_the_run_once_and_says_why(tmp_path, monkeypatch, capsys):
    path = tmp_path / "point.stop"
    monkeypatch.setenv(STOP_REQUEST_ENV, str(path))
    calls = []
    watch = StopWatch()
    assert not watch.check("r1", lambda: calls.append(1)) and calls == []
    request_stop(path, "loser")
    assert watch.check("r1", lambda: calls.append(1)) and watch.reason == "loser"
    assert not watch.check("r1", lambda: calls.append(1)) and calls == [1]  # once
    assert "workbench: stop requested for run 'r1': loser" in capsys.readouterr().out


def test_a_run_that_already_ended_is_not_an_error(tmp_path, monkeypatch):
    path = tmp_path / "point.stop"
    path.write_text("")
    monkeypatch.setenv(STOP_REQUEST_ENV, str(path))

    def gone():
        raise RuntimeError("actor died")

    watch = StopWatch()
    assert watch.check("r", gone) and watch.reason == ""
