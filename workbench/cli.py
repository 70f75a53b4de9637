"""The `workbench` command: one entry point, one sub-command per job.

    workbench fit CURVE.csv --x gpu_hours --y val_pass_rate --plot fit.html
    workbench run --config configs/quickstart.yaml --out runs/quickstart
    workbench sweep notebooks/ablation.ipynb --grid sweeps/smoke.yaml
    workbench compare --experiment NAME
    workbench kernel install
    workbench cluster status | stop
    workbench ui
    workbench check --config configs/mathcode.yaml --completions saved.jsonl [--json]
    workbench plan --config configs/quickstart.yaml --gpus-per-node 8 --gpu-memory 80
    workbench predict runs/ladder/b32 runs/ladder/b48 runs/ladder/b64 --by train.prompts_per_step --at 96 [--json]
    workbench config show --config configs/quickstart.yaml --set train.lr=3e-4
    workbench export runs/quickstart --out policies/quickstart

Each sub-command lives in the module that owns its concern and registers itself here through
`add_parser(subparsers)` / `main(args) -> int`. User errors (bad files, bad values) print one
line on stderr and exit with status 2; they never show a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from workbench.errors import UserError

# sub-command name -> module with `add_parser(subparsers)` and `run(args) -> int`
COMMANDS = {
    "fit": "workbench.scaling.fit_command",
    "run": "workbench.engine.run.run_command",
    "sweep": "workbench.sweep",
    "compare": "workbench.commands.compare",
    "kernel": "workbench.kernel",
    "cluster": "workbench.engine.cluster.cluster_command",
    "ui": "workbench.commands.ui",
    "check": "workbench.commands.check",
    "plan": "workbench.engine.plan.plan_command",
    "predict": "workbench.commands.predict",
    "config": "workbench.commands.config",
    "export": "workbench.commands.export",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description="Predictable RL on LLMs: run, fit, forecast, compare.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("workbench"):
                continue  # that sub-command is not built yet
            raise
        p = module.add_parser(sub, name)
        p.set_defaults(_handler=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_handler", None):
        parser.print_help()
        return 2
    try:
        return int(args._handler(args) or 0)
    except UserError as e:
        print(f"workbench {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"workbench {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
