"""Benchmark: one full sigmoid fit with its bootstrap intervals, on 200 and on 2,000 points.

    .venv/bin/python benchmarks/bench_fit.py            # prints one line per size
    .venv/bin/python benchmarks/bench_fit.py --repeat 7 --n-boot 200

A "full fit" is what `fit_sigmoid` does by default: the vectorised (C_mid, B) grid with A solved
exactly, Levenberg-Marquardt polishing from the best grid minima, then 200 bootstrap replicates
(each a grid search + refinement, all vectorised together) for A_ci, B_ci, C_mid_ci and the bands.
Target: under 1 s for 200 points on the project's 2-core machine. Single-threaded BLAS is used
so the figure does not depend on what else the machine runs in parallel threads.

A second line per size times a flat, noisy curve: there the gain test fits 200 flat-noise
replicates on the coarse grid and the result is a no-gain fit (flat forecast, level interval).
A rising curve skips those replicates (a clear F-test), so its figure is what it was.
"""

from __future__ import annotations

import argparse
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from workbench.scaling import fit_sigmoid  # noqa: E402

R0, A, C_MID, B = 0.4017, 0.6446, 10920.0, 1.682  # the paper's 8B run, digitized


def make_curve(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    c = np.geomspace(100, 100000, n)
    y = np.clip(R0 + (A - R0) / (1 + (C_MID / c) ** B) + rng.normal(0, 0.01, n), 0, 1)
    return np.r_[0.0, c], np.r_[R0, y]


def make_flat(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    c = np.geomspace(100, 100000, n)
    return np.r_[0.0, c], np.r_[R0, np.clip(R0 + rng.normal(0, 0.01, n), 0, 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 2000])
    args = ap.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cpu(s), n_boot={args.n_boot}, repeats={args.repeat}")
    fit_sigmoid(*make_curve(50), n_boot=args.n_boot)  # warm-up: imports, BLAS initialisation
    for n in args.sizes:
        for kind, make in (("rising", make_curve), ("flat", make_flat)):
            c, y = make(n)
            times = []
            for r in range(args.repeat):
                t0 = time.perf_counter()
                f = fit_sigmoid(c, y, n_boot=args.n_boot, seed=r)
                times.append(time.perf_counter() - t0)
            print(
                f"{n:>6} points, {kind:<6}: median {statistics.median(times):.3f} s, best {min(times):.3f} s "
                f"(A = {f.A:.4f} [{f.A_ci[0]:.4f}, {f.A_ci[1]:.4f}], converged={f.converged}, no_gain={f.no_gain})"
            )


if __name__ == "__main__":
    main()
