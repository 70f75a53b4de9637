"""`workbench sweep ... --ladder KEY`: run a ladder of one setting small to large, predicting each next rung first.

    workbench sweep notebooks/ablation.ipynb --grid sweeps/ladder.yaml --ladder train.prompts_per_step [--min-gain 0.01]

The grid's points are the rungs: each sets KEY (a notebook parameter, or a key of its `overrides`)
to a different number, and nothing else may differ (the seed aside). They run one at a time, the
smallest value first; with `--seeds N` each rung is N runs, one after another, fitted jointly (a
law chosen on one seed's rungs can extrapolate badly: the Measured page's depth ladder). Before
each rung, once 3 rungs have finished, the finished rungs' curves
are fitted (`workbench.runs.report.fit_curves`) and the rung's curve is predicted from them
(`workbench.scaling.forecast.ladder.next_rung`, i.e. `predict_config` and its `worth_it`): when even the
upper end of its predicted gain over the largest rung so far, at that rung's compute (or
`--budget`), is below `--min-gain`, the ladder stops there and the remaining rungs are recorded
as SKIPPED with the reason. Every prediction is kept in the sweep folder's `ladder.json`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from workbench.errors import UserError

LADDER_FILE = "ladder.json"


def rung_value(params: dict[str, Any], key: str, label: str) -> float:
    """The rung's value of `key`: a notebook parameter, or a key of its `overrides`."""
    raw = params[key] if key in params else (params.get("overrides") or {}).get(key)
    if raw is None:
        raise UserError(f"--ladder {key}: point {label} does not set {key} (as a parameter or in its overrides)")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise UserError(f"--ladder {key}: point {label} sets it to {raw!r}, not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"--ladder {key}: point {label} sets it to {value:g}; a ladder's values are > 0")
    return value


def ladder_order(points: Sequence[dict[str, Any]], labels: Sequence[str], key: str,
                 groups: Sequence[str] | None = None) -> list[int]:
    """Indices of the points, smallest value of `key` first (a rung's seeds, which share its
    `groups` entry, in their order); a UserError for a ladder that is not one."""
    values = [rung_value(p, key, lab) for p, lab in zip(points, labels)]
    rungs = dict(zip(groups, values)) if groups else dict(zip(labels, values))
    if len(set(rungs.values())) != len(rungs):
        seeded = groups is not None and len(set(groups)) < len(groups)  # --seeds N already makes a rung's seeds
        raise UserError(f"--ladder {key}: two points set the same value; a ladder has one rung per value"
                        + ("" if seeded else " (use --seeds N for seeds)"))
    if len(rungs) < 2:
        raise UserError(f"--ladder {key}: {len(rungs)} rung(s); a ladder needs rungs to climb")
    return sorted(range(len(values)), key=values.__getitem__)


def check_ladder(grid: Any, key: str, *, stop_early: bool) -> None:
    """UserError, before anything runs, for a grid that is not a ladder of `key` or options it cannot take."""
    if stop_early:
        raise UserError("--ladder runs one rung at a time and decides before each rung: drop --stop-early")
    ladder_order(grid.points, grid.labels, key, grid.groups)


@dataclass
class LadderGate:
    """Decides, before each rung, whether it runs. `fit_of(run_ids)` fits a finished rung's runs (its seeds) jointly."""

    key: str
    fit_of: Callable[[list[str]], Any]
    min_gain: float = 0.01
    budget: float | None = None
    done: dict[float, list[str]] = field(default_factory=dict)  # value -> run ids of the finished rungs' runs
    log: list[dict[str, Any]] = field(default_factory=list)

    def decide(self, value: float) -> tuple[bool, str]:
        from workbench.scaling.forecast.ladder import next_rung

        fits = {}
        for v, rids in self.done.items():
            try:
                fits[v] = self.fit_of(rids)
            except (UserError, ValueError) as e:  # a rung too short to fit: predict from the others
                self.log.append({"rung": v, "not_fitted": str(e)})
        d = next_rung(fits, value, key=self.key, min_gain=self.min_gain, budget=self.budget)
        entry: dict[str, Any] = {"rung": value, "run": d.run, "reason": d.reason}
        if d.prediction is not None:
            entry["prediction"] = d.prediction.to_dict()
        self.log.append(entry)
        return d.run, d.reason

    def save(self, out_dir: Path) -> Path:
        path = Path(out_dir) / LADDER_FILE
        path.write_text(json.dumps({"key": self.key, "min_gain": self.min_gain, "decisions": self.log}, indent=1, default=str))
        return path


def run_ladder(todo: Sequence[tuple[Any, ...]], values: dict[Any, float], gate: LadderGate,
               run_point: Callable[..., str], skip: Callable[[Any, str], None]) -> list[str]:
    """Run the `todo` items (key, ...) in ladder order, one at a time, asking `gate` before each.

    values: point key -> rung value (a rung's seeds share it; finished rungs from an earlier sweep
    are already in gate.done).
    run_point(*item) runs one and returns its status; skip(key, reason) records a point not run.
    A rung begun by an earlier sweep is finished without a new decision, and logged as resumed.
    Returns the statuses of the points run (a rung's seeds are a point each)."""
    statuses = []
    stopped, rung = "", None
    for item in sorted(todo, key=lambda it: values[it[0]]):  # stable: a rung's seeds in their order
        key = item[0]
        if not stopped and values[key] != rung:  # decided once a rung, before its first seed
            rung = values[key]
            if rung in gate.done:  # a rung begun by an earlier sweep is finished, not judged again
                go, why = True, ""
                gate.log.append({"rung": rung, "resumed": True})
            else:
                go, why = gate.decide(rung)
            if not go:
                stopped = f"ladder stopped before {gate.key}={rung:g}: {why}"
        if stopped:
            skip(key, stopped)
            continue
        statuses.append(run_point(*item))
    return statuses


def _mlflow_fit(run_ids: list[str], metric: str, x: str, uri: str, fit_from: float | None) -> Any:
    """One rung's fit: its runs' (its seeds') curves from MLflow, jointly."""
    from workbench.runs.report import fit_curves
    from workbench.tracking.queries import run_curve

    curves = [run_curve(rid, metric=metric, x=x, tracking_uri=uri) for rid in run_ids]
    return fit_curves([(c["x"].to_numpy(float), c["y"].to_numpy(float)) for c in curves], fit_from=fit_from)


def climb(ctx: dict[str, Any], todo: Sequence[tuple[Any, ...]], key: str, run_point: Callable[..., str], bar: Any, *,
          min_gain: float, budget: float | None, x: str, metric: str, fit_from: float | None) -> int:
    """The sweep runner's ladder mode: run `todo` as rungs (see the module docstring); returns how many
    of the points run did not finish (a rung's seeds are a point each; points skipped by a stop not counted).

    ctx is the runner's (manifest, uri, out_dir); run_point(ctx, *item) runs one point. Rungs
    finished by an earlier sweep in the same folder count as done. A skipped rung is recorded
    STOPPED (final: a re-run does not climb past the stop) with `stopped_reason` and no run."""
    manifest = ctx["manifest"]
    values = {item[0]: rung_value(item[1], key, item[2]) for item in todo}
    gate = LadderGate(key, lambda rids: _mlflow_fit(rids, metric, x, ctx["uri"], fit_from), min_gain, budget)
    for k, entry in manifest.data["points"].items():
        if entry.get("status") == "FINISHED" and entry.get("run_id") and k not in values:
            gate.done.setdefault(rung_value(entry.get("params") or {}, key, entry.get("label", k)), []).append(entry["run_id"])

    def run_one(*item: Any) -> str:
        status = run_point(ctx, *item)
        if status == "FINISHED":
            gate.done.setdefault(values[item[0]], []).append(manifest.data["points"][item[0]]["run_id"])
        bar.update(1)
        return status

    def skip(k: Any, why: str) -> None:
        manifest.update(k, status="STOPPED", stopped_reason=why, run_id=None)
        bar.update(1)

    try:
        statuses = run_ladder(todo, values, gate, run_one, skip)
    finally:
        gate.save(ctx["out_dir"])
    return sum(s != "FINISHED" for s in statuses)
