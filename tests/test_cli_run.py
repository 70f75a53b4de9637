"""benchmarks/cli_run.py, the benches' `workbench run`: a failed run is the bench's one line (or stops
it), and a finished run folder is read back for a study that resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def cli_run(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import cli_run

    return cli_run


def test_a_refused_run_is_its_one_line_error_or_stops_the_bench(cli_run, tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("name: bad\ntrain: {lr: -1}\n")  # refused before Ray starts
    done = cli_run.workbench_run(config, tmp_path / "out", check=False)
    assert done.rows == [] and "train.lr" in done.error and "\n" not in done.error, done.error
    with pytest.raises(SystemExit, match="bad.yaml"):
        cli_run.workbench_run(config, tmp_path / "out")


def test_only_a_finished_run_folder_is_read_back(cli_run, tmp_path):
    folder = tmp_path / "run"
    assert cli_run.finished_run(folder) is None
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 0, "val/pass_rate": 0.25}) + "\n")
    (folder / "summary.json").write_text(json.dumps({"status": "failed", "wall_seconds": 9.0}))
    assert cli_run.finished_run(folder) is None  # a failed or cut run is rerun, not counted
    (folder / "summary.json").write_text(json.dumps({"status": "finished", "wall_seconds": 9.0}))
    done = cli_run.finished_run(folder)
    assert done.rows == [{"step": 0, "val/pass_rate": 0.25}] and done.wall_s == 9.0
