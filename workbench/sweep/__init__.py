"""`workbench sweep`: run a notebook once per grid point with papermill, tracked in MLflow.

    workbench sweep notebooks/ablation.ipynb --grid sweeps/scalerl_loo.yaml --parallel 2
    workbench sweep notebooks/ablation.ipynb --grid sweeps/lr_stop_early.yaml --stop-early [--rung-evals 4] [--budget C]
    workbench sweep notebooks/ablation.ipynb --grid sweeps/smoke.yaml --seeds 3
    workbench sweep notebooks/ablation.ipynb --grid sweeps/ladder.yaml --ladder train.prompts_per_step [--min-gain 0.01]

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
A point is named (its MLflow run, its files, its row in the comparison) by what differs between
points, an override by its own key: `recipe=scalerl,seed=1`, `train.lr=1e-06`, or the value
alone for one varying text parameter (`scalerl-loo-no-fp32`); `default` when it sets nothing
that varies. Points are identified by a hash of all their parameters (the key), not the name.
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
comparison.{md,csv,json}. Re-running with the same --out skips points already FINISHED (or
STOPPED) and retries the others. At the end every finished run's curve (val/pass_rate vs
compute/device_hours by default) is read back from MLflow, fitted with the ScaleRL sigmoid and
compared (A, B, C_mid with intervals, the +-0.02 tie rule on A); the table is printed and
logged to the parent run. Exit status: 0 when every point finished or was stopped, 1 otherwise.

--stop-early: points run in rungs of --rung-evals evaluations (at least 4, the minimum for a
fit); after each rung every point is refitted and the points that cannot win are stopped
(workbench.sweep.rungs: the rule, the default budget; workbench.runs.stop_request: the stop-request
file protocol, both its sides, the run's side being checked by `workbench.Session`). A stopped point
keeps its curve and fit; its MLflow run ends KILLED with the tags `stopped_by_forecast=true`
and `stopped_reason`; the parent run logs `sweep/compute_saved_frac`; the comparison marks it.

--seeds N: each point runs N times (seed = its seed + i; the notebook must declare `seed`); the
runs of a point are fitted jointly (`fit_sigmoid_multi`, whole-run bootstrap), so the +-0.02
tie rule on A is applied with intervals that include the seed spread.

All points must share the x-axis unit: compute/device_hours measured on GPUs for some points and
on CPUs for others is refused (compare on --x compute/flops), as are points setting a notebook
parameter `x` to different axes.

--ladder KEY: the points are rungs of one setting, run one at a time from the smallest value;
once 3 have finished, each next rung is predicted first and the ladder stops when it is predicted
not to be worth it (workbench.sweep.ladder; decisions in ladder.json; skipped rungs show STOPPED).

Ray: no Ray process is left behind by a sweep (workbench.sweep.runner).
"""

from __future__ import annotations

import argparse

from workbench.sweep.grid import (  # noqa: F401  (the package's interface)
    INJECTED, REQUIRED_INJECTED, Grid, check_x_unit, load_grid, notebook_parameters, point_key, validate_grid, with_seeds,
)
from workbench.sweep.runner import SweepResult, run_sweep  # noqa: F401


SEE_ALSO = ("At the end the finished points' curves are fitted and compared (A, B, C_mid with intervals); exit\n"
            "status 0 when every point finished or was stopped, 1 otherwise. The out folder, resuming, --stop-early,\n"
            "--seeds and --ladder in full: docs/howto/sweep.md (the manual's 'Run a papermill sweep').")


def _help_texts() -> tuple[str, str]:
    """`sweep --help`'s description (what it does, the grid file, how points are parametrised and named)
    and epilog (the examples): paragraphs of this module's docstring, found by their first words."""
    paras = __doc__.split("\n\n")
    grid = next(i for i, p in enumerate(paras) if p.startswith("Grid file"))
    naming = next(p for p in paras if p.startswith("Each point's parameters"))
    examples = next(p for p in paras if p.lstrip().startswith("workbench sweep "))
    description = "\n\n".join([paras[0], *paras[grid:grid + 2], naming, SEE_ALSO])
    return description, "examples:\n" + "\n".join("  " + line.strip() for line in examples.splitlines())


def add_parser(subparsers, name: str) -> argparse.ArgumentParser:
    description, epilog = _help_texts()
    p = subparsers.add_parser(name, help="run a notebook over a parameter grid (papermill + MLflow)", description=description,
                              epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    p.add_argument("--stop-early", action="store_true", help="stop points that cannot win, by forecast, after each rung")
    p.add_argument("--rung-evals", type=int, default=4, help="evaluations per rung with --stop-early (>= 4, default 4)")
    p.add_argument("--budget", type=float, help="compute the forecasts are compared at (default: a full point's compute)")
    p.add_argument("--seeds", type=int, default=1, help="runs per point (seed, seed+1, ...), fitted jointly (default 1)")
    p.add_argument("--ladder", metavar="KEY", help="run the points as a ladder of KEY, smallest first, predicting each next rung "
                   "and stopping when it is predicted not to be worth it (workbench.sweep.ladder)")
    p.add_argument("--min-gain", type=float, default=0.01, help="with --ladder: the predicted gain a rung must be able to reach (default 0.01)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-chart", action="store_true", help="skip the overlay chart comparison.html")
    return p


def run(args: argparse.Namespace) -> int:
    from workbench.errors import UserError

    if (args.rung_evals != 4 or args.budget is not None) and not (args.stop_early or (args.ladder and args.rung_evals == 4)):
        raise UserError("--rung-evals and --budget only apply with --stop-early (--budget also with --ladder)")
    if args.min_gain != 0.01 and not args.ladder:
        raise UserError("--min-gain only applies with --ladder")
    res = run_sweep(args.notebook, args.grid, out=args.out, parallel=args.parallel, kernel=args.kernel, experiment=args.experiment,
                    tracking_uri=args.tracking_uri, metric=args.metric, x=args.x, fit_from=args.fit_from,
                    cell_timeout=args.cell_timeout, progress=not args.no_progress, chart=not args.no_chart,
                    stop_early=args.stop_early, rung_evals=args.rung_evals, budget=args.budget, seeds=args.seeds,
                    ladder=args.ladder, min_gain=args.min_gain)
    skipped = len(res.points) - len(res.executed)
    print(f"sweep {res.name}: {len(res.points)} points ({len(res.executed)} run, {skipped} already done), "
          f"{len(res.stopped)} stopped by forecast, {len(res.failed)} not finished; out: {res.out_dir}")
    for k in res.stopped:
        p = res.points[k]
        print(f"  STOPPED: {p['label']}: {p.get('stopped_reason')}")
    for k in res.failed:
        p = res.points[k]
        print(f"  {p['status']}: {p['label']}: {p.get('error')}  [{p.get('notebook')}]")
    if res.compute_saved_frac is not None:
        print(f"compute saved by stopping early: {res.compute_saved_frac:.1%} of the full sweep")
    if res.comparison is not None:
        print(res.comparison.text)
    print(f"MLflow: experiment {res.experiment!r}, parent run {res.parent_run_id} ({res.tracking_uri})")
    return 0 if not res.failed else 1
