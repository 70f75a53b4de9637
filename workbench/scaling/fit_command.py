"""`workbench fit`: fit the ScaleRL sigmoid to a curve in a CSV file, from the shell.

    workbench fit curve.csv                                  # columns guessed (gpu_hours_est, val_pass_rate)
    workbench fit curve.csv --x step --y val_pass_rate --fit-from 50
    workbench fit curve.csv --until 4.0                      # fit C <= 4, backtest on the rest
    workbench fit curve.csv --json                           # one JSON object on stdout
    workbench fit curve.csv --plot fit.html                  # or fit.png
    workbench fit curve.csv --until-fraction 0.25 --json     # fit the first 25% of the compute, score the rest
    workbench fit curve.csv --method paper                   # the paper's procedure (default: auto)
    workbench fit examples/curves examples/curves/more --until-fraction 0.25 0.5   # batch backtest table
    workbench fit reward.csv --y-range -1 4                  # a score not bounded to [0, 1], scaled

Prints A, B, C_mid with intervals, R^2, the ceiling check (ceiling.py: does a stretched
exponential fit as well with another plateau?), which forecast was used and why (method "auto": the
sigmoid, the paper's sigmoid and a log-linear trend weighted by their rolling-origin backtest
inside the fitted prefix, see forecast/blend.py), the forecast at 2x and 10x the last fitted
compute, each with how far past the data it is against its backtest's reach, and the verdict on
10x more compute (decision.scaling_gain: over both curve families where the ceiling check finds
the data cannot tell them apart, with why and what would settle it). With --until / --until-fraction the rest of the curve scores the forecast, beside the
paper's procedure and the naive forecasts (last value, prefix mean). Given folders or several
files, it runs that backtest on every curve and prints the per-curve table and summary rows
(scoreboard.py); a folder's ranges.csv scales curves not bounded to [0, 1].
Bad input (missing file, unknown column, too few points...) raises UserError: workbench/cli.py
prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from workbench.errors import UserError
from pathlib import Path

import numpy as np

from workbench.scaling.forecast.backtest import naive_rmse, score_holdout
from workbench.scaling.decide.ceiling import attach_ceiling_check
from workbench.scaling.data import Curve
from workbench.scaling.decide.gain import scaling_gain
from workbench.scaling.forecast.scoreboard import COLUMNS, PrefixScore, curve_files, format_table, score_prefix, summary
from workbench.scaling.fit.sigmoid import METHODS, fit_sigmoid


def _r0(text: str) -> float | str:
    if text == "first":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number or 'first', not {text!r}") from None


def add_parser(subparsers: Any, name: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        name,
        help="fit the compute-performance sigmoid to a curve (CSV)",
        description="Fit R(C) = R0 + (A - R0) / (1 + (C_mid/C)^B) to a training curve, with bootstrap intervals.\n"
                    "Compute values (--fit-from, --until) are in the units of the --x column (GPU-hours, FLOPs, steps...).",
        epilog="examples:\n  workbench fit curve.csv --x step --y reward --until-fraction 0.25 --plot fit.html\n"
               "  workbench fit curve.csv --until 4.0 --json\n  workbench fit examples/curves --until-fraction 0.25 0.5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("curve", nargs="+", help="CSV file with a header row; or folders / several files for the batch backtest")
    p.add_argument("--x", help="compute column (default: gpu_hours_est, gpu_hours, compute, flops or step)")
    p.add_argument("--y", help="score column, a pass rate in [0, 1] (default: val_pass_rate, pass_rate, score...)")
    p.add_argument("--r0", type=_r0, help="start score R0 (default: the score at compute 0; 'first' = the first point's)")
    p.add_argument("--fit-from", type=float, metavar="C", help="leave out points below this compute, in --x units (the early, noisy regime)")
    p.add_argument("--until", type=float, metavar="C", help="fit only up to this compute, in --x units, and score the forecast on the rest (a backtest)")
    p.add_argument("--until-fraction", type=float, nargs="+", metavar="F",
                   help="like --until, as a fraction of each curve's final compute (batch: one row per fraction; default 0.25 0.5)")
    p.add_argument("--method", choices=METHODS, default="auto", help="forecast method (default auto; paper = the paper's procedure)")
    p.add_argument("--y-range", type=float, nargs=2, metavar=("LO", "HI"), help="the score's range when it is not in [0, 1]; scores are scaled to [0, 1]")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--plot", metavar="OUT", help="write a chart: OUT.html (offline, self-contained), OUT.png or OUT.svg")
    p.add_argument("--n-boot", type=int, default=200, help="bootstrap replicates for the intervals (default 200)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    return p


def _num(x: float) -> Any:
    return x if math.isfinite(x) else str(x)


def run(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.curve]
    fractions = args.until_fraction or []
    for flag, v in (("--until", args.until), ("--fit-from", args.fit_from)):
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise UserError(f"{flag} is a compute, >= 0; got {v:g}")
    if any(p.is_dir() for p in paths) or len(paths) > 1 or len(fractions) > 1:
        return _batch(args, paths, fractions or [0.25, 0.5])
    if args.until is not None and fractions:
        raise UserError("give --until or --until-fraction, not both")
    for f in fractions:
        if not 0 < f < 1:
            raise UserError(f"--until-fraction must be in (0, 1), got {f}")
    curve = Curve.from_csv(paths[0], x=args.x, y=args.y, y_range=args.y_range)
    if args.plot and not args.plot.lower().endswith((".html", ".png", ".svg")):
        raise UserError(f"--plot: use a .html, .png or .svg file name, not {args.plot!r}")
    if fractions:
        args.until = fractions[0] * float(curve.compute[-1])
    fit = fit_sigmoid(
        curve.compute, curve.score, r0=args.r0, fit_from=args.fit_from, fit_until=args.until, n_boot=args.n_boot, level=args.level, seed=args.seed,
        method=args.method,
    )
    attach_ceiling_check(fit)
    last = float(curve.compute[fit.used].max())
    forecast = {}
    for k in (2, 10):
        c = last * k
        lo, hi = fit.band([c], level=args.level) if len(fit.samples) else ([math.nan], [math.nan])
        forecast[f"{k}x"] = {"compute": c, "score": fit.predict(c), "lo": float(lo[0]), "hi": float(hi[0]), "horizon": fit.horizon(c).line()}
    gain = scaling_gain(fit, factor=10, level=args.level)
    out: dict[str, Any] = {
        "file": str(paths[0]),
        "x": curve.x_label,
        "y": curve.y_label,
        "A": fit.A,
        "B": _num(fit.B),  # NaN for a no-gain fit: "nan", as JSON has no NaN
        "C_mid": _num(fit.C_mid),
        "R0": fit.R0,
        "r0_source": fit.r0_source,
        "A_ci": [_num(v) for v in fit.A_ci],
        "B_ci": [_num(v) for v in fit.B_ci],
        "C_mid_ci": [_num(v) for v in fit.C_mid_ci],
        "level": fit.level,
        "r2": _num(fit.r2),
        "rmse": fit.rmse,
        "n": fit.n,
        "converged": fit.converged,
        "no_gain": fit.no_gain,
        "gain_p": _num(fit.gain_p),
        "reason": fit.reason,
        "warnings": fit.warnings,
        "method": fit.method,
        "forecast_used": fit.forecast_used,
        "forecast_weights": fit.forecast.weights if fit.forecast is not None else None,
        "last_compute": last,
        "forecast": forecast,
        "verdict_10x": gain.verdict,
        "worth_10x": gain.worth,
        "ceiling_check": fit.ceiling_check,
    }
    if args.until is not None:
        test = curve.compute > args.until
        if not test.any():
            raise UserError(f"--until {args.until:g}: no points after it to score the forecast on")
        rmse, final_err, cover = score_holdout(fit, curve.compute[test], curve.score[test])
        last_rmse, mean_rmse = naive_rmse(curve.compute, curve.score, args.until, args.fit_from)
        paper_rmse = math.nan
        if args.method != "paper":
            paper = fit_sigmoid(curve.compute, curve.score, r0=args.r0, fit_from=args.fit_from, fit_until=args.until, n_boot=0, method="paper")
            paper_rmse = float(np.sqrt(np.mean((np.asarray(paper.predict(curve.compute[test])) - curve.score[test]) ** 2)))
        out.update(backtest_until=args.until, backtest_rmse=rmse, backtest_final_error=final_err, backtest_coverage=_num(cover), backtest_n=int(test.sum()),
                   backtest_naive_last_rmse=_num(last_rmse), backtest_naive_mean_rmse=_num(mean_rmse), backtest_paper_rmse=_num(paper_rmse))
    if args.plot:
        from workbench.scaling.charts import chart_fit, save_chart

        save_chart(chart_fit(fit, title=curve.name, x_title=curve.x_label, y_title=curve.y_label), args.plot)
        out["plot"] = args.plot
    if args.json:
        print(json.dumps(out))
    else:
        print(_text(fit, curve, out))
    return 0


def _batch(args: argparse.Namespace, paths: list[Path], fractions: list[float]) -> int:
    """The backtest table over every curve in the given folders / files (see scoreboard.py)."""
    if args.until is not None or args.plot or args.x or args.y or args.r0 is not None or args.method != "auto":
        raise UserError("the batch backtest (folders or several files) takes --until-fraction, --fit-from, --n-boot, --level, --seed, --y-range and --json only")
    curves, unread = [], []
    for p in paths:
        for file in curve_files(p) if p.is_dir() else [p]:
            try:  # one unreadable file is a "not fitted" row, not the end of the table
                curves.append(Curve.from_csv(file, y_range=None if p.is_dir() else args.y_range))
            except UserError as e:
                unread.append((file.stem, str(e)))
    rows = [score_prefix(cv, f, fit_from=args.fit_from, n_boot=args.n_boot, level=args.level, seed=args.seed) for f in fractions for cv in curves]
    rows += [PrefixScore(name, f, math.nan, 0, 0, {k: math.nan for k in COLUMNS}, error=why) for f in fractions for name, why in unread]
    if args.json:
        print(json.dumps({"rows": [r.to_dict() for r in rows], "summary": summary(rows)}, default=_num))
    else:
        print(format_table(rows))
    return 0


def _text(fit: Any, curve: Curve, out: dict[str, Any]) -> str:
    lines = [f"{curve.name}: {curve.y_label} vs {curve.x_label} (method {fit.method})", fit.summary()]
    pct = f"{fit.level:.0%}"
    flat = " (flat: no gain detected)" if fit.no_gain else ""
    for k, f in out["forecast"].items():
        band = f"{pct} band [{f['lo']:.4f}, {f['hi']:.4f}]" if math.isfinite(f["lo"]) else "no band (--n-boot 0)"
        lines.append(f"  forecast{flat} at {k} the last fitted compute ({f['compute']:.4g}): {f['score']:.4f}   {band}   ({f['horizon']})")
    lines.append(f"  10x more compute: {out['verdict_10x']}")
    if "backtest_rmse" in out:
        cov = out["backtest_coverage"]
        cov_txt = f"{cov:.0%}" if isinstance(cov, float) else "n/a"
        lines.append(
            f"  backtest on {out['backtest_n']} later points: rmse {out['backtest_rmse']:.4f}, "
            f"error at the last point {out['backtest_final_error']:+.4f}, {cov_txt} inside the {pct} prediction band"
        )
        paper = out["backtest_paper_rmse"]
        lines.append(
            f"  naive forecasts on the same points: rmse {out['backtest_naive_last_rmse']:.4f} (last fitted value), "
            f"{out['backtest_naive_mean_rmse']:.4f} (mean of the fitted points)"
            + (f", {paper:.4f} (the paper's procedure)" if isinstance(paper, float) else "")
        )
    if "plot" in out:
        lines.append(f"  chart written to {out['plot']}")
    return "\n".join(lines)

