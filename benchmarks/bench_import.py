"""What a Ray process pays at start-up: the import time of `ray` and of the run's actors module.

Every Ray worker (one per actor) and every Python daemon of a cluster imports `ray` before it
does anything, so an import cost is paid many times per run. jsonschema, which `ray` imports,
also imports `rfc3987_syntax` when it is installed (jupyter-events asks for it through
`jsonschema[format-nongpl]`), and that package builds a grammar at import. `make setup` removes it;
this prints both sides where it is installed (blocked in a child process for the "without" side),
else the venv as it is.

    .venv/bin/python benchmarks/bench_import.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys

MODULES = ("ray", "workbench.engine.run.actors")
BLOCK = "import sys; sys.modules['rfc3987_syntax'] = None; "  # as if it were not installed


def import_seconds(module: str, *, block: bool) -> float:
    """Seconds one fresh interpreter spends importing `module` (measured inside it)."""
    code = (BLOCK if block else "") + f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return float(out.stdout.split()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    installed = importlib.util.find_spec("rfc3987_syntax") is not None
    sides = [("with rfc3987_syntax", False), ("without", True)] if installed else [("this venv (rfc3987_syntax absent)", False)]
    print(f"median of {a.repeats} fresh interpreters, seconds")
    for module in MODULES:
        cells = [f"{label} {statistics.median(import_seconds(module, block=b) for _ in range(a.repeats)):.2f}" for label, b in sides]
        print(f"import {module:32s} " + " | ".join(cells))


if __name__ == "__main__":
    main()
