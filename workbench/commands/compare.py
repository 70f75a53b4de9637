"""`workbench compare`: fit and rank the scaling curves of MLflow runs.

    workbench compare --experiment scalerl-loo                # every run of the experiment
    workbench compare 3f2a... 9bc1... --x compute/flops       # chosen runs, against FLOPs
    workbench compare --experiment smoke --plot overlay.html  # also an overlay chart (.html/.png)
    workbench compare --experiment smoke --json               # machine-readable

For each run it reads `--metric` (default val/pass_rate) against `--x` (default
compute/device_hours) from MLflow, fits R(C) = R0 + (A - R0) / (1 + (C_mid/C)^B) with bootstrap
intervals, and prints the runs ranked by A (asymptote) then B (efficiency) with the paper's
+-0.02 tie rule on A. A run that logged its recipe (param recipe.name) is shown as
"recipe (run name)". With --experiment, runs that never logged the metric (e.g. a sweep's parent
run) are left out, and so are FAILED/KILLED runs unless --include-failed is given; runs a sweep
stopped by forecast (tag stopped_by_forecast=true) are kept and marked "stopped early". A run that
cannot be fitted is listed with the reason. The store is --tracking-uri (a URI, or a path to an
SQLite file), else $MLFLOW_TRACKING_URI, else the project's mlflow.db; it must exist (compare never
creates one), and a server must answer within seconds.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from workbench.errors import UserError
from workbench.tracking.store import require_store, resolve_tracking_uri

X_CHOICES = ("compute/device_hours", "compute/flops", "step")


def select_runs(
    experiment: str | None,
    run_ids: list[str],
    metric: str,
    tracking_uri: str,
    include_failed: bool = False,
    stopped: dict[str, str] | None = None,
    x: str = "step",
) -> dict[str, str]:
    """Display name -> run_id of the runs to compare (see the module doc for the rules).

    `stopped`, when given, is filled with name -> reason of the runs a sweep stopped by forecast.
    A `metric` or `x` that none of the runs logged is a UserError naming the closest metrics."""
    from workbench.runs.fits import run_labels, stopped_runs
    from workbench.tracking.queries import close_names, runs_frame  # pandas: loaded only when comparing

    _check_selection(experiment, run_ids)
    frame = runs_frame(experiment=experiment, run_ids=run_ids or None, tracking_uri=tracking_uri)
    if frame.empty:
        raise UserError(f"experiment {experiment!r} has no runs")
    if experiment:
        everything = frame
        has_metric = frame[metric].notna() if metric in frame.columns else frame["run_id"].isna()
        frame = frame[has_metric]
        if not include_failed:
            by_forecast = frame["run_id"].isin(list(stopped_runs(frame)))
            frame = frame[~frame["status"].isin(["FAILED", "KILLED"]) | by_forecast]
        if frame.empty:
            hint = "" if metric in everything.columns else f"; {close_names(metric, everything.select_dtypes('number').columns)}"
            raise UserError(f"no run of experiment {experiment!r} logged {metric!r} (and finished or is running){hint}")
    for key, flag in ((metric, "--metric"), (x, "--x")):
        if key != "step" and (key not in frame.columns or frame[key].isna().all()):
            raise UserError(f"none of the runs logged {flag} {key!r}; {close_names(key, frame.select_dtypes('number').columns)}")
    names = run_labels(frame)
    if stopped is not None:
        stopped.update({names[rid]: why for rid, why in stopped_runs(frame).items() if rid in names})
    return {names[rid]: rid for rid in frame["run_id"]}


def _check_selection(experiment: str | None, run_ids: list[str]) -> None:
    if bool(experiment) == bool(run_ids):
        raise UserError("give either --experiment NAME or one or more RUN_IDs")


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return _jsonable(v.item())
    return v


def add_parser(subparsers, name: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help="fit and rank the scaling curves of MLflow runs", description=__doc__.split("\n\n")[0],
                              epilog="examples:\n  workbench compare --experiment smoke --plot overlay.html\n"
                                     "  workbench compare RUN_ID RUN_ID --x compute/flops --json\n"
                                     "Runs reach MLflow from `workbench run` (tracking.mlflow=true, the default), a Session or a sweep.",
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="MLflow run ids to compare")
    p.add_argument("--experiment", help="compare the runs of this MLflow experiment")
    p.add_argument("--metric", default="val/pass_rate", help="score metric (default val/pass_rate)")
    p.add_argument("--x", default="compute/device_hours", help=f"compute axis: {', '.join(X_CHOICES)} or any metric")
    p.add_argument("--fit-from", type=float, help="leave compute below this out of the fits")
    p.add_argument("--plot", help="write an overlay chart (.html self-contained, or .png)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--include-failed", action="store_true", help="with --experiment: also FAILED/KILLED runs")
    p.add_argument("--tracking-uri", help="MLflow tracking URI or SQLite file (default: $MLFLOW_TRACKING_URI or the project's mlflow.db)")
    return p


def run(args: argparse.Namespace) -> int:
    if args.plot and not args.plot.lower().endswith((".html", ".png", ".svg")):
        raise UserError(f"--plot: use a .html, .png or .svg file name, not {args.plot!r}")
    from workbench.runs.fits import fit_runs
    from workbench.runs.liveness import tell_dead_runs

    _check_selection(args.experiment, args.run_ids)
    uri = resolve_tracking_uri(args.tracking_uri)
    require_store(uri)  # before MLflow: it would create a store, or retry a dead server for minutes
    tell_dead_runs(uri)  # a run whose driver died is FAILED, not RUNNING, in what is compared
    stopped: dict[str, str] = {}
    runs = select_runs(args.experiment, args.run_ids, args.metric, uri, args.include_failed, stopped, x=args.x)
    result = fit_runs(runs, metric=args.metric, x=args.x, tracking_uri=uri, fit_from=args.fit_from, stopped=stopped)
    if args.plot and result.fits:
        result.chart(args.plot)
    if args.json:
        records = [{k: _jsonable(v) for k, v in row.items()} for row in result.frame.to_dict("records")]
        winner = result.comparison.winner if result.comparison else None
        print(json.dumps({"metric": args.metric, "x": args.x, "runs": records, "best": winner}, indent=1))
    else:
        print(result.text)
        if args.plot and result.fits:
            print(f"chart: {args.plot}")
    if not result.fits:
        where = "in the runs' error field" if args.json else "above"
        raise UserError(f"no run could be fitted (the reasons are listed {where})")
    return 0
