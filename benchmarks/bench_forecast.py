"""Benchmark: held-out RMSE of the workbench's forecast against the paper's procedure and the
naive forecasts, on every development curve in examples/curves (and its more/, smollm2/ and
smollm2-env/ folders: the public curves and this project's SmolLM2 runs, on word problems and on
environments).

    .venv/bin/python benchmarks/bench_forecast.py                   # 25% and 50% prefixes
    .venv/bin/python benchmarks/bench_forecast.py --fractions 0.25 0.5 0.75 --json out.json

Prints one row per curve and prefix (workbench, paper, last value, prefix mean, coverage of the
workbench's 95% prediction band) and the summary rows per prefix that issue 16 asks for: the
medians, the workbench's gain over the better of last value and paper, the worst per-curve gaps,
the mean per-curve log(workbench / paper rmse) and the median coverage; then issue 24's view
against the noise floor (median excess error over the held-out points' noise for the
workbench, the paper and the mean of the prefix's last 3 points, and the worst curves). Curves not bounded to [0, 1] are scaled by the ranges in their folder's
ranges.csv (see data.Curve.from_csv). Single-threaded BLAS, so figures do not depend on load.

--family-prior adds what a history prior does on real data: each curve is refitted with a
SigmoidPrior built from the full-curve fits of the OTHER curves of its family (same file-name
prefix before "__": the 7 verl replicates, the 6 EXP-27 runs, the unsloth notebooks; leave one
out), as a user with those runs in MLflow would get from workbench.tracking.prior.history_prior.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from workbench.errors import UserError  # noqa: E402
from workbench.scaling import SigmoidPrior, fit_sigmoid, r0_rule  # noqa: E402
from workbench.scaling.forecast.backtest import holdout_noise  # noqa: E402
from workbench.scaling.forecast.scoreboard import format_table, load_folder, score_prefix, summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = tuple(ROOT / "examples" / "curves" / sub for sub in ("", "more", "smollm2", "smollm2-env"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5])
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--json", help="also write the rows and summary to this file")
    ap.add_argument("--bounds", action="store_true", help="also print the noise floor and hindsight-oracle forecasts per prefix")
    ap.add_argument("--family-prior", action="store_true", help="also score the workbench with a leave-one-out prior from each curve's family")
    args = ap.parse_args()
    curves = [cv for folder in FOLDERS for cv in load_folder(folder)]
    t0 = time.perf_counter()
    rows = [score_prefix(cv, f, n_boot=args.n_boot) for f in args.fractions for cv in curves]
    print(format_table(rows))
    print(f"({len(curves)} curves, {len(rows)} prefixes in {time.perf_counter() - t0:.1f} s)")
    if args.family_prior:
        family_prior_table(curves, args.fractions, {(r.curve, r.fraction): r for r in rows})
    if args.bounds:
        bounds_table(curves, args.fractions, rows)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [r.to_dict() for r in rows], "summary": summary(rows)}, indent=1))


def family_prior_table(curves: list, fractions: list[float], plain: dict) -> None:
    """Per prefix: median held-out RMSE with and without the leave-one-out family prior."""
    r0 = lambda cv: r0_rule([(cv.compute, cv.score)])  # noqa: E731
    full = {cv.name: fit_sigmoid(cv.compute, cv.score, r0=r0(cv), method="sigmoid", n_boot=0) for cv in curves}
    for f in fractions:
        with_p, without = [], []
        for cv in curves:
            family = [full[o.name] for o in curves if o.name != cv.name and o.name.split("__")[0] == cv.name.split("__")[0]]
            row = plain[(cv.name, f)]
            try:
                prior = SigmoidPrior.from_fits(family)
            except UserError:
                continue  # fewer than 2 other rising runs in the family
            if row.error:
                continue
            c, s = cv.compute, cv.score
            until = f * c[-1]
            fit = fit_sigmoid(c, s, r0=r0(cv), fit_until=until, n_boot=0, prior=prior)
            test = c > until
            with_p.append(float(np.sqrt(np.mean((np.asarray(fit.predict(c[test])) - s[test]) ** 2))))
            without.append(row.rmse["workbench"])
        print(f"prefix {f:.2f}, {len(with_p)} curves with a family prior: median rmse {np.median(with_p):.4f} with it, {np.median(without):.4f} without; "
              f"better on {int(np.sum(np.array(with_p) < np.array(without)))} of them")


def _rmse(p: np.ndarray, s: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(p, dtype=float) - s) ** 2)))


# convex weights for (sigmoid, paper, trend) on a 0.05 grid; each mixed with the flat level in steps of 0.1
_SIMPLEX = [np.array(w) for w in itertools.product(np.linspace(0, 1, 21), repeat=3) if abs(sum(w) - 1) < 1e-9]


def bounds_table(curves: list, fractions: list[float], rows: list) -> None:
    """Per prefix: the medians over curves of the noise floor, the whole-curve sigmoid and the two
    hindsight oracles (see the module docstring); then the worst-vs-naive curves' last values."""
    r0 = lambda cv: r0_rule([(cv.compute, cv.score)])  # noqa: E731
    full = {cv.name: fit_sigmoid(cv.compute, cv.score, r0=r0(cv), method="sigmoid", n_boot=0) for cv in curves}
    by_key = {(r.curve, r.fraction): r for r in rows}
    for f in fractions:
        cols: dict[str, list[float]] = {"workbench": [], "noise floor": [], "whole-curve sigmoid": [], "best candidate": [], "best weights": []}
        lucky = []
        for cv in curves:
            row = by_key[(cv.name, f)]
            if row.error:
                continue
            c, s = cv.compute, cv.score
            test = c > row.until
            st = s[test]
            fit = fit_sigmoid(c, s, r0=r0(cv), fit_until=row.until, n_boot=0)
            wb = _rmse(fit.predict(c[test]), st)
            cols["workbench"].append(wb)
            cols["noise floor"].append(holdout_noise(c, s, row.until))
            cols["whole-curve sigmoid"].append(_rmse(full[cv.name].predict(c[test]), st))
            b = fit.forecast
            if b is None:  # the sigmoid alone, or the flat no-gain level: nothing to choose between
                cols["best candidate"].append(wb)
                cols["best weights"].append(wb)
            else:
                parts = b.parts(c[test])
                P = np.stack([parts["sigmoid"], parts["paper"], parts["trend"]])
                cols["best candidate"].append(min([_rmse(p, st) for p in P] + [_rmse(np.full(len(st), b.level), st)]))
                cols["best weights"].append(min(_rmse(a * (w @ P) + (1 - a) * b.level, st) for w in _SIMPLEX for a in np.linspace(0, 1, 11)))
            naive = min(row.rmse["last"], row.rmse["mean"])
            if row.rmse["workbench"] - naive > 0.02:
                prefix = s[~test]
                tail = prefix[-20:]
                z = (prefix[-1] - tail.mean()) / max(float(tail.std(ddof=1)), 1e-12)
                lucky.append(f"  {cv.name}: workbench {row.rmse['workbench']:.3f}, last value {row.rmse['last']:.3f} "
                             f"({z:+.1f} sd from the mean of the prefix's last 20 points), mean of the last 2 points {_rmse(prefix[-2:].mean(), st):.3f}")
        ok = [r for r in rows if r.fraction == f and not r.error]
        target = 0.85 * min(float(np.median([r.rmse["last"] for r in ok])), float(np.median([r.rmse["paper"] for r in ok])))
        print(f"prefix {f:.2f}, medians over {len(cols['workbench'])} curves: " + ", ".join(f"{k} {np.median(v):.4f}" for k, v in cols.items())
              + f"; issue 16's target (15% under the better of last value and paper) {target:.4f}")
        print("\n".join(lucky))


if __name__ == "__main__":
    main()
