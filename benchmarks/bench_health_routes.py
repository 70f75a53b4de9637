"""Do the shipped routes raise no run-health flag on healthy seeds? (issue 53, item 7)

    flock /tmp/heavy.lock .venv/bin/python benchmarks/bench_health_routes.py \
        [--routes quickstart mathcode smollm2] [--seeds 0 1 2] [--out runs/bench-health-routes] \
        [--reuse] [--save examples/curves]

Each route is its config as shipped (configs/<route>.yaml: all its steps and evaluations), with
`seed` set per run and MLflow off, run by `workbench run --fresh --no-report` in a subprocess, one
at a time (quickstart about 3-5 minutes, mathcode about 5, SmolLM2 about 25 on 2 cores). The bench
reads each run's summary.json `health` (what the engine wrote) and replays the rules as they are
now on its metrics.jsonl (`--reuse`: on a finished run already under OUT/<route>-s<N>, without
running it again), then prints one line per run and the flag count per route.

`--save DIR` writes each run's rows, cut to `step`, the keys the rules read
(workbench.runs.health.METRICS) and the compute axis, gzipped, as
DIR/<route>/<route>__seed<N>.health.jsonl.gz: tests/runs/test_health_routes.py replays the rules on
them (and on examples/curves/smollm2's whole metrics files).
The unhealthy runs that must still flag: benchmarks/bench_health.py.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from pathlib import Path
from typing import Any

from cli_run import REPO, RunResult, finished_run, workbench_run

sys.path.insert(0, str(REPO))

ROUTES = ("quickstart", "mathcode", "smollm2")
KEEP = ("step", "compute/device_hours", "compute/flops")  # beside the rules' METRICS


def config_path(route: str) -> Path:
    return REPO / "configs" / f"{route}.yaml"


def run(route: str, seed: int, out: Path, reuse: bool) -> RunResult:
    """One seed of a route: the finished run under OUT with --reuse, else a fresh `workbench run`."""
    folder = out / f"{route}-s{seed}"
    if reuse and (done := finished_run(folder)) is not None:
        return done
    out.mkdir(parents=True, exist_ok=True)
    extra = ["--set", f"seed={seed}", "--set", "tracking.mlflow=false"]
    return workbench_run(config_path(route), folder, extra=extra, timeout=3 * 3600)


def save(rows: list[dict[str, Any]], path: Path) -> Path:
    """The rows the rules read, gzipped (mtime 0: the same rows give the same bytes)."""
    from workbench.runs.health import METRICS

    keep = set(KEEP) | set(METRICS)
    lines = "".join(json.dumps({k: v for k, v in r.items() if k in keep}) + "\n" for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(lines.encode())
    return path


def main() -> None:
    from workbench.config import load_run_config
    from workbench.runs.health import check_health

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--out", default="runs/bench-health-routes", help="run folders go to OUT/<route>-s<seed>")
    ap.add_argument("--reuse", action="store_true", help="a finished run already under OUT is read, not run again")
    ap.add_argument("--save", default=None, help="write each run's health rows to SAVE/<route>/<route>__seed<N>.health.jsonl.gz")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    counts: dict[str, list[int]] = {}
    for route in args.routes:
        health = load_run_config(config_path(route)).health
        for seed in args.seeds:
            done = run(route, seed, out, args.reuse)
            flags = check_health(done.rows, health)
            engine = [f"{f['rule']}@{f['step']}" for f in done.summary.get("health", [])]
            now = [f"{f.rule}@{f.step}" for f in flags]
            counts.setdefault(route, []).append(len(flags))
            val = [r["val/pass_rate"] for r in done.rows if isinstance(r.get("val/pass_rate"), (int, float))]
            took = f"{done.wall_s:.0f} s" if math.isfinite(done.wall_s) else "-"
            print(f"{route} seed {seed}: {done.summary.get('status')}, {done.summary.get('steps')} steps in {took}, "
                  f"val {f'{val[0]:.3f} -> {val[-1]:.3f}' if val else '-'}; flags now: {', '.join(now) or 'none'} "
                  f"(the engine wrote: {', '.join(engine) or 'none'})", flush=True)  # fmt: skip
            for f in flags:
                print(f"  {f.rule} from step {f.step} ({f.metric}): {f.message}")
            if args.save:
                print(f"  saved {save(done.rows, Path(args.save) / route / f'{route}__seed{seed}.health.jsonl.gz')}")
    print()
    for route, n in counts.items():
        print(f"{route}: {sum(1 for k in n if k == 0)} of {len(n)} seeds raised no flag ({sum(n)} flags in all)")


if __name__ == "__main__":
    main()
