"""Replay `workbench sweep --stop-early` on a finished study's curves, at several rung sizes.

    .venv/bin/python benchmarks/bench_stop_early_replay.py                      # examples/loo, both schedules
    .venv/bin/python benchmarks/bench_stop_early_replay.py --study DIR --grid GRID.yaml --rung-evals 4 8

The leave-one-out study's stop-early sweep (issue 36) ran once, at `--rung-evals 4`, with its
thresholds fixed before the grid ran: it saved 66% of the compute and stopped GSPO, third in the
full runs. Whether a later first decision would have kept the top 3, and what it would have saved,
was not measured. This replays the sweep's own decision (`workbench.sweep.rungs.fit_group`, the
seeds of a recipe fitted jointly, and `workbench.scaling.decide.early_stop.rung_decisions`) on the
full runs' curves (`examples/loo/`, 12 recipes x 3 seeds), under two schedules:
- **sequential**: the runs one after another in the grid's order (each point's seeds in turn, as
  `workbench sweep --seeds 3` without `--parallel` ran the live sweep). After each rung of N
  evaluations of the running run, every recipe started so far is refitted (finished and stopped
  runs with the curves they ended with) at the budget of the largest full run seen so far, the
  running run's full length included (the live sweep projects a run's full compute from its step
  target, `RungMonitor.current_budget`), and the running run stops if its recipe cannot win. This is the live sweep's schedule, so its rungs of 4
  should come close to the live figures (the runs differ: the replay reads the study's full runs).
- **lockstep**: every run advancing at once (`--parallel` as large as the grid): after each rung
  every recipe is refitted on its runs so far, at the budget of the largest full run, and every
  recipe that cannot win stops.

Prints per rung size: compute saved against running everything, runs stopped, recipes dropped
(every run stopped), and any of the full runs' top 3 (by measured final score) that it stopped
(`workbench.scaling.decide.early_calls.stop_early_check`). A replay chooses its rung size after
seeing the results: it is a measurement of the trade, not a test of a rule fixed in advance.
No Ray, no runs: a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.runs.study import study_from_folder  # noqa: E402
from workbench.scaling.decide.early_calls import stop_early_check  # noqa: E402
from workbench.scaling.decide.early_stop import rung_decisions  # noqa: E402
from workbench.sweep.rungs import Progress, fit_group  # noqa: E402


def upto(c: np.ndarray, y: np.ndarray, evals: int) -> Progress:
    """A run's curve as the sweep would see it after `evals` evaluations at compute > 0."""
    pos = np.flatnonzero(c > 0)
    last = int(pos[min(evals, len(pos)) - 1])
    return Progress(c[: last + 1], y[: last + 1], last, float(c[last]), None)


def saved_share(study: dict, stopped_at: dict[tuple[str, int], int]) -> float:
    """Compute the stopped runs ((recipe, run index) -> evaluations) did not spend, of the whole grid's."""
    total = sum(float(c.max()) for runs in study.values() for c, _ in runs)
    saved = sum(float(study[k][i][0].max()) - upto(*study[k][i], n).last_x for (k, i), n in stopped_at.items())
    return saved / total


def lockstep(study: dict, rung_evals: int) -> tuple[dict[tuple[str, int], int], list[str]]:
    """Every run at once: (run -> the evaluations it stopped at, each round's stops)."""
    budget = max(float(c.max()) for runs in study.values() for c, _ in runs)
    longest = max(int((c > 0).sum()) for runs in study.values() for c, _ in runs)
    at: dict[str, int] = {}  # recipe -> the evaluations its runs stopped at
    log = []
    for evals in range(rung_evals, longest, rung_evals):
        fits = {k: fit_group([upto(c, y, at.get(k, evals)) for c, y in runs]) for k, runs in study.items()}
        decisions = rung_decisions(fits, budget)
        new = [k for k, d in decisions.items() if d.stop and k not in at and any(int((c > 0).sum()) > evals for c, _ in study[k])]
        for k in new:
            at[k] = evals
        if new:
            log.append(f"after {evals} evaluations: " + "; ".join(f"{k} ({decisions[k].reason})" for k in new))
    return {(k, i): n for k, n in at.items() for i in range(len(study[k]))}, log


def sequential(study: dict, order: list[str], rung_evals: int) -> tuple[dict[tuple[str, int], int], list[str]]:
    """One run at a time in `order` (each recipe's runs in turn): (run -> evaluations it stopped at, the stops)."""
    ended: dict[tuple[str, int], int] = {}  # run -> the evaluations it ended with
    stopped: dict[tuple[str, int], int] = {}
    log = []
    for k in order:
        for i, (c, _) in enumerate(study[k]):
            n_evals = int((c > 0).sum())
            ended[(k, i)] = n_evals
            budget = max(float(study[r][j][0].max()) for r, j in ended)
            for evals in range(rung_evals, n_evals, rung_evals):
                ended[(k, i)] = evals
                groups: dict[str, list] = {}
                for (r, j), n in ended.items():
                    groups.setdefault(r, []).append(upto(*study[r][j], n))
                d = rung_decisions({r: fit_group(v) for r, v in groups.items()}, budget)[k]
                if d.stop:
                    stopped[(k, i)] = evals
                    log.append(f"{k} run {i} after {evals} evaluations: {d.reason}")
                    break
            else:
                ended[(k, i)] = n_evals
    return stopped, log


def grid_order(grid: Path, study: dict) -> list[str]:
    """The recipes in the order the grid file lists its points (the study's own order for the rest)."""
    import yaml

    points = yaml.safe_load(grid.read_text()).get("points", [])
    listed = [p["recipe"] for p in points if isinstance(p, dict) and p.get("recipe") in study]
    return listed + [k for k in study if k not in listed]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", default=str(ROOT / "examples" / "loo"), help="a study folder: <recipe>/<run>.csv")
    ap.add_argument("--grid", default=str(ROOT / "sweeps" / "scalerl_loo.yaml"), help="the grid whose order the sequential schedule runs")
    ap.add_argument("--rung-evals", type=int, nargs="+", default=[4, 6, 8, 10, 12, 16], help="rung sizes to replay")
    ap.add_argument("--verbose", action="store_true", help="print each stop and its reason")
    args = ap.parse_args()
    study = study_from_folder(args.study)
    order = grid_order(Path(args.grid), study)
    print(f"{len(study)} recipes, {sum(len(v) for v in study.values())} runs from {args.study}")
    print(f"{'schedule':<11} {'rung evals':>10} {'saved':>6} {'runs stopped':>13}  recipes dropped; the full runs' top 3 dropped")
    for schedule in ("sequential", "lockstep"):
        for n in args.rung_evals:
            t = time.perf_counter()
            at, log = sequential(study, order, n) if schedule == "sequential" else lockstep(study, n)
            stopped = {k: sum(1 for r, _ in at if r == k) for k in {r for r, _ in at}}
            check = stop_early_check(study, stopped, {k: len(v) for k, v in study.items()}, saved_share(study, at))
            top = ", ".join(check.dropped_top) or "none"
            print(f"{schedule:<11} {n:>10} {check.saved_frac:>6.0%} {check.stopped_runs:>6} of {check.runs:<4}  "
                  f"{len(check.dropped)} of {check.recipes}; top 3 dropped: {top}"
                  + (f" (runs of {', '.join(check.cut_top)} stopped)" if check.cut_top else "") + f"  ({time.perf_counter() - t:.0f} s)")
            if args.verbose:
                print("\n".join("    " + line for line in log))
    print(f"the full runs' top 3: {', '.join(check.top)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
