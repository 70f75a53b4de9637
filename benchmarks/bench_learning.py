"""Does the CPU demo learn, bend and forecast itself? Runs `make demo`'s command per seed.

    .venv/bin/python benchmarks/bench_learning.py [--config configs/demo.yaml] [--seeds 0 1 2]
        [--out runs/bench-learning] [--set key=value ...]

Each seed runs exactly what `make demo` runs (`workbench run --config ... --fresh`, with
`--set seed=N`), in a subprocess, and the bench reads the run's summary.json, fit.json and
backtest.json. Targets (issue 11): the final sigmoid fit converges with A strictly inside its
bounds (0, 1) and R^2 >= 0.95; the fit on the first 40% of the run's compute forecasts the later
evaluations with RMSE <= 0.03, and its 95% prediction band covers >= 80% of them; the whole
command (Ray start, run, report) takes under 5 minutes. With --ceiling (the demo's: 0.512, the share
of its validation prompts whose sum has at most 3 digits), issue 24's: A's 95% interval at most
0.25 wide and containing the ceiling, and the run report's ceiling check (the range it allows
holds the ceiling or not). With --gain G --minutes M (configs/smollm2.yaml's, issue 43: 0.20 in 30):
the validation pass rate at the last evaluation within M minutes of the command's start must be at
least G above the step-0 one. With --curves DIR each seed's evaluations go to DIR/<config>__seed<N>.csv in
the forecast scoreboard's columns (examples/curves/demo/README.md) and its whole metrics.jsonl,
gzipped, beside it. Each run is also judged by bench_fallback's rule (after the
first 10% of steps no evaluation more than 3 of its standard errors below the best earlier one). The wall time is this machine's, under
whatever else is running on it: say so when quoting it.

The clocks, each figure on one of three (printed beside it):
- the **run clock** (printed `run clock`): the engine's `compute/wall_seconds`, from the loop's start; start-up
  excluded, the run's own evaluations inside (they run beside the generator and the trainer, on
  the same cores, and slow them), as in any run of the config.
- the **command clock** (printed `command`): the whole `workbench run` command, start-up (Ray, model
  conversion, actors) and what follows the last step (its evaluation, the report's fit, the
  export, shut-down) included.
- the **gain's clock**: the command's start-up (measured: this process watches the run's
  metrics.jsonl and takes the least of a row's appearance less its run clock) plus the run clock
  at the evaluation's step. Evaluation is inside both ends of the comparison: the M-minute window
  counts from the command's start, and an evaluation is stamped with the run clock at its step
  (the run's earlier evaluations inside it, the time it takes itself not), never with what the
  command does after its last step. When no row was seen, the start-up falls back to the command
  less the run clock (an upper bound: the time after the last step counted too), and says so.
This gain is not on `benchmarks/bench_vs_trl.py`'s training clock, which has no evaluation inside
(its runs are scored from checkpoints after they end); this bench's fit and backtest need the
run's own evaluations.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_fallback import read_run  # noqa: E402  (benchmarks/ is the script's folder)
from bench_vs_trl import RunWatch, startup_seconds  # noqa: E402
from cli_run import workbench_run  # noqa: E402

TARGETS = {"r2": 0.95, "rmse": 0.03, "coverage": 0.8, "wall_s": 300.0, "A_ci_width": 0.25}


def run_seed(config: str, seed: int, out: Path, overrides: list[str]) -> dict:
    """`workbench run` as `make demo` runs it; returns the figures the targets are about."""
    from workbench.runs.report import eval_rows
    from workbench.scaling import SigmoidFit

    sets = ["--set", f"seed={seed}", *(x for o in overrides for x in ("--set", o))]
    with RunWatch(out, every=0.2) as watch:
        done = workbench_run(Path(config), out, extra=sets, report=True)
    if not (out / "fit.json").exists():
        sys.stderr.write(done.stdout[-3000:])
        raise SystemExit(f"seed {seed}: `workbench run` wrote no fit.json")
    summary, wall = done.summary, done.wall_s
    fit = SigmoidFit.from_json((out / "fit.json").read_text())
    bt = json.loads((out / "backtest.json").read_text())
    line = next((s for s in done.stdout.splitlines() if s.startswith("backtest:")), "")
    return {
        "seed": seed,
        "start": summary["val_pass_rate_first"],
        "end": summary["val_pass_rate_last"],
        "A": fit.A,
        "A_ci": fit.A_ci,
        "r2": fit.r2,
        "converged": fit.converged and 0 < fit.A < 1,
        "reason": fit.reason,
        "rmse": bt["rmse"],
        "coverage": bt["coverage"],
        "n_fit": bt["n_fit"],
        "n_test": bt["n_test"],
        "run_s": summary["wall_seconds"],  # the run clock (evaluations inside, start-up out)
        "wall_s": wall,  # the command clock
        "startup_s": startup_seconds(watch.rows),  # the command's seconds before the run clock started (None: unseen)
        "retired": (summary.get("retirement") or {}).get("retired"),
        "fallback": read_run(out),
        "events": summary.get("events", []),
        "line": line,
        "ceiling_check": fit.ceiling_check,  # the run report's (workbench.scaling.decide.ceiling)
        "evals": eval_rows(done.rows),  # the evaluation rows, in step order
    }


def gain_within(rows: list[dict], seconds: float, startup_s: float) -> tuple[float, int, float]:
    """(gain, step, seconds): of the evaluation rows `rows` (in step order), the pass rate at the last
    whose gain's clock (`startup_s`, the command's start-up, plus its run clock: see the module
    docstring) is within `seconds`, less the first's."""
    inside = [r for r in rows if float(r.get("compute/wall_seconds") or 0.0) + startup_s <= seconds] or rows[:1]
    last = inside[-1]
    at = float(last.get("compute/wall_seconds") or 0.0) + startup_s
    return float(last["val/pass_rate"]) - float(rows[0]["val/pass_rate"]), int(last["step"]), at


def start_up(r: dict) -> tuple[float, str]:
    """(seconds, note): the run's measured start-up, else the command less the run clock (an upper
    bound: what follows the last step counted too) with a note saying so."""
    if r.get("startup_s") is not None:
        return float(r["startup_s"]), ""
    return max(0.0, r["wall_s"] - r["run_s"]), " (not measured: the command less the run clock, an upper bound)"


CURVE_COLUMNS = ("step", "compute", "flops", "val_pass_rate", "val_pass_rate_se")


def write_curve(out: Path, rows: list[dict], folder: Path, name: str) -> Path:
    """The run in `out`'s evaluation rows `rows` (in step order) as folder/<name>.csv (compute: its
    device hours, what the run report fits) and its metrics.jsonl as folder/<name>.metrics.jsonl.gz;
    returns the CSV's path."""
    import csv
    import gzip
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.csv"
    keys = ("step", "compute/device_hours", "compute/flops", "val/pass_rate", "val/pass_rate_se")
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CURVE_COLUMNS)
        for r in rows:
            w.writerow([int(r["step"]), *(f"{float(r.get(k) or 0.0):.6g}" for k in keys[1:])])
    with (out / "metrics.jsonl").open("rb") as src, gzip.open(folder / f"{name}.metrics.jsonl.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/demo.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/bench-learning", help="run folders go to OUT/seed<N> (kept: fit.html per seed)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--ceiling", type=float, default=None, help="the config's true ceiling (demo: 0.512): A's interval must hold it")
    ap.add_argument("--gain", type=float, default=None, help="the pass rate must gain this much within --minutes (smollm2: 0.20)")
    ap.add_argument("--minutes", type=float, default=30.0, help="the window of --gain, from the command's start")
    ap.add_argument("--curves", type=Path, default=None, help="write each seed's curve CSV and gzipped metrics here")
    args = ap.parse_args()
    rows = []
    for seed in args.seeds:
        r = run_seed(args.config, seed, Path(args.out).resolve() / f"seed{seed}", args.overrides)
        rows.append(r)
        ok = r["converged"] and r["r2"] >= TARGETS["r2"] and r["rmse"] <= TARGETS["rmse"] and r["coverage"] >= TARGETS["coverage"]
        print(
            f"seed {seed}: pass rate {r['start']:.3f} -> {r['end']:.3f}  A = {r['A']:.3f} [{r['A_ci'][0]:.3f}, {r['A_ci'][1]:.3f}]"
            f"  R^2 = {r['r2']:.3f}  converged = {r['converged']}  backtest RMSE {r['rmse']:.3f} ({r['n_fit']} fitted, {r['n_test']} held out)"
            f"  coverage {r['coverage']:.0%}  run clock {r['run_s']:.0f} s (evaluations inside, start-up out), command {r['wall_s']:.0f} s"
            f" (start-up {start_up(r)[0]:.0f} s{start_up(r)[1]})  {'OK' if ok else 'MISSED'}",
            flush=True,
        )
        lo, hi = r["A_ci"]
        fb = r["fallback"]
        pinned = "" if args.ceiling is None else (
            f"    A interval {hi - lo:.3f} wide, {'holds' if lo <= args.ceiling <= hi else 'misses'} the ceiling {args.ceiling:g}: "
            f"{'OK' if hi - lo <= TARGETS['A_ci_width'] and lo <= args.ceiling <= hi else 'MISSED'}\n")
        check = r["ceiling_check"]
        if check:
            c_lo, c_hi = check["ceiling_range"]
            held = "" if args.ceiling is None else f" ({'holds' if c_lo <= args.ceiling <= c_hi else 'misses'} {args.ceiling:g})"
            pinned += f"    {check['line']}{held}\n"
        print(f"{pinned}    fall-back: worst drop {fb['worst_drop']:.3f} = {fb['worst_drop_se']:.1f} SE "
              f"({fb['worst_drop_binomial_se']:.1f} binomial SE) at step {fb['worst_step']}: {'PASS' if fb['passed'] else 'FAIL'}")
        if args.gain is not None:
            startup, how = start_up(r)
            g, step, at = gain_within(r["evals"], args.minutes * 60, startup)
            print(f"    gain within {args.minutes:g} min: {g:+.3f} (step {step}, {at / 60:.1f} min after the command started: "
                  f"start-up {startup:.0f} s{how} + the run clock at the step, evaluations inside): "
                  f"{'OK' if g >= args.gain else 'MISSED'} (target {args.gain:+.2f})")
        if args.curves is not None:
            name = f"{Path(args.config).stem}__seed{seed}"  # FAMILY__NAME: bench_forecast --family-prior groups by FAMILY
            print(f"    curve: {write_curve(Path(args.out).resolve() / f'seed{seed}', r['evals'], args.curves, name)}")
        if not r["converged"]:
            print(f"    not converged: {r['reason']}")
        for e in r["events"]:
            print(f"    event: {e}")
    print(
        f"targets: converged with 0 < A < 1, R^2 >= {TARGETS['r2']}, backtest RMSE <= {TARGETS['rmse']}, "
        f"coverage >= {TARGETS['coverage']:.0%}, command < {TARGETS['wall_s']:.0f} s (the demo's; this machine, its load included)"
    )


if __name__ == "__main__":
    main()
