"""A study's curves, grouped by recipe: from an MLflow experiment, or from a folder of CSVs.

A study is what `workbench.scaling.decide.findings` and `early_calls` read: recipe -> its runs
(seeds), each a (compute, score) curve. Two sources:

    study = study_from_mlflow("scalerl-loo", x="compute/flops")   # finished runs, by param recipe.name
    study = study_from_folder("examples/loo")                      # examples/loo/<recipe>/<run>.csv
    write_study(study, "examples/loo", provenance="...")           # the folder form, for git
    record = read_stop_early("examples/loo/stop_early.json")         # what a --stop-early sweep stopped (sweep/record.py)

The folder form holds one CSV per run (columns compute, pass_rate) under a folder per recipe, and
a README.md with the provenance; it is what a study ships as, since the MLflow store is not in git.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.errors import UserError
from workbench.runs.fits import RECIPE_PARAM

Study = dict[str, list[tuple[np.ndarray, np.ndarray]]]


def study_from_mlflow(experiment: str, *, x: str = "compute/flops", metric: str = "val/pass_rate",
                      tracking_uri: str | None = None) -> Study:
    """The experiment's finished runs that logged `metric`, grouped by their recipe (param recipe.name)."""
    from workbench.tracking.queries import run_curve, runs_frame  # pandas and MLflow: loaded only here

    frame = runs_frame(experiment=experiment, tracking_uri=tracking_uri)
    if frame.empty:
        raise UserError(f"experiment {experiment!r} has no runs")
    if RECIPE_PARAM not in frame.columns or metric not in frame.columns:
        raise UserError(f"experiment {experiment!r}: no run logged both a recipe ({RECIPE_PARAM}) and {metric!r}")
    done = frame[(frame["status"] == "FINISHED") & frame[metric].notna() & frame[RECIPE_PARAM].notna()]
    study: Study = {}
    for rid, recipe in zip(done["run_id"], done[RECIPE_PARAM]):
        curve = run_curve(rid, metric=metric, x=x, tracking_uri=tracking_uri)
        study.setdefault(str(recipe), []).append((curve["x"].to_numpy(float), curve["y"].to_numpy(float)))
    if not study:
        raise UserError(f"experiment {experiment!r} has no finished run with a recipe and {metric!r}")
    return study


def study_from_folder(folder: str | Path) -> Study:
    """`folder/<recipe>/<run>.csv` (columns compute, pass_rate), runs in file-name order."""
    root = Path(folder)
    if not root.is_dir():
        raise UserError(f"study folder {root} does not exist")
    study: Study = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        runs = [_read(p) for p in sorted(sub.glob("*.csv"))]
        if runs:
            study[sub.name] = runs
    if not study:
        raise UserError(f"study folder {root} holds no <recipe>/<run>.csv curves")
    return study


def _read(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"compute", "pass_rate"} <= set(rows[0]):
        raise UserError(f"{path}: expected columns compute, pass_rate")
    return np.array([float(r["compute"]) for r in rows]), np.array([float(r["pass_rate"]) for r in rows])


def write_study(study: Study, folder: str | Path, *, provenance: str) -> Path:
    """Write a study in the folder form (module docstring), with `provenance` as its README.md."""
    root = Path(folder)
    for recipe, runs in study.items():
        (root / recipe).mkdir(parents=True, exist_ok=True)
        for i, (c, y) in enumerate(runs):
            lines = ["compute,pass_rate"] + [f"{a:.6g},{b:.6g}" for a, b in zip(c, y)]
            (root / recipe / f"run{i}.csv").write_text("\n".join(lines) + "\n")
    (root / "README.md").write_text(provenance.rstrip() + "\n")
    return root


def describe(study: Study) -> str:
    """One line: the recipes and how many runs each has."""
    return ", ".join(f"{name} x{len(runs)}" for name, runs in study.items())


def require_runs(study: Study, least: int, what: str) -> None:
    """Refuse a study with a recipe of fewer than `least` runs, naming them."""
    short = [f"{n} ({len(r)})" for n, r in study.items() if len(r) < least]
    if short:
        raise UserError(f"{what} needs at least {least} runs per recipe; too few: {', '.join(short)}")


@dataclass(frozen=True)
class StopEarlyRecord:
    """What a `workbench sweep --stop-early` run did (read from its out folder by sweep/record.py)."""

    saved_frac: float  # compute its stopped runs did not spend / what the whole grid would have spent
    runs: dict[str, int]  # recipe -> its runs in the sweep
    stopped: dict[str, list[str]]  # recipe -> the reasons its stopped runs were stopped (only recipes with any)


STOP_EARLY_FILE = "stop_early.json"  # a StopEarlyRecord shipped beside a study's curves


def write_stop_early(record: StopEarlyRecord, folder: str | Path) -> Path:
    """Ship `record` as folder/stop_early.json (the sweep's out folder is not in git)."""
    path = Path(folder) / STOP_EARLY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"saved_frac": record.saved_frac, "runs": record.runs, "stopped": record.stopped}, indent=1) + "\n")
    return path


def read_stop_early(path: str | Path) -> StopEarlyRecord:
    """A shipped stop_early.json (`write_stop_early`); a sweep's out folder is read by
    `workbench.sweep.record.stop_early_record`."""
    try:
        d = json.loads(Path(path).read_text())
        return StopEarlyRecord(float(d["saved_frac"]), {k: int(v) for k, v in d["runs"].items()},
                               {k: list(v) for k, v in d["stopped"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"{path}: not a stop-early record ({type(e).__name__}: {e})") from None
