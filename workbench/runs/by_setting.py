"""Runs for `workbench.scaling.predict_config`: from run folders, MLflow or CSVs, checked and fitted.

    from workbench.runs.by_setting import runs_from_folders, runs_from_mlflow, runs_from_csvs, predict_runs
    runs = runs_from_folders(["runs/ladder/w32", "runs/ladder/w48", "runs/ladder/w64"], by="model.n_embd")
    runs = runs_from_mlflow("ladder", by="model.n_embd", where={"task.name": "addition"})
    runs = runs_from_csvs(["a/model.n_embd=32.csv", ...], by="model.n_embd")   # or a column model.n_embd
    p = predict_runs(runs, at=128)                      # a workbench.scaling.ConfigPrediction
    p.compute_to_reach(0.5); p.chart(); p.worth_it()    # `workbench predict` (workbench.commands.predict) prints these

Each loader returns `Runs`: value of the setting -> SigmoidFit, and the runs' names. Fits are
THE run-curve fit (`workbench.runs.report.fit_curves`: R0 measured at compute 0, else the first
point). Several runs at one value (its seeds) are fitted jointly (fit_sigmoid_multi: one curve,
a whole-run bootstrap), so a ladder run at 3 seeds a rung predicts from the rungs' seed-averaged
curves; the same run given twice, or two runs with one seed at one value, is refused.

A folder is read with `RunView.open` (its metrics.jsonl and config), an MLflow run with
`tracking.queries.run_curve` (finished runs of an experiment, filtered by parameter values as in
`history_prior`), a CSV with `scaling.Curve.from_csv`; a CSV's value of the setting is its column
named by the key (one value per file) or `KEY=VALUE` in its file name (as sweeps name points).

Bad input is one line: a key no run has (with the closest names), runs that differ in another
config key than the named one (keys of how a run executes, `folder.EXECUTION_KEYS`, and `seed`
may differ), a run given twice (or two runs with one seed at one value), a run whose curve
cannot be fitted; fewer than 3 values is `predict_config`'s.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from workbench.configtools import flatten, to_dict
from workbench.config import RunConfig
from workbench.errors import UserError
from workbench.runs.folder import EXECUTION_KEYS, PARAMS_KEY, PARAMS_SUMMARY_KEY
from workbench.runs.report import MIN_POINTS, SCORE_KEY, eval_curve, fit_curves
from workbench.scaling.data import Curve
from workbench.scaling.forecast.config_curve import ConfigPrediction, predict_config
from workbench.tracking.queries import closest

FREE_KEYS = EXECUTION_KEYS + ("seed",)  # may differ between the runs of one prediction
CONFIG_KEYS = frozenset(flatten(to_dict(RunConfig())))  # the config's keys: the columns of MLflow params


@dataclass
class Runs:
    """The runs one prediction is made from: the setting's key, value -> fit, value -> name."""

    by: str
    fits: dict[float, Any]
    names: dict[float, str]


def _value(raw: Any, by: str, where: str) -> float:
    try:
        v = float(raw)
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v):  # also a run that lacks the key among runs that have it (MLflow: NaN)
        raise UserError(f"{where}: {by} = {raw!r} is not a number; predict along a numeric setting every run records")
    return v


def _no_key(by: str, known: Sequence[str], what: str) -> UserError:
    close = closest(by, known)
    hint = f" (close: {', '.join(close)})" if close else ""
    return UserError(f"no {what} has the key {by!r}{hint}: name a config key such as model.n_embd or train.prompts_per_step")


def _free_keys(by: str) -> tuple[str, ...]:
    """Keys the runs may differ in besides `by`: how a run executes, its seed, and, along the
    parameter count, the model's shape (widths, depths, the checkpoint) that sets it."""
    return FREE_KEYS + (("model.",) if by == PARAMS_KEY else ())


def check_one_setting(configs: Mapping[str, Mapping[str, Any]], by: str) -> None:
    """UserError when the runs (name -> flattened config) differ in a key other than `by` (and the free ones)."""
    keys = sorted(set().union(*configs.values()))
    free = _free_keys(by)
    for k in keys:
        if k == by or k.startswith(free):
            continue
        seen = {n: c.get(k) for n, c in configs.items()}
        if len({repr(v) for v in seen.values()}) > 1:
            shown = ", ".join(f"{n}: {v!r}" for n, v in list(seen.items())[:3])
            raise UserError(f"the runs differ in {k} as well as {by} ({shown}): predict from runs that differ in {by} only")


@dataclass(frozen=True)
class _RunCurve:
    """One loaded run before fitting: its value of the setting, name, (compute, score), seed (None:
    unknown) and source (its resolved path or run id: the same run given twice is refused)."""

    value: float
    name: str
    compute: np.ndarray
    score: np.ndarray
    source: str
    seed: Any = None


def _check_points(run: _RunCurve, x: str, fit_from: float | None) -> None:
    """A UserError naming the run when its curve alone has too few points to fit (seeds are fitted
    jointly, so a short one would otherwise hide among its value's other seeds)."""
    n = int(((run.compute > 0) & ((run.compute >= fit_from) if fit_from is not None else True)).sum())
    if n < MIN_POINTS:
        raise UserError(f"run {run.name} was not fitted: only {n} evaluation(s) with {x} > {fit_from or 0:g}; "
                        f"the sigmoid fit needs at least {MIN_POINTS}")


def _fitted(by: str, loaded: Sequence[_RunCurve], fit_from: float | None, x: str) -> Runs:
    """One fit per value: a value's runs (its seeds) jointly (`fit_curves`), named "a + b" ("a and 2 more")."""
    groups: dict[float, list[_RunCurve]] = {}
    for run in loaded:
        _check_points(run, x, fit_from)
        groups.setdefault(run.value, []).append(run)
    out = Runs(by, {}, {})
    for value, group in sorted(groups.items()):
        names = [r.name for r in group]
        sources = [r.source for r in group]
        twice = next((n for i, n in enumerate(sources) if n in sources[:i]), None)
        if twice is not None:
            raise UserError(f"run {twice} is given twice: give each run once")
        seeds: dict[str, str] = {}
        for r in group:
            if r.seed is not None and repr(r.seed) in seeds:
                raise UserError(f"{r.name} and {seeds[repr(r.seed)]} both have {by} = {value:g} and seed {r.seed}: "
                                "two copies of one run? Give each seed of a value once (they are fitted jointly)")
            if r.seed is not None:
                seeds[repr(r.seed)] = r.name
        for i, r in enumerate(group):  # a copied file under another name (no seed to tell them apart)
            same = next((o for o in group[:i] if np.array_equal(o.compute, r.compute) and np.array_equal(o.score, r.score)), None)
            if same is not None:
                raise UserError(f"{r.name} and {same.name} have the same curve ({by} = {value:g}): two copies of one run? "
                                "Give each run once")
        if len(set(names)) < len(names):  # seeds in folders named after their config: tell them apart by seed
            names = [r.name if r.seed is None else f"{r.name} (seed {r.seed})" for r in group]
        name = " + ".join(names) if len(names) <= 2 else f"{names[0]} and {len(names) - 1} more"
        try:
            out.fits[value] = fit_curves([(r.compute, r.score) for r in group], fit_from=fit_from)
        except UserError as e:
            raise UserError(f"run {name} was not fitted: {e}") from None
        out.names[value] = name
    return out


def runs_from_folders(paths: Sequence[str | Path], by: str, *, x: str = "compute/device_hours",
                      fit_from: float | None = None) -> Runs:
    """Run folders (out_dir, or names under runs/): each one's config value of `by` and its curve's fit."""
    from workbench.runs.view import RunView

    seen: dict[Path, str] = {}  # resolved path -> as given
    for p in map(str, paths):
        first = seen.get(Path(p).resolve())
        if first is not None:
            raise UserError(f"run {p} is given twice{'' if first == p else f' (as {first})'}: give each run once")
        seen[Path(p).resolve()] = p
    views = {p: RunView.open(p, x=x) for p in seen.values()}
    configs = {n: flatten(to_dict(v.cfg)) for n, v in views.items()}
    if by == PARAMS_KEY:
        for n, v in views.items():
            if (v.summary or {}).get(PARAMS_SUMMARY_KEY) is None:
                raise UserError(f"{n} has no parameter count ({PARAMS_SUMMARY_KEY} in its summary.json): "
                                f"it has not ended, or ran before the workbench recorded it; predict by a model.* key instead")
            configs[n][by] = v.summary[PARAMS_SUMMARY_KEY]
    if not any(by in c for c in configs.values()):
        raise _no_key(by, sorted(set().union(*configs.values())), "run's config")
    check_one_setting(configs, by)
    loaded = []
    for name, v in views.items():
        value = _value(configs[name].get(by), by, name)
        c, y = eval_curve(v.rows, x, SCORE_KEY)
        # the folder's name: runs of one config share their config name
        loaded.append(_RunCurve(value, Path(name).name, c, y, str(Path(name).resolve()), configs[name].get("seed")))
    return _fitted(by, loaded, fit_from, x)


def runs_from_mlflow(experiment: str | list[str], by: str, *, where: Mapping[str, object] | None = None,
                     metric: str = SCORE_KEY, x: str = "compute/device_hours", tracking_uri: str | None = None,
                     fit_from: float | None = None) -> Runs:
    """The finished runs of `experiment` (filtered by `where`, parameter -> value, as history_prior does)."""
    from workbench.tracking.queries import run_curve, runs_frame

    frame = runs_frame(experiment=experiment, tracking_uri=tracking_uri)
    rows = frame[frame["status"] == "FINISHED"] if not frame.empty else frame
    for key, value in (where or {}).items():
        if key not in rows.columns:
            raise _no_key(key, list(frame.columns), "run parameter or metric to filter by")
        rows = rows[rows[key].astype(str) == str(value)]
    if rows.empty:
        raise UserError(f"experiment {experiment!r} has no finished run{' matching ' + str(dict(where)) if where else ''}")
    if by == PARAMS_KEY and f"tags.{by}" in rows.columns:
        rows = rows.assign(**{by: rows[f"tags.{by}"]})  # the trainer's count, tagged by the run
    if by not in rows.columns or rows[by].isna().all():
        raise _no_key(by, list(frame.columns), "run of the experiment")
    params = [c for c in rows.columns if c in CONFIG_KEYS]
    labels = {r["run_id"]: str(r["name"] or r["run_id"]) for _, r in rows.iterrows()}
    check_one_setting({labels[r["run_id"]]: {k: r[k] for k in params if isinstance(r[k], str)} for _, r in rows.iterrows()}, by)
    loaded = []
    for _, r in rows.iterrows():
        curve = run_curve(r["run_id"], metric=metric, x=x, tracking_uri=tracking_uri)
        name = labels[r["run_id"]]
        seed = r.get("seed") if isinstance(r.get("seed"), str) else None  # MLflow params are strings; NaN when not logged
        loaded.append(_RunCurve(_value(r[by], by, f"run {name}"), name, curve["x"].to_numpy(float), curve["y"].to_numpy(float),
                                str(r["run_id"]), seed))
    return _fitted(by, loaded, fit_from, x)


def _csv_field(path: Path, rows: list[dict[str, str]], key: str) -> str | None:
    """One CSV's value of `key`: its column `key` (one value), else `key=VALUE` in the file name
    (`key` or its last dotted part: model.n_layer=4 or n_layer=4); None when it has neither."""
    if rows and key in rows[0]:
        values = {row[key].strip() for row in rows if row.get(key) and row[key].strip()}
        if len(values) != 1:
            raise UserError(f"{path}: column {key} holds {len(values)} values; one file is one run (one value)")
        return values.pop()
    names = "|".join(map(re.escape, {key, key.rsplit(".", 1)[-1]}))
    m = re.search(rf"(?:^|[_,\s])(?:{names})=([^_,\s]+)", path.stem)
    return m.group(1) if m else None


def _csv_run(path: Path, by: str, x: str | None, y: str | None) -> _RunCurve:
    """One CSV as a run: its curve, its value of `by` (required) and its seed (column or name, if any)."""
    curve = Curve.from_csv(path, x=x, y=y)
    with path.open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    raw = _csv_field(path, rows, by)
    if raw is None:
        raise UserError(f"{path}: cannot tell its {by}: add a column {by} or name the file ...{by}=VALUE.csv")
    return _RunCurve(_value(raw, by, str(path)), path.name, curve.compute, curve.score, str(path.resolve()),
                     _csv_field(path, rows, "seed"))


def runs_from_csvs(paths: Sequence[str | Path], by: str, *, x: str | None = None, y: str | None = None,
                   fit_from: float | None = None) -> Runs:
    """CSV curves (columns compute and pass_rate, or as `x` / `y` name them), one run per file (a value's
    files, its seeds, fitted jointly: a seed column or `seed=S` in the name tells copies from seeds)."""
    return _fitted(by, [_csv_run(p, by, x, y) for p in map(Path, paths)], fit_from, x or "compute")


def load_runs(sources: Sequence[str], by: str, *, experiment: str | None = None, where: Mapping[str, object] | None = None,
              x: str | None = None, y: str | None = None, tracking_uri: str | None = None, fit_from: float | None = None) -> Runs:
    """Runs from `sources`: run folders, or CSV files (all of one kind), or, with `experiment`, MLflow."""
    if experiment:
        if sources:
            raise UserError("give either --experiment (MLflow runs) or run folders / CSV files, not both")
        return runs_from_mlflow(experiment, by, where=where, x=x or "compute/device_hours", tracking_uri=tracking_uri,
                                metric=y or SCORE_KEY, fit_from=fit_from)
    if not sources:
        raise UserError("no runs given: name run folders or CSV files, or --experiment NAME for MLflow runs")
    csvs = [s for s in sources if str(s).lower().endswith(".csv")]
    if csvs and len(csvs) != len(sources):
        raise UserError("mix of CSV files and run folders: give one kind")
    if csvs:
        return runs_from_csvs(csvs, by, x=x, y=y, fit_from=fit_from)
    return runs_from_folders(sources, by, x=x or "compute/device_hours", fit_from=fit_from)


def predict_runs(runs: Runs, at: float, **kw: Any) -> ConfigPrediction:
    """`predict_config` of loaded runs, named by their runs."""
    return predict_config(runs.fits, at, key=runs.by, names=runs.names, **kw)

