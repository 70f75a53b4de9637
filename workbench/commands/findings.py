"""`workbench findings`: the leave-one-out findings table and the early-decision figures of a study.

    workbench findings --experiment scalerl-loo                       # from MLflow: runs grouped by recipe.name
    workbench findings --curves examples/loo                          # from a study folder (<recipe>/<run>.csv)
    workbench findings --experiment scalerl-loo --export examples/loo --provenance "..."   # ship the curves
    workbench findings --curves examples/loo --left-out scalerl-loo-length-penalty="why"  # a choice not active here
    workbench findings --curves examples/loo --stop-early-sweep runs/sweeps/scalerl_loo_stop_early   # score stop-early

Prints the findings table (`workbench.scaling.decide.findings`: A and B with intervals, delta-A
and delta-B against the baseline, the paper's finding, a verdict per choice) and, unless
--no-early, how well each recipe's first 25% and 50% of compute would have ranked the recipes
(`workbench.scaling.decide.early_calls`); with --stop-early-sweep, what a `workbench sweep
--stop-early` run of the same grid saved and whether it stopped a recipe of the full runs' top 3
(its record can also be shipped: --export copies it as stop_early.json). --markdown-out writes the same text to a file (the
manual's findings page is rebuilt this way).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from workbench.errors import UserError


# Why this command's compute axis differs from the rest of the workbench's (compare, sweep, predict, Session).
X_NOTE = ("The compute axis defaults to compute/flops here, where the other commands default to compute/device_hours:\n"
          "a study's runs are compared with each other across days and machine loads, and FLOPs do not change when\n"
          "the machine is busy, as device-hours do. The shipped study (examples/loo) is in FLOPs; run its sweep with\n"
          "--x compute/flops too, so the sweep's comparison and this table share one axis.")


def add_parser(subparsers: Any, name: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help="the leave-one-out findings table of a study, and its early decisions",
                              description=__doc__.split("\n\n")[0],
                              epilog="examples:\n  workbench findings --experiment scalerl-loo\n"
                                     "  workbench findings --curves examples/loo --no-early\n"
                                     "  workbench findings --experiment my-study --x compute/device_hours   # the axis of compare, sweep, predict\n\n"
                                     f"{X_NOTE}",
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--experiment", help="the study's MLflow experiment (finished runs, grouped by param recipe.name)")
    src.add_argument("--curves", metavar="DIR", help="a study folder: DIR/<recipe>/<run>.csv with columns compute, pass_rate")
    p.add_argument("--baseline", default="scalerl", help="the recipe every other one is compared with (default scalerl)")
    p.add_argument("--x", default="compute/flops",
                   help="with --experiment: the compute metric (default compute/flops, not compute/device_hours: see below)")
    p.add_argument("--metric", default="val/pass_rate", help="with --experiment: the score metric (default val/pass_rate)")
    p.add_argument("--left-out", action="append", default=[], metavar="RECIPE=WHY",
                   help="a recipe whose choice cannot be active in this setup, and why (repeatable)")
    p.add_argument("--no-early", action="store_true", help="skip the early-decision figures (they refit every recipe twice)")
    p.add_argument("--export", metavar="DIR", help="also write the study's curves as a study folder (with --provenance)")
    p.add_argument("--provenance", default="", help="with --export: the README text (what ran, where, when, which commit)")
    p.add_argument("--stop-early-sweep", metavar="DIR",
                   help="the out folder of a `workbench sweep --stop-early` run of the same grid, or a shipped stop_early.json")
    p.add_argument("--markdown-out", metavar="FILE", help="also write the printed text to FILE")
    p.add_argument("--tracking-uri", help="MLflow tracking URI or SQLite file (default: $MLFLOW_TRACKING_URI or the project's mlflow.db)")
    return p


def _left_out(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, why = item.partition("=")
        if not sep or not name or not why:
            raise UserError(f"--left-out takes RECIPE=WHY, got {item!r}")
        out[name] = why
    return out


def run(args: argparse.Namespace) -> int:
    from workbench.runs.study import (STOP_EARLY_FILE, describe, read_stop_early, require_runs, study_from_folder,
                                      study_from_mlflow, write_stop_early, write_study)
    from workbench.sweep.record import stop_early_record
    from workbench.scaling.decide.early_calls import early_calls, stop_early_check
    from workbench.scaling.decide.findings import findings, fit_study

    left_out = _left_out(args.left_out)
    if args.export and not args.provenance.strip():
        raise UserError("--export needs --provenance: say what ran, where, when and at which commit")
    if args.curves:
        study = study_from_folder(args.curves)
    else:
        from workbench.tracking.store import require_store, resolve_tracking_uri

        uri = resolve_tracking_uri(args.tracking_uri)
        require_store(uri)
        study = study_from_mlflow(args.experiment, x=args.x, metric=args.metric, tracking_uri=uri)
    record = None
    if args.stop_early_sweep:
        given = Path(args.stop_early_sweep)
        record = read_stop_early(given) if given.suffix == ".json" else stop_early_record(given)
    elif args.curves and (Path(args.curves) / STOP_EARLY_FILE).is_file():
        record = read_stop_early(Path(args.curves) / STOP_EARLY_FILE)  # shipped with the study
    if args.export:
        print(f"curves written to {write_study(study, args.export, provenance=args.provenance)}")
        if record is not None:
            write_stop_early(record, args.export)
    require_runs(study, 2, "a findings table")  # seeds are what the intervals are made of
    active = {n: r for n, r in study.items() if n not in left_out}
    fits = fit_study(active)  # once: the table and the early decisions' truth share the full runs' fits
    lines = [f"study: {describe(study)}", "", str(findings(active, baseline=args.baseline, left_out=left_out, fits=fits))]
    if not args.no_early:
        lines += ["", "early decisions (the full runs are the truth):"]
        lines += [f"- {c.sentence()}" for c in early_calls(active, fits=fits)]
    if record is not None:
        stopped = {n: len(r) for n, r in record.stopped.items() if n in active}
        runs = {n: k for n, k in record.runs.items() if n in active}
        lines += [f"- {stop_early_check(active, stopped, runs, record.saved_frac).sentence()}"]
    text = "\n".join(lines)
    print(text)
    if args.markdown_out:
        Path(args.markdown_out).write_text(text + "\n")
    return 0
