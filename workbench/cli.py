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
    workbench findings --experiment scalerl-loo [--export examples/loo --provenance TEXT]
    workbench model import SmolLM2-135M-Instruct.Q4_1.gguf --out models/smollm2
    workbench samples runs/quickstart [--step N] [--failed] [--diff STEP_A STEP_B]

Each sub-command lives in the module that owns its concern and is imported here by name: a
module that is missing or fails to import fails `workbench` itself (no command drops out
silently). A command module has `add_parser(subparsers, name)` and `run(args) -> int`. User
errors (bad files, bad values) print one line on stderr and exit with status 2; they never show a
traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType

from workbench import kernel, sweep
from workbench.commands import check, compare, config, export, findings, predict, samples, ui
from workbench.engine.cluster import cluster_command
from workbench.engine.model import model_command
from workbench.engine.plan import plan_command
from workbench.engine.run import run_command
from workbench.errors import UserError
from workbench.scaling import fit_command

# sub-command name -> its module (`add_parser(subparsers, name)`, `run(args) -> int`), in help order
COMMANDS: dict[str, ModuleType] = {
    "fit": fit_command,
    "run": run_command,
    "sweep": sweep,
    "compare": compare,
    "kernel": kernel,
    "cluster": cluster_command,
    "ui": ui,
    "check": check,
    "plan": plan_command,
    "predict": predict,
    "config": config,
    "export": export,
    "findings": findings,
    "model": model_command,
    "samples": samples,
}


def build_parser() -> argparse.ArgumentParser:
    """The `workbench` parser with every command of COMMANDS (a module without `add_parser` or `run` raises)."""
    parser = argparse.ArgumentParser(prog="workbench", description="Predictable RL on LLMs: run, fit, forecast, compare.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
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
        code = int(args._handler(args) or 0)
        sys.stdout.flush()  # inside the try: a reader gone early shows here, not at the interpreter's exit
        return code
    except UserError as e:
        print(f"workbench {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"workbench {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `workbench samples RUN | head`: the reader left early, nothing went wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not raise again
        return 141  # what a process ended by SIGPIPE reports (128 + 13)


if __name__ == "__main__":
    sys.exit(main())
