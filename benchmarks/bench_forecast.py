"""Benchmark: held-out RMSE of the workbench's forecast against the paper's procedure and the
naive forecasts, on every development curve in examples/curves (and its more/ folder).

    .venv/bin/python benchmarks/bench_forecast.py                   # 25% and 50% prefixes
    .venv/bin/python benchmarks/bench_forecast.py --fractions 0.25 0.5 0.75 --json out.json

Prints one row per curve and prefix (workbench, paper, last value, prefix mean, coverage of the
workbench's 95% prediction band) and the summary rows per prefix that issue 16 asks for: the
medians, the workbench's gain over the better of last value and paper, the worst per-curve gaps
and the median coverage. Curves not bounded to [0, 1] are scaled by the ranges in their folder's
ranges.csv (see data.Curve.from_csv). Single-threaded BLAS, so figures do not depend on load.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from workbench.scaling.scoreboard import format_table, load_folder, score_prefix, summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = (ROOT / "examples" / "curves", ROOT / "examples" / "curves" / "more")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5])
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--json", help="also write the rows and summary to this file")
    args = ap.parse_args()
    curves = [cv for folder in FOLDERS for cv in load_folder(folder)]
    t0 = time.perf_counter()
    rows = [score_prefix(cv, f, n_boot=args.n_boot) for f in args.fractions for cv in curves]
    print(format_table(rows))
    print(f"({len(curves)} curves, {len(rows)} prefixes in {time.perf_counter() - t0:.1f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [r.to_dict() for r in rows], "summary": summary(rows)}, indent=1))


if __name__ == "__main__":
    main()
