"""Read runs and curves back from MLflow as pandas DataFrames.

    runs = runs_frame(experiment="ablations")        # one row per run
    runs[["name", "status", "recipe.name", "fit/A"]]
    curve = run_curve(run_id)                        # columns step, x, y
    curve = run_curve(run_id, metric="val/pass_rate", x="compute/flops")

`runs_frame` columns: run_id, name, status, experiment_id, parent_run_id, start_time,
end_time, then every param under its own key (recipe.name, train.lr, ...), then the latest value
of every metric under its key (val/pass_rate, fit/A, ...; a metric whose key is also a param
gets the prefix `metrics.`), then user tags as `tags.<key>` (MLflow's own `mlflow.*` tags are
left out). `run_curve` joins two metric histories on the step: a step logged twice keeps its
last value; steps where either metric is missing are dropped. `x="step"` uses the step itself.
"""

from __future__ import annotations

import difflib
from typing import Iterable

import pandas as pd

from workbench.errors import UserError
from workbench.tracking.store import PARENT_TAG, read_client, retry_locked

_FIXED = ["run_id", "name", "status", "experiment_id", "parent_run_id", "start_time", "end_time"]


def _get_run(c, run_id: str):
    from mlflow.exceptions import MlflowException

    try:
        return retry_locked(c.get_run, run_id)
    except MlflowException:
        raise UserError(f"no MLflow run with id {run_id!r} in {c.tracking_uri}") from None


def experiment_ids(names: Iterable[str], tracking_uri: str | None = None) -> list[str]:
    """Ids of named experiments; an unknown name raises UserError listing the known ones."""
    return _experiment_ids(read_client(tracking_uri), names)


def _experiment_ids(c, names: Iterable[str]) -> list[str]:
    ids = []
    for name in names:
        exp = retry_locked(c.get_experiment_by_name, name)
        if exp is None:
            known = sorted(e.name for e in retry_locked(c.search_experiments))
            raise UserError(f"no MLflow experiment named {name!r} in {c.tracking_uri}; known: {known}")
        ids.append(exp.experiment_id)
    return ids


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """At most `n` of `known` that look like `name` (a misspelt metric, param or column)."""
    return difflib.get_close_matches(str(name), sorted({str(k) for k in known}), n=n, cutoff=0.5)


def close_names(name: str, known: Iterable[str], what: str = "metrics", n: int = 3) -> str:
    """'close: a, b (of N metrics)': at most `n` of `known` that look like `name`, a one-line
    hint instead of the whole list (runs log dozens of metrics)."""
    known = sorted(set(known))
    close = closest(name, known, n)
    if not close:
        return f"none of its {len(known)} {what} is close" if known else f"it has no {what}"
    return f"close: {', '.join(close)} (of {len(known)} {what})"


def _row(run) -> dict:
    info, data = run.info, run.data
    row = {
        "run_id": info.run_id,
        "name": info.run_name or data.tags.get("mlflow.runName", ""),
        "status": info.status,
        "experiment_id": info.experiment_id,
        "parent_run_id": data.tags.get(PARENT_TAG),
        "start_time": pd.to_datetime(info.start_time, unit="ms", utc=True) if info.start_time else pd.NaT,
        "end_time": pd.to_datetime(info.end_time, unit="ms", utc=True) if info.end_time else pd.NaT,
    }
    for k, v in data.params.items():
        row[k] = v
    for k, v in data.metrics.items():
        row[f"metrics.{k}" if k in row else k] = v
    for k, v in data.tags.items():
        if not k.startswith("mlflow."):
            row[f"tags.{k}"] = v
    return row


def runs_frame(
    experiment: str | list[str] | None = None,
    run_ids: Iterable[str] | None = None,
    tracking_uri: str | None = None,
) -> pd.DataFrame:
    """One row per run (oldest first): of the named experiment(s), of `run_ids`, or of all."""
    c = read_client(tracking_uri)
    if run_ids is not None:
        runs = [_get_run(c, r) for r in run_ids]
    else:
        if experiment is None:
            ids = [e.experiment_id for e in retry_locked(c.search_experiments)]
        else:
            names = [experiment] if isinstance(experiment, str) else list(experiment)
            ids = _experiment_ids(c, names)
        runs = []
        token = None
        while True:  # page through: search_runs returns at most max_results at a time
            page = retry_locked(c.search_runs, ids, max_results=1000, order_by=["attributes.start_time ASC"], page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                break
    frame = pd.DataFrame([_row(r) for r in runs])
    if frame.empty:
        return pd.DataFrame(columns=_FIXED)
    return frame.sort_values("start_time", kind="stable").reset_index(drop=True)


def metric_history(run_id: str, key: str, tracking_uri: str | None = None) -> pd.Series:
    """{step: value} of one metric (the last value logged at each step)."""
    return _metric_history(read_client(tracking_uri), run_id, key)


def _metric_history(c, run_id: str, key: str) -> pd.Series:
    hist = retry_locked(c.get_metric_history, run_id, key)
    if not hist:
        return pd.Series(dtype=float, name=key)
    hist = sorted(hist, key=lambda m: (m.step, m.timestamp))
    series = pd.Series({m.step: m.value for m in hist}, name=key, dtype=float)
    series.index.name = "step"
    return series


def run_curve(
    run_id: str,
    metric: str = "val/pass_rate",
    x: str = "compute/device_hours",
    tracking_uri: str | None = None,
) -> pd.DataFrame:
    """The run's `metric` against `x`, joined on step: DataFrame with columns step, x, y.

    `frame.attrs` holds {"run_id", "metric", "x"}. A run that never logged `metric` (or `x`)
    raises UserError naming the closest metrics it has.
    """
    c = read_client(tracking_uri)
    run = _get_run(c, run_id)
    needed = [metric] if x == "step" else [metric, x]
    missing = [k for k in needed if k not in run.data.metrics]
    if missing:
        raise UserError(f"run {run_id} ({run.info.run_name}) has no metric {missing[0]!r}; {close_names(missing[0], run.data.metrics)}")
    y_s = _metric_history(c, run_id, metric)
    if x == "step":
        frame = pd.DataFrame({"step": y_s.index.astype(int), "x": y_s.index.astype(float), "y": y_s.values})
    else:
        x_s = _metric_history(c, run_id, x)
        joined = pd.concat([x_s.rename("x"), y_s.rename("y")], axis=1, join="inner").dropna()
        frame = pd.DataFrame({"step": joined.index.astype(int), "x": joined["x"].values, "y": joined["y"].values})
    frame = frame.sort_values("step").reset_index(drop=True)
    frame.attrs.update({"run_id": run_id, "metric": metric, "x": x, "name": run.info.run_name})
    return frame
