"""Run a sweep: one papermill process per point, tracked in MLflow, Ray cleaned up after each.

    res = run_sweep("notebooks/ablation.ipynb", "sweeps/smoke.yaml", parallel=2)
    res = run_sweep(nb, grid, stop_early=True, rung_evals=4)      # stop losers by forecast
    res = run_sweep(nb, grid, seeds=3)                            # each point 3 times, fitted jointly
    res.points, res.failed, res.stopped, res.comparison, res.compute_saved_frac

What happens is described in `python -m pydoc workbench.sweep`.

Ray: each point's papermill process gets a Ray state folder of its own
(WORKBENCH_STATE_DIR=<out>/points/<label>-<key>.ray). A `workbench.Session` in the notebook
starts its local cluster there, and stops it when the kernel exits (workbench.engine.cluster);
when the point's process has ended the sweep stops whatever cluster is still recorded there (a
kernel killed by a cell timeout cannot clean up after itself). So a sweep leaves no Ray process
behind, and never touches the interactive cluster in <project>/.workbench. A point running on a
cluster named by RAY_ADDRESS (a shared one) is left alone.

Interrupted (Ctrl-C, or SIGTERM from `timeout`/`kill`, which the sweep turns into the same
KeyboardInterrupt while it runs): the running points' papermill processes get SIGINT, and
INTERRUPT_GRACE seconds later every process still carrying the point's WORKBENCH_STATE_DIR
(papermill, its kernel, a `ray start` in flight) is killed; their clusters are stopped, their
MLflow runs end KILLED ("interrupted by the user"), and so does the parent; points not started
stay PENDING. A re-run with the same --out runs them again.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from workbench.errors import UserError
from workbench.sweep.grid import Grid, check_x_unit, load_grid, notebook_parameters, short, validate_grid, with_seeds
from workbench.sweep.record import DONE, saved_fraction
from workbench.sweep.interrupts import interrupt_points, kill_point_processes, sigterm_as_interrupt, stop_point_clusters

INTERRUPTED = "interrupted by the user"  # the error of a point whose sweep was interrupted


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
    comparison: Any = None  # workbench.runs.fits.RunFits
    compute_saved_frac: Optional[float] = None  # with stop_early: compute not spent / compute of the full sweep
    ray_state_dirs: list[Path] = field(default_factory=list)  # where the points' Ray clusters were recorded

    @property
    def failed(self) -> list[str]:
        return [k for k, p in self.points.items() if p["status"] not in DONE]

    @property
    def stopped(self) -> list[str]:
        return [k for k, p in self.points.items() if p["status"] == "STOPPED"]


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
    stop_early: bool = False,
    rung_evals: int = 4,
    budget: float | None = None,
    seeds: int = 1,
    poll: float = 3.0,
    ladder: str | None = None,
    min_gain: float = 0.01,
) -> SweepResult:
    """Run every point not yet finished (or stopped); return the manifest entries and the comparison.

    Every argument is checked before anything runs or is written: validate -> open (the store,
    the experiment, the parent run, the manifest) -> schedule (the points) -> finish (compare)."""
    from workbench.sweep.rungs import RungMonitor
    from workbench.tracking import store

    notebook, g, declared = _validate(notebook, grid, kernel, x, seeds, ladder, stop_early, parallel, cell_timeout)
    uri = store.resolve_tracking_uri(tracking_uri)
    monitor = RungMonitor(uri, metric, x, rung_evals, budget, poll) if stop_early else None
    result, manifest, c = _open(notebook, g, out, experiment, uri,
                                dict(kernel=kernel, x=x, metric=metric, seeds=seeds, stop_early=stop_early))  # fmt: skip
    todo = _pending(g, manifest, uri)
    ctx = dict(notebook=notebook, declared=declared, uri=uri, experiment=result.experiment, parent=result.parent_run_id,
               kernel=kernel, out_dir=result.out_dir, manifest=manifest, sweep=g.name, cell_timeout=cell_timeout,
               monitor=monitor, procs={}, lock=threading.Lock(), interrupted=threading.Event())  # fmt: skip
    if monitor is not None:
        _watch_rungs(monitor, g, manifest, result.out_dir)
    climb = None
    if ladder is not None:  # the ladder's rungs, one at a time (workbench.sweep.ladder)
        from workbench.sweep.ladder import climb as climb_ladder

        def climb(bar: Any) -> int:
            return climb_ladder(ctx, todo, ladder, _run_point, bar, min_gain=min_gain, budget=budget, x=x, metric=metric,
                                fit_from=fit_from)  # fmt: skip

    _schedule(ctx, todo, parallel, progress, climb)
    return _finish(result, g, manifest, todo, monitor, metric, x, fit_from, chart, c)


def _validate(notebook: str | Path, grid: str | Path | Grid, kernel: str, x: str, seeds: int, ladder: str | None,
              stop_early: bool, parallel: int, cell_timeout: int | None) -> tuple[Path, Grid, Any]:  # fmt: skip
    """The notebook, the grid (with its seeds) and the notebook's parameters, or a UserError."""
    from workbench.kernel import require_kernel

    notebook = Path(notebook).resolve()
    g = grid if isinstance(grid, Grid) else load_grid(grid)
    declared = notebook_parameters(notebook)
    validate_grid(g, declared, notebook)
    g = with_seeds(g, seeds, declared)
    check_x_unit(g, x, declared)
    if ladder is not None:  # workbench.sweep.ladder: rungs one at a time, a rung's seeds in turn
        from workbench.sweep.ladder import check_ladder

        check_ladder(g, ladder, stop_early=stop_early)
    if parallel < 1:
        raise UserError(f"--parallel must be >= 1, got {parallel}")
    if cell_timeout is not None and not cell_timeout > 0:
        raise UserError(f"--cell-timeout must be a number of seconds > 0, got {cell_timeout}")
    require_kernel(kernel)
    return notebook, g, declared


def _open(notebook: Path, g: Grid, out: str | Path | None, experiment: str | None, uri: str,
          settings: dict[str, Any]) -> tuple[SweepResult, _Manifest, Any]:  # fmt: skip
    """The out folder and its manifest (refusing one of another sweep), the experiment and the
    parent run (reopened on a re-run), all before any point starts."""
    from workbench.runs.liveness import tell_dead_runs
    from workbench.tracking import store

    exp_name = experiment or g.experiment or g.name
    out_dir = Path(out or Path("runs") / "sweeps" / _slug(g.name)).resolve()
    (out_dir / "points").mkdir(parents=True, exist_ok=True)
    manifest = _Manifest(out_dir / "manifest.json")
    old = manifest.data
    if old.get("tracking_uri") not in (None, uri):
        raise UserError(f"{out_dir} holds a sweep tracked in {old['tracking_uri']}, not {uri}: use that tracking URI or another --out")
    if old.get("notebook") not in (None, str(notebook)):
        raise UserError(f"{out_dir} holds a sweep of {old['notebook']}, not {notebook}: use another --out")
    store.ensure_experiment(exp_name, uri)
    tell_dead_runs(uri, [exp_name])  # points whose kernel died in an earlier sweep show FAILED, not RUNNING
    c = store.client(uri)
    parent = old.get("parent_run_id")
    try:
        if parent:
            store.retry_locked(c.update_run, parent, status="RUNNING")
    except Exception:  # noqa: BLE001 - gone (other store, deleted): start a new parent
        parent = None
    if not parent:
        parent = store.create_run(exp_name, f"sweep:{g.name}", {"workbench.kind": "sweep", "workbench.sweep": g.name}, tracking_uri=uri)
    manifest.data.update(sweep=g.name, notebook=str(notebook), experiment=exp_name, tracking_uri=uri, parent_run_id=parent, **settings)
    with manifest.lock:
        manifest.save_locked()
    if g.path:
        store.retry_locked(c.log_artifact, parent, str(g.path))
    return SweepResult(g.name, out_dir, exp_name, uri, parent), manifest, c


def _pending(g: Grid, manifest: _Manifest, uri: str) -> list[tuple[str, dict[str, Any], str, str]]:
    """The points still to run, marked PENDING (a point left RUNNING by a sweep killed hard ends KILLED)."""
    from workbench.tracking import store

    todo = []
    for key, params, label, group in zip(g.keys(), g.points, g.labels, g.groups):
        entry = manifest.data["points"].get(key, {})
        if entry.get("status") in DONE:
            continue
        if entry.get("status") == "RUNNING" and entry.get("run_id"):
            try:
                store.end_run(entry["run_id"], "KILLED", uri)
            except Exception:  # noqa: BLE001
                pass
        manifest.update(key, label=label, group=group, params=params, status="PENDING", run_id=None, error=None)
        todo.append((key, params, label, group))
    return todo


def _watch_rungs(monitor: Any, g: Grid, manifest: _Manifest, out_dir: Path) -> None:
    """Start the rung monitor; points done earlier still count in its decisions."""
    for key, label, group in zip(g.keys(), g.labels, g.groups):
        entry = manifest.data["points"].get(key, {})
        if entry.get("status") in DONE and entry.get("run_id"):
            monitor.register(key, label, group, entry["run_id"], _file(_stem(out_dir, label, key), ".stop"))
            monitor.ended(key)
    monitor.start()


def _schedule(ctx: dict[str, Any], todo: list, parallel: int, progress: bool, climb: Any) -> None:
    """Run the points, `parallel` at a time (or the ladder's `climb`), with a progress bar; on
    Ctrl-C or SIGTERM the points' processes and clusters are stopped and the parent ends KILLED."""
    from tqdm.auto import tqdm

    from workbench.tracking import store

    manifest, monitor = ctx["manifest"], ctx["monitor"]
    bar = tqdm(total=len(todo), desc=f"sweep {ctx['sweep']}", unit="point", disable=not progress or not todo)
    failures = 0
    with sigterm_as_interrupt():
        pool = ThreadPoolExecutor(max_workers=parallel)
        try:
            if climb is not None:
                climb(bar)
            futures = {pool.submit(_run_point, ctx, *item): item[0] for item in ([] if climb is not None else todo)}
            for fut in as_completed(futures):
                try:
                    status = fut.result()
                except Exception as e:  # noqa: BLE001 - a runner bug or a store error: record it, go on
                    status = "FAILED"
                    manifest.update(futures[fut], status=status, error=f"sweep runner error: {e!r}", ended=_now())
                failures += status not in DONE
                bar.update(1)
                bar.set_postfix(failed=failures)
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            interrupt_points(ctx)
            store.end_run(ctx["parent"], "KILLED", ctx["uri"])
            raise
        finally:
            bar.close()
            pool.shutdown(wait=True)
            if monitor is not None:
                monitor.close()


def _finish(result: SweepResult, g: Grid, manifest: _Manifest, todo: list, monitor: Any, metric: str, x: str,
            fit_from: float | None, chart: bool, c: Any) -> SweepResult:  # fmt: skip
    """The result from the manifest, the compute the rung monitor saved, the comparison; the parent run ends."""
    from workbench.tracking import store

    result.executed = [k for k, *_ in todo]
    result.points = {k: manifest.data["points"][k] for k in g.keys()}
    result.ray_state_dirs = [Path(p["ray_state"]) for p in result.points.values() if p.get("ray_state")]
    if monitor is not None:
        result.compute_saved_frac = _log_savings(result, manifest, x, metric, result.tracking_uri, c, result.parent_run_id, monitor)
    _compare(result, g, metric, x, result.tracking_uri, fit_from, chart, c, result.parent_run_id)
    store.retry_locked(c.log_artifact, result.parent_run_id, str(manifest.path))
    store.end_run(result.parent_run_id, "FINISHED" if not result.failed else "FAILED", result.tracking_uri)
    return result


def _stem(out_dir: Path, label: str, key: str) -> Path:
    return out_dir / "points" / f"{_slug(label)}-{key}"


def _file(stem: Path, ext: str) -> Path:
    return stem.parent / (stem.name + ext)  # not with_suffix: labels hold dots ("train.lr=1e-06")


def _log_savings(result: SweepResult, manifest: _Manifest, x: str, metric: str, uri: str, c: Any, parent: str,
                 monitor: Any) -> float:
    """sweep/compute_saved_frac on the parent run: what stopped points did not spend / the full sweep."""
    from workbench.sweep.rungs import compute_account, progress
    from workbench.tracking import store

    spent = unspent = 0.0
    for key, p in result.points.items():
        if p["status"] not in DONE or not p.get("run_id"):
            continue
        acc = compute_account(progress(p["run_id"], metric, x, uri), stopped=p["status"] == "STOPPED")
        manifest.update(key, compute_spent=acc["spent"], compute_unspent=acc["unspent"])
        spent, unspent = spent + acc["spent"], unspent + acc["unspent"]
    frac = saved_fraction(spent, unspent)
    (result.out_dir / "rungs.json").write_text(json.dumps(monitor.rounds, indent=1, default=str))
    store.retry_locked(c.log_metric, parent, "sweep/compute_saved_frac", frac)
    store.retry_locked(c.log_artifact, parent, str(result.out_dir / "rungs.json"))
    if monitor.error:
        store.retry_locked(c.set_tag, parent, "workbench.rungs_error", monitor.error[:5000])
    return frac


def _compare(result: SweepResult, g: Grid, metric: str, x: str, uri: str, fit_from: float | None, chart: bool,
             c: Any, parent: str) -> None:
    """Fit every finished or stopped point (the seeds of a point jointly), compare, log to the parent."""
    from workbench.tracking import store
    from workbench.runs.fits import fit_runs

    groups: dict[str, list[str]] = {}
    stopped: dict[str, str] = {}
    for p in result.points.values():
        if p["status"] in DONE and p.get("run_id"):
            group = p.get("group") or p["label"]
            groups.setdefault(group, []).append(p["run_id"])
            if p["status"] == "STOPPED":
                stopped[group] = p.get("stopped_reason") or "stopped by forecast"
    if not groups:
        return
    runs = {k: (v if len(v) > 1 else v[0]) for k, v in groups.items()}
    fits = fit_runs(runs, metric=metric, x=x, tracking_uri=uri, fit_from=fit_from, stopped=stopped)
    result.comparison = fits
    for path in fits.write(result.out_dir / "comparison"):
        store.retry_locked(c.log_artifact, parent, str(path))
    if chart and fits.fits:
        html = fits.chart(result.out_dir / "comparison.html", title=f"sweep {g.name}: {metric} vs {x}")
        store.retry_locked(c.log_artifact, parent, str(html))


def _run_point(ctx: dict[str, Any], key: str, params: dict[str, Any], label: str, group: str) -> str:
    """Execute one point in its own papermill process; record it; return its final status."""
    from workbench.engine import cluster
    from workbench.runs.stop_request import stop_env
    from workbench.tracking import store
    from workbench.runs.fits import STOPPED_REASON_TAG, STOPPED_TAG

    uri, manifest, out_dir, monitor = ctx["uri"], ctx["manifest"], ctx["out_dir"], ctx["monitor"]
    if ctx["interrupted"].is_set():
        return "PENDING"  # the sweep is being interrupted: a point not started stays to do
    tags = {"workbench.kind": "sweep-point", "workbench.sweep": ctx["sweep"], "workbench.point": key, "workbench.group": group}
    tags.update({f"sweep.{k}": short(v)[:5000] for k, v in params.items()})
    run_id = store.create_run(ctx["experiment"], label, tags, parent_run_id=ctx["parent"], tracking_uri=uri)
    stem = _stem(out_dir, label, key)
    nb_out, log, pfile, stop_file, ray_state = (_file(stem, ext) for ext in (".ipynb", ".log", ".params.yaml", ".stop", ".ray"))
    stop_file.unlink(missing_ok=True)
    manifest.update(key, status="RUNNING", run_id=run_id, notebook=str(nb_out), log=str(log), started=_now(),
                    ray_state=str(ray_state))
    injected = {"run_id": run_id, "tracking_uri": uri, "experiment": ctx["experiment"], "parent_run_id": ctx["parent"]}
    pfile.write_text(yaml.safe_dump({**params, **{k: v for k, v in injected.items() if k in ctx["declared"]}}, sort_keys=False))
    cmd = [sys.executable, "-m", "papermill", str(ctx["notebook"]), str(nb_out), "-f", str(pfile), "-k", ctx["kernel"],
           "--cwd", str(ctx["notebook"].parent), "--no-progress-bar", "--log-output"]
    if ctx["cell_timeout"]:
        cmd += ["--execution-timeout", str(int(ctx["cell_timeout"]))]
    # notebooks that ignore tracking_uri still log here; Ray state and stop requests of this point only
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, cluster.STATE_DIR_ENV: str(ray_state), **stop_env(stop_file)}
    if monitor is not None:
        monitor.register(key, label, group, run_id, stop_file)
    error, interrupted = None, False
    try:
        with open(log, "w") as fh:
            with ctx["lock"]:  # an interrupt either sees this process (and stops it) or keeps it from starting
                proc = None
                if not ctx["interrupted"].is_set():
                    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
                    ctx["procs"][key] = (proc, ray_state)
            rc = proc.wait() if proc is not None else None
        # a signal that ended papermill (`timeout` signals the whole process group) may reach it
        # before the sweep's own handler has run: both mean the user interrupted the sweep
        interrupted = rc != 0 and (ctx["interrupted"].is_set() or rc in (None, -signal.SIGINT, -signal.SIGTERM))
        if rc != 0:
            error = INTERRUPTED if interrupted else _notebook_error(nb_out) or f"papermill exited with status {rc}; see {log.name}"
    except OSError as e:
        error = f"could not start papermill: {e}"
    finally:
        with ctx["lock"]:
            ctx["procs"].pop(key, None)
        if interrupted or ctx["interrupted"].is_set():  # its kernel, orphaned or killed, cannot stop its own cluster
            kill_point_processes(ray_state)
        stop_point_clusters(ray_state)
        if monitor is not None:
            monitor.ended(key)
    c = store.client(uri)
    status = "KILLED" if error == INTERRUPTED else "FAILED" if error else "FINISHED"
    reason = monitor.requested.get(key) if monitor is not None else None
    if reason and error is None:  # what the curve ended with, not only what the decision saw
        reason = monitor.final_reason(key) or reason
    if error is None:
        reported = store.run_status(run_id, uri)
        if reported == "KILLED" and reason:  # the run stopped because the sweep asked it to
            status = "STOPPED"
            store.retry_locked(c.set_tag, run_id, STOPPED_TAG, "true")
            store.retry_locked(c.set_tag, run_id, STOPPED_REASON_TAG, reason[:5000])
        elif reported in ("FAILED", "KILLED"):  # the notebook itself said the run did not succeed
            status, error = reported, f"the notebook ended its MLflow run as {reported}"
    for path in (nb_out, log):
        if path.is_file():
            try:
                store.retry_locked(c.log_artifact, run_id, str(path))
            except Exception:  # noqa: BLE001 - keep going; the file stays in the out folder
                pass
    if error:
        store.retry_locked(c.set_tag, run_id, "workbench.error", error[:5000])
    store.end_run(run_id, "KILLED" if status == "STOPPED" else status, uri)
    manifest.update(key, status=status, error=error, ended=_now(), stopped_reason=reason if status == "STOPPED" else None)
    return status
