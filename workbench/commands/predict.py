"""`workbench predict`: an unseen configuration's curve from smaller runs (folders, CSVs or MLflow).

    workbench predict runs/ladder/b32 runs/ladder/b48 runs/ladder/b64 --by train.prompts_per_step --at 96 --x compute/flops
    workbench predict curves/*.csv --by model.n_embd --at 256 --target 0.5 --json
    workbench predict --experiment ladder --where task.name=addition --by model.n_embd --at 256 --plot ladder.png
    workbench predict runs/w32 runs/w48 runs/w64 --by model.params --at 2e6   # along the parameter count the runs recorded

The runs are read and checked by `workbench.runs.by_setting` (load_runs), the prediction is
`workbench.scaling.predict_config`; this module only parses and prints. --json prints one object:
A, B, C_mid, R0 with their intervals, the forms kept, the backtest table, `reach` (with --target)
and `worth` (against the largest run, at its last compute or --budget).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from workbench.errors import UserError
from workbench.runs.by_setting import load_runs, predict_runs


def add_parser(subparsers: Any, name: str) -> Any:
    p = subparsers.add_parser(name, help="predict an unseen configuration's curve from smaller runs",
                              description="Fit how A, B, C_mid and R0 move with one setting across runs, and predict the curve at a new value.",
                              epilog="example: workbench predict runs/ladder/b32 runs/ladder/b48 runs/ladder/b64 "
                                     "--by train.prompts_per_step --at 96 --target 0.4")
    p.add_argument("runs", nargs="*", help="run folders, or CSV files (value: a column KEY or KEY=VALUE in the file name); the runs at one value (its seeds) are fitted jointly")
    p.add_argument("--by", required=True, metavar="KEY", help="the setting the runs differ in, e.g. model.n_embd, or model.params (the parameter count the trainer counted)")
    p.add_argument("--at", required=True, type=float, metavar="VALUE", help="the value of the setting to predict")
    p.add_argument("--target", type=float, help="a score: the compute to reach it, with an interval")
    p.add_argument("--budget", type=float, help="compute at which 'worth it?' compares with the largest run (default: its last compute)")
    p.add_argument("--min-gain", type=float, default=0.01, help="the gain that makes it worth it (default 0.01)")
    p.add_argument("--experiment", help="read the runs from this MLflow experiment (finished runs) instead")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE", help="MLflow filter on a run parameter (repeatable)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db)")
    p.add_argument("--x", help="compute axis: a metric (runs; default compute/device_hours) or a CSV column")
    p.add_argument("--y", help="score: a metric (MLflow; default val/pass_rate) or a CSV column")
    p.add_argument("--fit-from", type=float, help="leave out points below this compute in every run's fit")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--json", action="store_true", help="print one JSON object: A, B, C_mid, R0 with intervals, forms, backtest")
    p.add_argument("--plot", metavar="OUT", help="write the chart: OUT.html, OUT.png or OUT.svg")
    return p


def _where(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"--where takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def run(args: Any) -> int:
    runs = load_runs(args.runs, args.by, experiment=args.experiment, where=_where(args.where), x=args.x, y=args.y,
                     tracking_uri=args.tracking_uri, fit_from=args.fit_from)
    p = predict_runs(runs, args.at, level=args.level)
    reach = p.compute_to_reach(args.target) if args.target is not None else None
    worth = p.worth_it(args.budget, min_gain=args.min_gain)
    if args.plot:
        from workbench.scaling.charts import save_chart

        save_chart(p.chart(x_title=args.x or "compute"), args.plot)
    if args.json:
        out = p.to_dict()
        if reach is not None:
            out["reach"] = {"target": reach.target, "compute": reach.compute, "ci": [reach.lo, reach.hi], "p_reachable": reach.p_reachable}
        out["worth"] = {k: v for k, v in vars(worth).items()}
        # JSON has no inf / nan: written as the strings "Infinity" / "NaN"
        print(json.dumps(json.loads(json.dumps(out, default=float), parse_constant=str)))
        return 0
    print(p.summary())
    if reach is not None:
        pct = f"{p.level:.0%}"
        print(f"  compute to reach {reach.target:g}: {reach.compute:.4g} ({pct} CI [{reach.lo:.4g}, {reach.hi:.4g}])"
              + (f"; {reach.note}" if reach.note else ""))
    print(f"  {worth.verdict}")
    if args.plot:
        print(f"  chart: {args.plot}")
    return 0
