"""One `workbench run` in a subprocess, as a user starts it, for the benches that measure whole runs.

    from cli_run import workbench_run
    done = workbench_run(config_path, out_folder)       # RunResult: rows, summary, wall seconds
    done.rows                                           # metrics.jsonl's rows

The run gets the repository and benchmarks/ on its PYTHONPATH (the benches' reward functions and
checkers live there and the Ray workers import them), `--fresh --quiet` (and `--no-report` unless
`report=True`: the fit, its backtest and their files), and no RAY_ADDRESS (each run starts its own local cluster). A run that fails stops the bench with its
output's tail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass
class RunResult:
    folder: Path
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    wall_s: float  # the subprocess's wall time, start-up included
    stdout: str  # what the run printed (its report's lines with report=True)
    error: str = ""  # with check=False: the failed run's last line of output (rows and summary empty)


def run_env() -> dict[str, str]:
    """A child process's environment: the repository and benchmarks/ importable, no RAY_ADDRESS."""
    paths = [str(REPO), str(REPO / "benchmarks"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    env.pop("RAY_ADDRESS", None)
    return env


def last_line(text: str) -> str:
    """A failed child's last non-blank line of output: its one-line error."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def workbench_run(config: Path, folder: Path, *, extra: list[str] | None = None, report: bool = False,
                  timeout: float = 7200, check: bool = True) -> RunResult:  # fmt: skip
    """`workbench run --config CONFIG --out FOLDER`; its rows, summary and wall time. A failed run
    stops the bench (its output's tail on stderr), or with `check=False` comes back as `error`."""
    cmd = [sys.executable, "-m", "workbench.cli", "run", "--config", str(config), "--out", str(folder),
           "--fresh", "--quiet", *([] if report else ["--no-report"]), *(extra or [])]  # fmt: skip
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=timeout)
    wall = time.time() - t0
    if proc.returncode == 0 and (folder / "summary.json").exists():
        return read_run(folder, wall, proc.stdout)
    if not check:
        return RunResult(folder, [], {}, wall, proc.stdout, error=last_line(proc.stderr if proc.stderr.strip() else proc.stdout))
    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    raise SystemExit(f"{config.name}: `workbench run` failed (exit {proc.returncode})")


def read_run(folder: Path, wall: float, stdout: str = "", summary: dict[str, Any] | None = None) -> RunResult:
    """A run folder's rows and summary (read here unless given) as a RunResult."""
    sys.path.insert(0, str(REPO))
    from workbench.tracking.sink import read_jsonl

    if summary is None:
        summary = json.loads((folder / "summary.json").read_text())
    return RunResult(folder, read_jsonl(folder / "metrics.jsonl"), summary, wall, stdout)


def finished_run(folder: Path) -> RunResult | None:
    """An earlier `workbench_run` into `folder` that finished (its wall time the run's own), or None."""
    summary_path = folder / "summary.json"
    if not summary_path.exists():
        return None
    summary = json.loads(summary_path.read_text())
    if summary.get("status") != "finished":
        return None
    return read_run(folder, float(summary.get("wall_seconds", 0.0)), summary=summary)
