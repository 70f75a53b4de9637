"""`workbench sweep`: run a notebook once per grid point with papermill, tracked in MLflow.

    workbench sweep notebooks/ablation.ipynb --grid sweeps/scalerl_loo.yaml --parallel 2

Grid file (YAML):

    name: smoke                      # sweep name (default: the file name); MLflow experiment
    experiment: ablations            # optional; default: the name. --experiment wins.
    base: {max_steps: 20}            # parameters common to all points
    grid: {recipe: [scalerl, scalerl-loo-no-fp32], seed: [0, 1]}   # cartesian product
    points:                          # and/or explicit points, added after the product
      - {recipe: scalerl}
      - {recipe: scalerl, overrides: {train.lr: 1.0e-6}}

Each point's parameters are `base` updated by the point (mappings such as `overrides` are
merged key by key). Every name must be a parameter of the notebook's cell tagged `parameters`.
The sweep also injects `run_id` (an MLflow child run it created), `tracking_uri`, and, when the
notebook declares them, `experiment` and `parent_run_id`; the notebook logs its curve to that
run (e.g. `MlflowSink(run_id, tracking_uri)` or `workbench.Session`). `run_id` and
`tracking_uri` must be declared; points may not set these four names.

What happens: the experiment and a parent "sweep" run are created first, in this process
(SQLite stores must not be created by two processes at once); then each point runs as its own
`python -m papermill` process (N at once with --parallel N) under the chosen Jupyter kernel,
with the notebook's folder as working directory. A point that fails is recorded (child run
FAILED, tag `workbench.error`, executed notebook and log kept) and the sweep goes on. The out
folder (default runs/sweeps/<name>) holds manifest.json (point key -> status, run id, paths;
the key is a hash of the point's parameters), points/<label>-<key>.ipynb and .log, and
comparison.{md,csv,json}. Re-running with the same --out skips points already FINISHED and
retries the others. At the end every finished run's curve (val/pass_rate vs
compute/device_hours by default) is read back from MLflow, fitted with the ScaleRL sigmoid and
compared (A, B, C_mid with intervals); the table is printed and logged to the parent run.
Exit status: 0 when every point finished, 1 when some failed.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from workbench.configtools import ConfigError, load_yaml
from workbench.errors import UserError

INJECTED = ("run_id", "tracking_uri", "experiment", "parent_run_id")
REQUIRED_INJECTED = ("run_id", "tracking_uri")
GRID_KEYS = ("name", "description", "experiment", "base", "grid", "points")


@dataclass
class Grid:
    name: str
    points: list[dict[str, Any]]  # full parameters of each point (base merged in)
    labels: list[str]
    experiment: str | None = None
    path: Path | None = None

    def keys(self) -> list[str]:
        return [point_key(p) for p in self.points]


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


def point_key(params: dict[str, Any]) -> str:
    """Stable 12-hex-digit hash of a point's parameters (independent of key order)."""
    text = json.dumps(params, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _short(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else str(v)


def _labels(points: list[dict], own_keys: list[str]) -> list[str]:
    # Name points by what differs between them ("scalerl-loo-no-fp32", or "recipe=a,seed=1").
    keys = sorted({k for p in points for k in p})
    varying = [k for k in keys if len({_short(p.get(k)) for p in points}) > 1] or own_keys
    labels = []
    for p in points:
        present = [k for k in varying if k in p]
        if len(varying) == 1 and present:
            labels.append(_short(p[present[0]]))
        else:
            labels.append(",".join(f"{k}={_short(p[k])}" for k in present) or "point")
    seen: dict[str, int] = {}
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
    return [lab if seen[lab] == 1 else f"{lab}#{point_key(p)[:6]}" for lab, p in zip(labels, points)]


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid YAML (format in the module doc); errors name the bad key."""
    path = Path(path)
    data = load_yaml(path)
    unknown = [k for k in data if k not in GRID_KEYS]
    if unknown:
        raise ConfigError(f"{path}: unknown key '{unknown[0]}'; a grid file has: {list(GRID_KEYS)}")
    base = data.get("base") or {}
    if not isinstance(base, dict):
        raise ConfigError(f"{path}: 'base' must be a mapping of parameter: value")
    grid = data.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"{path}: 'grid' must be a mapping of parameter: [values]")
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"{path}: grid.{k} must be a non-empty list of values, got {v!r}")
    explicit = data.get("points") or []
    if not isinstance(explicit, list) or not all(isinstance(p, dict) for p in explicit):
        raise ConfigError(f"{path}: 'points' must be a list of mappings (parameter: value)")
    if not grid and not explicit:
        raise ConfigError(f"{path}: give 'grid' (a cartesian product) and/or 'points' (a list)")
    own = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())] if grid else []
    own += explicit
    points = [_merge(base, p) for p in own]
    keys = [point_key(p) for p in points]
    for i, k in enumerate(keys):
        if k in keys[:i]:
            raise ConfigError(f"{path}: points {keys.index(k) + 1} and {i + 1} have the same parameters {points[i]}")
    own_keys = sorted({k for p in own for k in p})
    name = str(data.get("name") or path.stem)
    experiment = data.get("experiment")
    return Grid(name, points, _labels(points, own_keys), str(experiment) if experiment else None, path)


def notebook_parameters(notebook: str | Path) -> dict[str, Any]:
    """Parameters declared in the notebook's `parameters` cell (UserError when there is none)."""
    import papermill

    nb = Path(notebook)
    if not nb.is_file():
        raise UserError(f"notebook not found: {nb}")
    try:
        params = papermill.inspect_notebook(str(nb))
    except Exception as e:  # noqa: BLE001 - papermill raises many kinds for a broken file
        raise UserError(f"cannot read notebook {nb}: {e}") from None
    if not params:
        raise UserError(
            f"{nb} has no cell tagged 'parameters' (or it declares nothing): tag the cell that "
            "assigns the defaults with 'parameters' so a sweep can set them"
        )
    return params


def validate_grid(grid: Grid, declared: dict[str, Any], notebook: str | Path) -> None:
    """Every grid parameter must be declared by the notebook; run_id/tracking_uri too."""
    valid = sorted(k for k in declared if k not in INJECTED)
    for p in grid.points:
        for k in p:
            if k in INJECTED:
                raise UserError(f"grid {grid.name}: '{k}' is set by the sweep itself; remove it from the grid")
            if k not in declared:
                raise UserError(f"grid {grid.name}: unknown parameter '{k}' for {notebook}; its parameters are: {valid}")
    missing = [k for k in REQUIRED_INJECTED if k not in declared]
    if missing:
        raise UserError(
            f"{notebook} must declare {missing} in its parameters cell: the sweep passes the MLflow "
            "run to log to through them"
        )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text)[:60].strip("_") or "point"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _notebook_error(path: Path) -> str | None:
    """'EName: value (cell N)' of the first error output in an executed notebook."""
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []) or []:
            if out.get("output_type") == "error":
                return f"{out.get('ename')}: {out.get('evalue')} (cell {i})"
    return None


@dataclass
class SweepResult:
    name: str
    out_dir: Path
    experiment: str
    tracking_uri: str
    parent_run_id: str
    points: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> manifest entry
    executed: list[str] = field(default_factory=list)  # keys run this time (others skipped)
    comparison: Any = None  # workbench.tracking.fits.RunFits

    @property
    def failed(self) -> list[str]:
        return [k for k, p in self.points.items() if p["status"] != "FINISHED"]


class _Manifest:
    """manifest.json in the out folder; written atomically, from one thread at a time."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
        self.data.setdefault("points", {})

    def update(self, key: str, **entry: Any) -> None:
        with self.lock:
            self.data["points"].setdefault(key, {}).update(entry)
            self.save_locked()

    def save_locked(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)


def run_sweep(
    notebook: str | Path,
    grid: str | Path | Grid,
    *,
    out: str | Path | None = None,
    parallel: int = 1,
    kernel: str = "workbench",
    experiment: str | None = None,
    tracking_uri: str | None = None,
    metric: str = "val/pass_rate",
    x: str = "compute/device_hours",
    fit_from: float | None = None,
    cell_timeout: int | None = None,
    progress: bool = True,
    chart: bool = True,
) -> SweepResult:
    """Run every point not yet finished; return the manifest entries and the comparison."""
    from tqdm.auto import tqdm

    from workbench.kernel import require_kernel
    from workbench.tracking import store
    from workbench.tracking.fits import fit_runs

    notebook = Path(notebook).resolve()
    g = grid if isinstance(grid, Grid) else load_grid(grid)
    declared = notebook_parameters(notebook)
    validate_grid(g, declared, notebook)
    if parallel < 1:
        raise UserError(f"--parallel must be >= 1, got {parallel}")
    require_kernel(kernel)
    uri = store.resolve_tracking_uri(tracking_uri)
    exp_name = experiment or g.experiment or g.name
    out_dir = Path(out or Path("runs") / "sweeps" / _slug(g.name)).resolve()
    (out_dir / "points").mkdir(parents=True, exist_ok=True)
    manifest = _Manifest(out_dir / "manifest.json")
    old = manifest.data
    if old.get("tracking_uri") not in (None, uri):
        raise UserError(f"{out_dir} holds a sweep tracked in {old['tracking_uri']}, not {uri}: use that tracking URI or another --out")
    if old.get("notebook") not in (None, str(notebook)):
        raise UserError(f"{out_dir} holds a sweep of {old['notebook']}, not {notebook}: use another --out")

    # The store, the experiment and the parent run exist before any point starts.
    store.ensure_experiment(exp_name, uri)
    c = store.client(uri)
    parent = old.get("parent_run_id")
    try:
        if parent:
            store.retry_locked(c.update_run, parent, status="RUNNING")
    except Exception:  # noqa: BLE001 - gone (other store, deleted): start a new parent
        parent = None
    if not parent:
        parent = store.create_run(exp_name, f"sweep:{g.name}", {"workbench.kind": "sweep", "workbench.sweep": g.name}, tracking_uri=uri)
    manifest.data.update(sweep=g.name, notebook=str(notebook), experiment=exp_name, tracking_uri=uri, parent_run_id=parent, kernel=kernel)
    with manifest.lock:
        manifest.save_locked()
    if g.path:
        store.retry_locked(c.log_artifact, parent, str(g.path))

    keys = g.keys()
    result = SweepResult(g.name, out_dir, exp_name, uri, parent)
    todo = []
    for key, params, label in zip(keys, g.points, g.labels):
        entry = manifest.data["points"].get(key, {})
        if entry.get("status") == "FINISHED":
            continue
        if entry.get("status") == "RUNNING" and entry.get("run_id"):  # a sweep killed hard
            try:
                store.end_run(entry["run_id"], "KILLED", uri)
            except Exception:  # noqa: BLE001
                pass
        manifest.update(key, label=label, params=params, status="PENDING", run_id=None, error=None)
        todo.append((key, params, label))
    ctx = dict(notebook=notebook, declared=declared, uri=uri, experiment=exp_name, parent=parent, kernel=kernel,
               out_dir=out_dir, manifest=manifest, sweep=g.name, cell_timeout=cell_timeout)
    bar = tqdm(total=len(todo), desc=f"sweep {g.name}", unit="point", disable=not progress or not todo)
    failures = 0
    pool = ThreadPoolExecutor(max_workers=parallel)
    try:
        futures = {pool.submit(_run_point, ctx, *item): item[0] for item in todo}
        for fut in as_completed(futures):
            try:
                status = fut.result()
            except Exception as e:  # noqa: BLE001 - a runner bug or a store error: record it, go on
                status = "FAILED"
                manifest.update(futures[fut], status=status, error=f"sweep runner error: {e!r}", ended=_now())
            failures += status != "FINISHED"
            bar.update(1)
            bar.set_postfix(failed=failures)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        store.end_run(parent, "KILLED", uri)
        raise
    finally:
        bar.close()
        pool.shutdown(wait=True)
    result.executed = [k for k, _, _ in todo]
    result.points = {k: manifest.data["points"][k] for k in keys}

    finished = {p["label"]: p["run_id"] for k, p in result.points.items() if p["status"] == "FINISHED"}
    if finished:
        fits = fit_runs(finished, metric=metric, x=x, tracking_uri=uri, fit_from=fit_from)
        result.comparison = fits
        for path in fits.write(out_dir / "comparison"):
            store.retry_locked(c.log_artifact, parent, str(path))
        if chart and fits.fits:
            html = fits.chart(out_dir / "comparison.html", title=f"sweep {g.name}: {metric} vs {x}")
            store.retry_locked(c.log_artifact, parent, str(html))
    store.retry_locked(c.log_artifact, parent, str(manifest.path))
    store.end_run(parent, "FINISHED" if not result.failed else "FAILED", uri)
    return result


def _run_point(ctx: dict[str, Any], key: str, params: dict[str, Any], label: str) -> str:
    """Execute one point in its own papermill process; record it; return its final status."""
    from workbench.tracking import store

    uri, manifest, out_dir = ctx["uri"], ctx["manifest"], ctx["out_dir"]
    tags = {"workbench.kind": "sweep-point", "workbench.sweep": ctx["sweep"], "workbench.point": key}
    tags.update({f"sweep.{k}": _short(v)[:5000] for k, v in params.items()})
    run_id = store.create_run(ctx["experiment"], label, tags, parent_run_id=ctx["parent"], tracking_uri=uri)
    stem = out_dir / "points" / f"{_slug(label)}-{key}"
    nb_out, log, pfile = stem.with_suffix(".ipynb"), stem.with_suffix(".log"), stem.with_suffix(".params.yaml")
    manifest.update(key, status="RUNNING", run_id=run_id, notebook=str(nb_out), log=str(log), started=_now())
    injected = {"run_id": run_id, "tracking_uri": uri, "experiment": ctx["experiment"], "parent_run_id": ctx["parent"]}
    pfile.write_text(yaml.safe_dump({**params, **{k: v for k, v in injected.items() if k in ctx["declared"]}}, sort_keys=False))
    cmd = [sys.executable, "-m", "papermill", str(ctx["notebook"]), str(nb_out), "-f", str(pfile), "-k", ctx["kernel"],
           "--cwd", str(ctx["notebook"].parent), "--no-progress-bar", "--log-output"]
    if ctx["cell_timeout"]:
        cmd += ["--execution-timeout", str(int(ctx["cell_timeout"]))]
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}  # notebooks that ignore tracking_uri still log here
    error = None
    try:
        with open(log, "w") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env).returncode
        if rc != 0:
            error = _notebook_error(nb_out) or f"papermill exited with status {rc}; see {log.name}"
    except OSError as e:
        error = f"could not start papermill: {e}"
    c = store.client(uri)
    status = "FAILED" if error else "FINISHED"
    if not error:
        reported = store.run_status(run_id, uri)
        if reported in ("FAILED", "KILLED"):  # the notebook itself said the run did not succeed
            status, error = reported, f"the notebook ended its MLflow run as {reported}"
    for path in (nb_out, log):
        if path.is_file():
            try:
                store.retry_locked(c.log_artifact, run_id, str(path))
            except Exception:  # noqa: BLE001 - keep going; the file stays in the out folder
                pass
    if error:
        store.retry_locked(c.set_tag, run_id, "workbench.error", error[:5000])
    store.end_run(run_id, status, uri)
    manifest.update(key, status=status, error=error, ended=_now())
    return status


def add_parser(subparsers, name: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help="run a notebook over a parameter grid (papermill + MLflow)",
                              description=__doc__.split("\n\n")[0], epilog="See `python -m pydoc workbench.sweep` for the grid format.")
    p.add_argument("notebook", help="notebook with a cell tagged 'parameters'")
    p.add_argument("--grid", required=True, help="grid YAML (name, base, grid and/or points)")
    p.add_argument("--parallel", type=int, default=1, help="points run at once (default 1)")
    p.add_argument("--out", help="output folder (default runs/sweeps/<name>); re-use it to resume")
    p.add_argument("--kernel", default="workbench", help="Jupyter kernel name (default: workbench)")
    p.add_argument("--experiment", help="MLflow experiment (default: the grid's experiment or name)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db)")
    p.add_argument("--metric", default="val/pass_rate", help="score metric to fit (default val/pass_rate)")
    p.add_argument("--x", default="compute/device_hours", help="compute metric (default compute/device_hours)")
    p.add_argument("--fit-from", type=float, help="leave compute below this out of the fits")
    p.add_argument("--cell-timeout", type=int, help="seconds allowed per notebook cell")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-chart", action="store_true", help="skip the overlay chart comparison.html")
    return p


def run(args: argparse.Namespace) -> int:
    res = run_sweep(args.notebook, args.grid, out=args.out, parallel=args.parallel, kernel=args.kernel, experiment=args.experiment,
                    tracking_uri=args.tracking_uri, metric=args.metric, x=args.x, fit_from=args.fit_from,
                    cell_timeout=args.cell_timeout, progress=not args.no_progress, chart=not args.no_chart)
    skipped = len(res.points) - len(res.executed)
    print(f"sweep {res.name}: {len(res.points)} points ({len(res.executed)} run, {skipped} already finished), "
          f"{len(res.failed)} not finished; out: {res.out_dir}")
    for k in res.failed:
        p = res.points[k]
        print(f"  {p['status']}: {p['label']}: {p.get('error')}  [{p.get('notebook')}]")
    if res.comparison is not None:
        print(res.comparison.text)
    print(f"MLflow: experiment {res.experiment!r}, parent run {res.parent_run_id} ({res.tracking_uri})")
    return 0 if not res.failed else 1
