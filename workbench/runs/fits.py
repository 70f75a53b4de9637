"""Fit and compare the scaling curves of MLflow runs (shared by `workbench compare` and sweeps).

    result = fit_runs({"scalerl": run_a, "no-fp32": run_b}, tracking_uri=uri)
    result = fit_runs({"scalerl": [seed0, seed1]}, stopped={"no-fp32": "why"})   # seeds fitted jointly; stopped points marked
    print(result.text)                 # ranked table: A, B, C_mid with intervals, verdicts
    result.frame                       # the same as a DataFrame (one row per run, failures too)
    result.write("out/comparison")     # comparison.md + comparison.csv (+ .json of the fits)
    result.chart("out/overlay.html")   # overlay of the fitted curves (.html or .png)

Each run's curve is `workbench.tracking.queries.run_curve(run_id, metric, x)`; it is fitted with
`workbench.runs.report.fit_curves` (the one run-curve fit: R0 = the score at compute 0 when the run
logged one, else its first point) and the fits are ranked by `workbench.scaling.decide.compare`. Several
runs under one name (the seeds of a sweep point) are fitted jointly, so their intervals carry
the seed spread into compare's +-0.02 tie rule. A run whose curve is missing or cannot be fitted
is listed with the reason instead of stopping the comparison.

Runs a sweep stopped by forecast carry the MLflow tags `stopped_by_forecast=true` and
`stopped_reason` (STOPPED_TAG, STOPPED_REASON_TAG); they are fitted on the curve they have and
ranked like any other, and the table marks them "stopped early" (column `stopped`: the reason).
`run_labels` names runs read from MLflow for the table: "recipe (run name)" when the run logged
its recipe (param `recipe.name`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from workbench.errors import UserError
from workbench.tracking.queries import run_curve

COLUMNS = ["name", "run_id", "A", "A_lo", "A_hi", "B", "B_lo", "B_hi", "C_mid", "C_mid_lo", "C_mid_hi", "n", "r2", "rank", "verdict",
           "stopped", "error"]
RECIPE_PARAM = "recipe.name"  # the config key a tracked run logs as a param: which recipe it trained
STOPPED_TAG = "stopped_by_forecast"
STOPPED_REASON_TAG = "stopped_reason"


def stopped_runs(frame: pd.DataFrame) -> dict[str, str]:
    """run_id -> stop reason of the runs in a `queries.runs_frame` that a sweep stopped by forecast."""
    tag, why = f"tags.{STOPPED_TAG}", f"tags.{STOPPED_REASON_TAG}"
    if tag not in frame.columns:
        return {}
    rows = frame[frame[tag].astype(str).str.lower() == "true"]
    return {r["run_id"]: str(r.get(why) or "stopped by forecast") for _, r in rows.iterrows()}


@dataclass
class RunFits:
    """Fits of several runs and their comparison. `errors` maps name -> why it was not fitted."""

    metric: str
    x: str
    run_ids: dict[str, Any]  # name -> run_id, or a list of run ids fitted jointly (seeds)
    fits: dict[str, Any] = field(default_factory=dict)  # name -> workbench.scaling SigmoidFit
    errors: dict[str, str] = field(default_factory=dict)
    comparison: Any = None  # workbench.scaling.decide.compare.Comparison (None when nothing was fitted)
    stopped: dict[str, str] = field(default_factory=dict)  # name -> why a sweep stopped it by forecast

    @property
    def frame(self) -> pd.DataFrame:
        rows = []
        ranked = {r.name: r for r in self.comparison.rows} if self.comparison else {}
        for name, rid in self.run_ids.items():
            row: dict[str, Any] = {"name": name, "run_id": rid if isinstance(rid, str) else ";".join(rid)}
            if name in self.fits:
                f = self.fits[name]
                row.update(A=f.A, A_lo=f.A_ci[0], A_hi=f.A_ci[1], B=f.B, B_lo=f.B_ci[0], B_hi=f.B_ci[1],
                           C_mid=f.C_mid, C_mid_lo=f.C_mid_ci[0], C_mid_hi=f.C_mid_ci[1], n=f.n, r2=f.r2)
                if name in ranked:
                    row.update(rank=ranked[name].rank, verdict=ranked[name].verdict)
            row["stopped"] = self.stopped.get(name, "")
            row["error"] = self.errors.get(name, "")
            rows.append(row)
        frame = pd.DataFrame(rows, columns=COLUMNS)
        return frame.sort_values("rank", na_position="last", kind="stable").reset_index(drop=True)

    @property
    def text(self) -> str:
        lines = [f"{self.metric} vs {self.x}: sigmoid fits of {len(self.run_ids)} run(s)"]
        if self.comparison is not None:
            lines.append(str(self.comparison))
            fitted = self.frame.dropna(subset=["A"])
            w = max(5, *(len(n) for n in fitted["name"])) if len(fitted) else 5
            lines.append(f"{'run':<{w}} {'C_mid':>10} {'C_mid interval':>23} {'R^2':>6} {'n':>4}")
            for r in fitted.itertuples():
                mark = "  stopped early" if r.stopped else ""
                lines.append(f"{r.name:<{w}} {r.C_mid:>10.4g} [{r.C_mid_lo:>9.4g}, {r.C_mid_hi:>9.4g}] {r.r2:>6.3f} {int(r.n):>4}{mark}")
            if self.comparison.winner:
                lines.append(f"best: {self.comparison.winner}")
        for name, why in self.stopped.items():
            lines.append(f"stopped early: {name}: {why}")
        for name, err in self.errors.items():
            lines.append(f"not fitted: {name}: {err}")
        return "\n".join(lines)

    def markdown(self) -> str:
        """The ranked table as GitHub markdown (comparison.md of a sweep)."""
        head = "| rank | run | A | A interval | B | B interval | C_mid | C_mid interval | R^2 | verdict |"
        out = [f"# {self.metric} vs {self.x}", "", head, "|" + "---|" * 10]
        for r in self.frame.itertuples():
            if isinstance(r.A, float) and math.isfinite(r.A):
                rank = "" if pd.isna(r.rank) else int(r.rank)
                out.append(
                    f"| {rank} | {_md(r.name)} | {r.A:.4f} | [{r.A_lo:.4f}, {r.A_hi:.4f}] | {r.B:.3f} | [{r.B_lo:.3f}, {r.B_hi:.3f}] "
                    f"| {r.C_mid:.4g} | [{r.C_mid_lo:.4g}, {r.C_mid_hi:.4g}] | {r.r2:.3f} | "
                    f"{_md(('stopped early: ' + r.stopped + '; ') if r.stopped else '')}{_md(r.verdict or '')} |"
                )
            else:
                out.append(f"| | {_md(r.name)} | | | | | | | | not fitted: {_md(r.error)} |")
        if self.comparison is not None:
            out += ["", f"A within +-{self.comparison.margin:g} is a tie; tied runs are compared on B refit at their shared mean A."]
        return "\n".join(out) + "\n"

    def write(self, stem: str | Path) -> list[Path]:
        """Write <stem>.md, <stem>.csv and <stem>.json (the fits, reloadable as SigmoidFit)."""
        stem = Path(stem)
        stem.parent.mkdir(parents=True, exist_ok=True)
        md, csv, js = stem.with_suffix(".md"), stem.with_suffix(".csv"), stem.with_suffix(".json")
        md.write_text(self.markdown())
        self.frame.to_csv(csv, index=False)
        js.write_text(json.dumps({"metric": self.metric, "x": self.x, "run_ids": self.run_ids, "errors": self.errors, "stopped": self.stopped,
                                  "fits": {n: f.to_dict() for n, f in self.fits.items()}}, indent=1))
        return [md, csv, js]

    def chart(self, path: str | Path, title: str | None = None) -> Path:
        """Overlay of the fitted curves with their bands and points (.html self-contained, or .png)."""
        if not self.fits:
            raise UserError("no run could be fitted, so there is nothing to draw")
        from workbench.scaling.charts import chart_overlay, save_chart

        chart = chart_overlay(self.fits, title=title or f"{self.metric} vs {self.x}", x_title=self.x, y_title=self.metric)
        return save_chart(chart, path)


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def fit_runs(
    runs: Mapping[str, str | Sequence[str]] | Sequence[str],
    metric: str = "val/pass_rate",
    x: str = "compute/device_hours",
    tracking_uri: str | None = None,
    fit_from: float | None = None,
    n_boot: int = 200,
    stopped: Mapping[str, str] | None = None,
) -> RunFits:
    """Fit each run's `metric`-vs-`x` curve (runs: display name -> run_id, or -> a list of run ids
    fitted jointly; or a plain list of run ids, each named by its id) and compare them; `stopped` marks names a sweep stopped by forecast."""
    from workbench.runs.report import fit_curves
    from workbench.scaling.decide.compare import compare

    if isinstance(runs, str) or not isinstance(runs, (Mapping, list, tuple)):
        raise UserError(f"runs must be a dict display name -> MLflow run id (or a list of run ids), got {runs!r}")
    if not isinstance(runs, Mapping):  # a plain list of run ids: each its own entry, named by its id
        runs = {str(r): r for r in runs}
    result = RunFits(metric=metric, x=x, run_ids=dict(runs), stopped=dict(stopped or {}))
    for name, rid in runs.items():
        try:
            ids = [rid] if isinstance(rid, str) else list(rid)
            curves = []
            for one in ids:
                curve = run_curve(one, metric=metric, x=x, tracking_uri=tracking_uri)
                if len(curve) == 0:
                    raise UserError(f"run {one}: no step has both {metric} and {x}")
                curves.append((curve["x"].to_numpy(), curve["y"].to_numpy()))
            result.fits[name] = fit_curves(curves, fit_from=fit_from, n_boot=n_boot)
        except (UserError, ValueError, RuntimeError, FloatingPointError) as e:
            result.errors[name] = str(e)
    if result.fits:
        result.comparison = compare(result.fits)
    return result


def run_labels(frame: pd.DataFrame) -> dict[str, str]:
    """run_id -> the name a comparison shows for each run of a `queries.runs_frame`.

    A run that logged its recipe (param recipe.name) shows "recipe (run name)", so a table of
    recipes says which recipe each row is while two runs of one recipe stay apart; otherwise the
    run name. Made unique with `unique_names`."""
    recipes = frame[RECIPE_PARAM] if RECIPE_PARAM in frame.columns else [None] * len(frame)
    labels = {}
    for rid, run_name, recipe in zip(frame["run_id"], frame["name"].fillna(""), recipes):
        recipe = "" if recipe is None or pd.isna(recipe) else str(recipe)
        labels[rid] = f"{recipe} ({run_name})" if recipe and run_name and run_name != recipe else (recipe or run_name)
    return unique_names(labels)


def unique_names(names: Mapping[str, str]) -> dict[str, str]:
    """run_id -> display name, made unique by appending a short run id where names repeat."""
    counts: dict[str, int] = {}
    for n in names.values():
        counts[n] = counts.get(n, 0) + 1
    return {rid: (n if counts[n] == 1 and n else f"{n or 'run'}-{rid[:6]}") for rid, n in names.items()}
