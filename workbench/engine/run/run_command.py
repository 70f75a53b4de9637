"""`workbench run`: train a policy with a config file, with a progress bar; resumable.

    workbench run --config configs/quickstart.yaml --out runs/quickstart
    workbench run --config configs/quickstart.yaml --set recipe=qwen-dapo --set train.lr=3e-4
    workbench run --config ... --out runs/x          # again: resumes from the last checkpoint

Writes OUT/metrics.jsonl (one object per step and per evaluation), OUT/summary.json and
checkpoints. Ctrl-C stops after the step in flight and writes a checkpoint. The run is recorded by
name (engine/run/registry.py): a notebook follows it from its folder with `Session.attach(NAME or
OUT)`, without touching its Ray, and `.stop()` there writes OUT/stop_request, acted on like Ctrl-C.

The run is tracked like a Session's (`tracking.mlflow`, true by default; `--set tracking.mlflow=false`
opts out): it creates its MLflow run in the store of $MLFLOW_TRACKING_URI, else the project's
SQLite file mlflow.db (or, resuming a folder whose run was tracked, reopens that run), logs params
and every step once, and at the end the fit and its artifacts, so `workbench compare` and
`workbench ui` find it without flags.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

from workbench.errors import UserError
from workbench.runs.follow import STOP_FILE


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="train a policy (async RL on Ray) and log its curve",
                       description="Train a policy with asynchronous RL on Ray (the config's recipe, model and task), log every\n"
                                   "step to <out>/metrics.jsonl and to MLflow (tracking.mlflow=false opts out), then fit and backtest\n"
                                   "the validation curve. The same command on the same --out resumes from the last checkpoint.",
                       epilog="examples:\n  workbench run --config configs/demo.yaml --out runs/demo --fresh\n"
                              "  workbench run --config configs/quickstart.yaml --set train.lr=3e-4 --set recipe=qwen-dapo --max-steps 200\n"
                              "  workbench config show --config configs/quickstart.yaml   # every key, with its meaning",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="run config YAML (required; e.g. configs/quickstart.yaml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. train.lr=1e-4 or recipe=qwen-dapo (repeatable)")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many trainer steps")
    p.add_argument("--max-minutes", type=float, default=None, help="stop after this much wall time")
    p.add_argument("--out", default=None, help="output folder (default: runs/<name>)")
    p.add_argument("--fresh", action="store_true", help="ignore checkpoints in --out and start over")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-report", action="store_true", help="skip the sigmoid fit and chart at the end")
    return p


def open_tracking(cfg, *, prev=None):
    """(cfg logging into its MLflow run, whether this call created the run): a new run, or the one
    the resumed folder's config `prev` was tracked in. Tracking keys that cannot take effect are refused."""
    from workbench.tracking import run_tracking

    tr = cfg.tracking
    if not tr.mlflow:
        stray = [k for k in ("run_id", "parent_run_id", "tracking_uri") if getattr(tr, k)]
        if stray:
            raise UserError(f"tracking.{stray[0]} is set but tracking.mlflow is false: set tracking.mlflow=true "
                            "to log into MLflow, or drop it")
        return cfg, False
    run_id = tr.run_id
    if run_id is None and prev is not None and prev.tracking.mlflow:
        run_id = prev.tracking.run_id
    return run_tracking.open_run(cfg, experiment=tr.experiment, run_id=run_id, parent_run_id=tr.parent_run_id, kind="run")


def resumed_config(cfg):
    """The saved config of the run `cfg` resumes (None: nothing to resume); a UserError when that
    run was trained with another config (see runs.folder.resume_changes)."""
    from workbench.engine.run.preflight import absolute_paths
    from workbench.runs.folder import has_checkpoint, resume_changes, saved_config

    out = cfg.output_dir()
    prev = saved_config(out) if has_checkpoint(out) else None
    changes = resume_changes(prev, absolute_paths(cfg)) if prev is not None else []
    if changes:
        more = f" and {len(changes) - 4} more" if len(changes) > 4 else ""
        raise UserError(f"{out} holds a run trained with another config ({'; '.join(changes[:4])}{more}): resuming would "
                        "mix two settings in one curve; start over with --fresh, or give another --out")
    return prev


def watch_stop_requests(out: Path, handle, every: float = 1.0) -> threading.Event:
    """Stop the run after the step in flight once a notebook watching it asks (`<out>/stop_request`,
    runs/follow.py), from a thread of this driver; set the returned event to end the watch."""
    done = threading.Event()

    def watch() -> None:
        path = out / STOP_FILE
        while not done.wait(every):
            if path.exists():
                try:
                    reason = path.read_text().strip()
                    path.unlink()
                except OSError:
                    reason = "stop requested"
                print(f"\nstopping after the step in flight (checkpointing): {reason}", file=sys.stderr)
                try:
                    handle.stop()
                except Exception:  # noqa: BLE001 - the run ended meanwhile
                    pass
                return

    threading.Thread(target=watch, name="workbench-stop-request", daemon=True).start()
    return done


def run(args: argparse.Namespace) -> int:
    import ray

    from workbench.config import load_run_config
    from workbench.engine.failures import ERROR_LOG, RunFailed
    from workbench.engine.run.launch import launch, wait_with_progress
    from workbench.engine.run.preflight import absolute_paths, preflight
    from workbench.tracking import run_tracking

    overrides = list(args.overrides)
    if args.out:
        overrides.append(f"out_dir={args.out}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        raise UserError(f"--max-minutes must be > 0, got {args.max_minutes:g}")
    if args.max_steps is not None:
        if args.max_steps < 1:
            raise UserError("--max-steps must be >= 1")
        overrides.append(f"train.max_steps={args.max_steps}")
    # paths absolute, a hub model id resolved and the driver's checks passed before any MLflow run
    # exists: bad input is one line, not a failed MLflow run, and the run's params name the snapshot
    # and commit it trains
    cfg = absolute_paths(load_run_config(args.config, overrides))
    preflight(cfg, build_model=True)
    (cfg.output_dir() / STOP_FILE).unlink(missing_ok=True)  # an earlier run's request is not this run's
    cfg, created = open_tracking(cfg, prev=None if args.fresh else resumed_config(cfg))
    if cfg.tracking.mlflow:
        print(f"tracking in MLflow run {cfg.tracking.run_id} ({cfg.tracking.tracking_uri})", file=sys.stderr)
    handle = None
    try:
        with run_tracking.failed_if_raises(cfg, created):  # a run that never started says so in MLflow
            handle = launch(cfg, resume=not args.fresh, checked=True)
        st = handle.status()
        if st.get("resumed_from") is not None:
            print(f"resuming {cfg.name} from step {st['resumed_from']}", file=sys.stderr)
        handle.start(max_minutes=args.max_minutes)
        watching = watch_stop_requests(cfg.output_dir(), handle)
        try:
            summary = wait_with_progress(handle, cfg.train.max_steps, quiet=args.quiet)
        except KeyboardInterrupt:
            print("stopping after the step in flight (checkpointing)...", file=sys.stderr)
            handle.stop()
            summary = handle.wait(timeout=120)
        finally:
            watching.set()
    except RunFailed as e:  # one line; the traceback and the actors' output stay in the run folder
        log = cfg.output_dir() / ERROR_LOG
        print(f"workbench run: run failed: {e}" + (f" (traceback: {log})" if log.is_file() else ""), file=sys.stderr)
        return 1
    finally:
        if handle is not None:
            handle.kill()
        if ray.is_initialized():
            ray.shutdown()
    print(json.dumps(summary, indent=2, default=float))
    from workbench.runs.report import engine_summary_line, retirement_line

    print(engine_summary_line(summary))
    if retired := retirement_line(summary):
        print(retired)
    if str(summary.get("training", "")).startswith("nothing was trained"):  # not only "finished" (learning.py)
        print(f"workbench run: {summary['status']}, but {summary['training']}", file=sys.stderr)
    if not args.no_report:
        from workbench.runs.report import print_report, report_run_end

        report, why = report_run_end(cfg, step=int(summary["steps"]), tracked=bool(cfg.tracking.mlflow))
        if report is None:
            print(f"no sigmoid fit: {why}", file=sys.stderr)
        else:
            print(print_report(report))
    return 0
