"""`workbench fit`: fit the ScaleRL sigmoid to a curve in a CSV file, from the shell.

    workbench fit curve.csv                                  # columns guessed (gpu_hours_est, val_pass_rate)
    workbench fit curve.csv --x step --y val_pass_rate --fit-from 50
    workbench fit curve.csv --until 4.0                      # fit C <= 4, backtest on the rest
    workbench fit curve.csv --json                           # one JSON object on stdout
    workbench fit curve.csv --plot fit.html                  # or fit.png

Prints A, B, C_mid with intervals, R^2, and the forecast at 2x and 10x the last fitted compute.
Bad input (missing file, unknown column, too few points...) raises UserError: workbench/cli.py
prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from workbench.errors import UserError
from workbench.scaling.backtest import naive_rmse, score_holdout
from workbench.scaling.data import Curve
from workbench.scaling.sigmoid import fit_sigmoid


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
        description="Fit R(C) = R0 + (A - R0) / (1 + (C_mid/C)^B) to a training curve, with bootstrap intervals.",
    )
    p.add_argument("curve", help="CSV file with a header row")
    p.add_argument("--x", help="compute column (default: gpu_hours_est, gpu_hours, compute, flops or step)")
    p.add_argument("--y", help="score column, a pass rate in [0, 1] (default: val_pass_rate, pass_rate, score...)")
    p.add_argument("--r0", type=_r0, help="start score R0 (default: the score at compute 0; 'first' = the first point's)")
    p.add_argument("--fit-from", type=float, help="leave out points below this compute (the early, noisy regime)")
    p.add_argument("--until", type=float, help="fit only up to this compute and score the forecast on the rest (a backtest)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--plot", metavar="OUT", help="write a chart: OUT.html (offline, self-contained) or OUT.png")
    p.add_argument("--n-boot", type=int, default=200, help="bootstrap replicates for the intervals (default 200)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    return p


def _num(x: float) -> Any:
    return x if math.isfinite(x) else str(x)


def run(args: argparse.Namespace) -> int:
    curve = Curve.from_csv(args.curve, x=args.x, y=args.y)
    if args.plot and not args.plot.lower().endswith((".html", ".png", ".svg")):
        raise UserError(f"--plot: use a .html, .png or .svg file name, not {args.plot!r}")
    fit = fit_sigmoid(
        curve.compute, curve.score, r0=args.r0, fit_from=args.fit_from, fit_until=args.until, n_boot=args.n_boot, level=args.level, seed=args.seed
    )
    last = float(curve.compute[fit.used].max())
    forecast = {}
    for k in (2, 10):
        c = last * k
        lo, hi = fit.band([c], level=args.level) if len(fit.samples) else ([math.nan], [math.nan])
        forecast[f"{k}x"] = {"compute": c, "score": fit.predict(c), "lo": float(lo[0]), "hi": float(hi[0])}
    out: dict[str, Any] = {
        "file": str(args.curve),
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
        "last_compute": last,
        "forecast": forecast,
    }
    if args.until is not None:
        test = curve.compute > args.until
        if not test.any():
            raise UserError(f"--until {args.until:g}: no points after it to score the forecast on")
        rmse, final_err, cover = score_holdout(fit, curve.compute[test], curve.score[test])
        last_rmse, mean_rmse = naive_rmse(curve.compute, curve.score, args.until, args.fit_from)
        out.update(backtest_rmse=rmse, backtest_final_error=final_err, backtest_coverage=_num(cover), backtest_n=int(test.sum()),
                   backtest_naive_last_rmse=_num(last_rmse), backtest_naive_mean_rmse=_num(mean_rmse))
    if args.plot:
        from workbench.scaling.charts import chart_fit, save_chart

        save_chart(chart_fit(fit, title=curve.name, x_title=curve.x_label, y_title=curve.y_label), args.plot)
        out["plot"] = args.plot
    if args.json:
        print(json.dumps(out))
    else:
        print(_text(fit, curve, out))
    return 0


def _text(fit: Any, curve: Curve, out: dict[str, Any]) -> str:
    lines = [f"{curve.name}: {curve.y_label} vs {curve.x_label}", fit.summary()]
    pct = f"{fit.level:.0%}"
    flat = " (flat: no gain detected)" if fit.no_gain else ""
    for k, f in out["forecast"].items():
        lines.append(f"  forecast{flat} at {k} the last fitted compute ({f['compute']:.4g}): {f['score']:.4f}   {pct} band [{f['lo']:.4f}, {f['hi']:.4f}]")
    if "backtest_rmse" in out:
        cov = out["backtest_coverage"]
        cov_txt = f"{cov:.0%}" if isinstance(cov, float) else "n/a"
        lines.append(
            f"  backtest on {out['backtest_n']} later points: rmse {out['backtest_rmse']:.4f}, "
            f"error at the last point {out['backtest_final_error']:+.4f}, {cov_txt} inside the {pct} prediction band"
        )
        lines.append(
            f"  naive forecasts on the same points: rmse {out['backtest_naive_last_rmse']:.4f} (last fitted value), "
            f"{out['backtest_naive_mean_rmse']:.4f} (mean of the fitted points)"
        )
    if "plot" in out:
        lines.append(f"  chart written to {out['plot']}")
    return "\n".join(lines)

