"""What a finished `workbench sweep --stop-early` did, read back from its out folder's manifest.json.

    record = stop_early_record("runs/sweeps/scalerl_loo_stop_early")   # runs.study.StopEarlyRecord
    saved_fraction(spent, unspent)   # the saved share the sweep logs (sweep/compute_saved_frac)

The manifest is the sweep runner's (runner.py writes it); this module is its one reader outside
the runner. `workbench findings --stop-early-sweep` scores the record against the full runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.errors import UserError
from workbench.runs.study import StopEarlyRecord

# manifest statuses that are final: re-running the sweep does not run these points again
DONE = ("FINISHED", "STOPPED")


def saved_fraction(spent: float, unspent: float) -> float:
    """Compute the stopped points did not spend, as a share of what the whole sweep would have spent."""
    return unspent / (spent + unspent) if spent + unspent > 0 else 0.0


def stop_early_record(out_dir: str | Path) -> StopEarlyRecord:
    """The record of a finished `--stop-early` sweep (runs grouped by their `recipe` parameter, else
    by the point's group)."""
    path = Path(out_dir) / "manifest.json"
    if not path.is_file():
        raise UserError(f"{path} does not exist: pass the out folder of a `workbench sweep --stop-early` run")
    manifest = json.loads(path.read_text())
    if not manifest.get("stop_early"):
        raise UserError(f"{out_dir}: that sweep ran without --stop-early")
    points = list(manifest.get("points", {}).values())
    undone = [p["label"] for p in points if p.get("status") not in DONE]
    if undone or not points:
        raise UserError(f"{out_dir}: the sweep has not finished ({len(undone)} of {len(points)} points not done: "
                        f"{', '.join(undone[:5])}); rerun it with the same --out to finish")
    runs: dict[str, int] = {}
    stopped: dict[str, list[str]] = {}
    for p in points:
        recipe = str(p.get("params", {}).get("recipe") or p.get("group") or p["label"])
        runs[recipe] = runs.get(recipe, 0) + 1
        if p["status"] == "STOPPED":
            stopped.setdefault(recipe, []).append(str(p.get("stopped_reason") or "stopped"))
    spent = sum(float(p.get("compute_spent") or 0.0) for p in points)
    if spent <= 0:
        raise UserError(f"{out_dir}: the manifest holds no compute account (compute_spent): was it written by this version?")
    return StopEarlyRecord(saved_fraction(spent, sum(float(p.get("compute_unspent") or 0.0) for p in points)), runs, stopped)
