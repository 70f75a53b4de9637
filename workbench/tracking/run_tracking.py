"""The MLflow run of one session: open it, end it if the start failed, log the fit at the end.

    cfg, created = open_run(cfg, experiment="workbench")    # cfg.tracking now names the run
    with failed_if_raises(cfg, created): launch(cfg)        # a failed start ends the run FAILED
    log_fit(cfg, fit, paths, step=200, x="compute/device_hours")  # fit/A, fit/A_lo, ... + artifacts
    log_fit_error(cfg, "only 3 evaluations ...")            # tag workbench.fit_error instead

`open_run` creates the experiment and the run in the calling process (SQLite stores must not be
created by several processes at once), or reopens `run_id` (a resumed run, a sweep's child); the
engine's Coordinator then logs every metric into it. `workbench.Session` calls these; the fit
artifacts themselves are written by `workbench.runs.report.write_report` (their one layout) and
logged here under the artifact folder fit/.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from pathlib import Path
from typing import Any, Iterator, Optional

from workbench.config import RunConfig
from workbench.errors import UserError

# the MLflow tag that says where a run's folder is (its rows, heartbeat, summary); one owner
OUT_DIR_TAG = "workbench.out_dir"


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(level)


def open_run(cfg: RunConfig, *, experiment: str, run_id: Optional[str] = None, parent_run_id: Optional[str] = None,
             tracking_uri: Optional[str] = None, enabled: bool = True, kind: str = "session") -> tuple[RunConfig, bool]:
    """`cfg` with its tracking part set to log into an MLflow run (a new one, or `run_id`
    reopened) and whether this call created it. The URI: `tracking_uri`, else the config's.
    Not `enabled`: `cfg` logging to metrics.jsonl only (no MLflow run)."""
    from workbench.tracking import store

    if not enabled:
        return dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, mlflow=False)), False
    uri = store.resolve_tracking_uri(tracking_uri or cfg.tracking.tracking_uri)
    created = run_id is None
    if created:
        with _quiet("mlflow.store.db.utils"):  # "Creating initial MLflow database tables..."
            store.ensure_experiment(experiment, uri)
        # the absolute folder: how `runs.liveness.mark_dead_runs` finds the run's heartbeat later
        tags = {"workbench.kind": kind, "workbench.run": cfg.name, OUT_DIR_TAG: str(cfg.output_dir().resolve())}
        run_id = store.create_run(experiment, cfg.name, tags, parent_run_id=parent_run_id, tracking_uri=uri)
    else:
        store.check_reachable(uri)  # a dead server or a file that is no database: one line, not MLflow's retries
        try:
            status = store.run_status(run_id, uri)
        except Exception as e:  # noqa: BLE001 - MlflowException for an unknown id
            raise UserError(f"no MLflow run {run_id!r} in {uri}: {e}") from None
        if status != "RUNNING":
            store.retry_locked(store.client(uri).update_run, run_id, status="RUNNING")
        # a run created elsewhere (a sweep's child) learns where its rows are: sweeps' rungs read
        # them live, and dead-run marking finds its heartbeat there
        store.retry_locked(store.client(uri).set_tag, run_id, OUT_DIR_TAG, str(cfg.output_dir().resolve()))
    tr = dataclasses.replace(cfg.tracking, mlflow=True, run_id=run_id, tracking_uri=uri, experiment=experiment,
                             parent_run_id=parent_run_id)
    return dataclasses.replace(cfg, tracking=tr), created


@contextlib.contextmanager
def failed_if_raises(cfg: RunConfig, created: bool) -> Iterator[None]:
    """Around a run's launch: on an exception, end the config's MLflow run FAILED when `created`
    (the run never started), then re-raise."""
    try:
        yield
    except BaseException:
        if created:
            from workbench.tracking.store import end_run

            end_run(cfg.tracking.run_id, "FAILED", cfg.tracking.tracking_uri)
        raise


def fit_metrics(fit: Any, prefix: str = "fit") -> dict[str, float]:
    """fit/A, fit/B, fit/C_mid with fit/*_lo and fit/*_hi, fit/r2, fit/n, fit/converged, fit/no_gain
    (finite only: a no-gain fit has no B or C_mid, its A is the flat level); `prefix` replaces
    "fit" (a domain's fit: "fit/code"). With the run report's ceiling check on the fit, also
    fit/ceiling_lo, fit/ceiling_hi (the range it allows) and fit/ceiling_family_dependent (1 or 0)."""
    m = {f"{prefix}/A": fit.A, f"{prefix}/B": fit.B, f"{prefix}/C_mid": fit.C_mid, f"{prefix}/r2": fit.r2,
         f"{prefix}/n": float(fit.n), f"{prefix}/converged": float(fit.converged),
         f"{prefix}/no_gain": float(getattr(fit, "no_gain", False))}
    for k, ci in (("A", fit.A_ci), ("B", fit.B_ci), ("C_mid", fit.C_mid_ci)):
        m[f"{prefix}/{k}_lo"], m[f"{prefix}/{k}_hi"] = ci
    check = getattr(fit, "ceiling_check", None)  # the run report's (workbench.scaling.decide.ceiling)
    if check:
        m[f"{prefix}/ceiling_lo"], m[f"{prefix}/ceiling_hi"] = check["ceiling_range"]
        m[f"{prefix}/ceiling_family_dependent"] = float(check["family_dependent"])
    return {k: float(v) for k, v in m.items() if v is not None and math.isfinite(v)}


def log_fit(cfg: RunConfig, fit: Any, paths: list[Path], *, step: int, x: str,
            domain_fits: Optional[dict[str, Any]] = None) -> None:
    """Log the fit's metrics (at `step`), each domain's (fit/<domain>/A, ...), the x axis tag and the
    artifacts (under fit/) to the config's run, and to its W&B run with `tracking.wandb`."""
    from workbench.tracking.mlflow_sink import MlflowSink
    from workbench.tracking.wandb_sink import wandb_sinks

    metrics = fit_metrics(fit)
    for domain, f in (domain_fits or {}).items():
        metrics.update(fit_metrics(f, prefix=f"fit/{domain}"))
    wandb = wandb_sinks(cfg)  # tracking.wandb: the run's W&B run, reopened by its id
    for sink in [MlflowSink(cfg.tracking.run_id, cfg.tracking.tracking_uri), *wandb]:
        sink.log_metrics(metrics, step=step)
        sink.set_tags({"workbench.fit_x": x})
        for p in paths:
            sink.log_artifact(p, "fit")
    for sink in wandb:  # the MLflow run is ended by its owner (the session, `workbench run`)
        sink.close("FINISHED")


def log_fit_error(cfg: RunConfig, message: str) -> None:
    """Why the run could not be fitted, as the tag workbench.fit_error."""
    from workbench.tracking.mlflow_sink import MlflowSink

    MlflowSink(cfg.tracking.run_id, cfg.tracking.tracking_uri).set_tags({"workbench.fit_error": message})
