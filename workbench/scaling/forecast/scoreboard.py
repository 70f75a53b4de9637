"""Score forecasts against naive ones on the held-out rest of many curves (the issue-16 table).

    rows = [score_prefix(curve, 0.25) for curve in curves]   # one row per curve and prefix
    print(format_table(rows)); summary(rows)                  # per curve, then per prefix

For each curve and prefix (a fraction of the curve's final compute), the forecasts are fitted
on the points with C <= fraction x C_last and scored on the rest (held-out RMSE):
- workbench: `fit_sigmoid` at its default method ("auto"),
- paper: the paper's procedure (method="paper"),
- last: the prefix's last value, mean: the mean of the prefix's fitted points (backtest.naive_rmse),
- last3: the mean of the prefix's last 3 points (a last value that one lucky point cannot make).
Coverage is the share of held-out points inside the workbench's 95% prediction band.
Against the noise floor (issue 24): `noise` is the held-out points' own sd (successive
differences: what a forecast that knew the true mean curve would score), and a forecast's
excess error is sqrt(max(rmse^2 - noise^2, 0)); the summary gives the median excess of the
workbench, the paper and last3, the workbench's gain over the better of those two (target: 30%),
and the worst per-curve gaps against each (target: none over 0.05).
R0 is the score at compute 0 when the curve has one, else the first point's score.
The summary per prefix gives the medians, the worst per-curve gaps (workbench minus the better
naive forecast, workbench minus paper), the mean per-curve log(workbench rmse / paper rmse) (a
median can sit in a gap between curves; this counts every curve) and the median coverage. `workbench fit DIR...` and
benchmarks/bench_forecast.py print these.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from workbench.errors import UserError
from workbench.scaling.forecast.backtest import excess_error, holdout_noise, last_k_rmse, naive_rmse, score_holdout
from workbench.scaling.data import RANGES_FILE, Curve
from workbench.scaling.data import r0_rule
from workbench.scaling.fit.sigmoid import fit_sigmoid

COLUMNS = ("workbench", "paper", "last", "mean", "last3")
EXCESS_COLUMNS = ("workbench", "paper", "last3")  # the forecasts compared on their error beyond the noise


@dataclass(frozen=True)
class PrefixScore:
    curve: str
    fraction: float
    until: float
    n_fit: int
    n_test: int
    rmse: dict[str, float] = field(default_factory=dict)  # per COLUMNS entry; nan when not fitted
    coverage: float = math.nan  # workbench's 95% prediction band on the held-out points
    noise: float = math.nan  # the held-out points' own noise sd (backtest.holdout_noise)
    forecast: str = ""  # which forecast the workbench used (blend weights), or why none
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rmse"] = {k: (v if math.isfinite(v) else None) for k, v in self.rmse.items()}
        d["coverage"] = self.coverage if math.isfinite(self.coverage) else None
        d["noise"] = self.noise if math.isfinite(self.noise) else None
        d["until"] = self.until if math.isfinite(self.until) else None  # a curve that could not be read
        return d


def score_prefix(curve: Curve, fraction: float, *, fit_from: float | None = None, n_boot: int = 200, level: float = 0.95, seed: int = 0) -> PrefixScore:
    """Fit the workbench and the paper's procedure on C <= fraction x C_last; score all four forecasts."""
    if not 0 < fraction < 1:
        raise UserError(f"prefix fractions must be in (0, 1), got {fraction}")
    c, s = curve.compute, curve.score
    until = fraction * float(c[-1])
    test = c > until
    n_fit = int((~test & (c > 0)).sum())
    last, mean = naive_rmse(c, s, until, fit_from)
    rmse = {"workbench": math.nan, "paper": math.nan, "last": last, "mean": mean, "last3": last_k_rmse(c, s, until, 3)}
    noise = holdout_noise(c, s, until)
    r0 = r0_rule([(c, s)])
    kw = dict(r0=r0, fit_from=fit_from, fit_until=until, level=level, seed=seed)
    try:
        fit = fit_sigmoid(c, s, n_boot=n_boot, **kw)
        paper = fit_sigmoid(c, s, n_boot=0, method="paper", **kw)
    except UserError as e:
        return PrefixScore(curve.name, fraction, until, n_fit, int(test.sum()), rmse, noise=noise, error=str(e))
    rmse["workbench"], _, cover = score_holdout(fit, c[test], s[test])
    rmse["paper"] = float(np.sqrt(np.mean((np.asarray(paper.predict(c[test])) - s[test]) ** 2)))
    return PrefixScore(curve.name, fraction, until, fit.n, int(test.sum()), rmse, cover, noise, fit.forecast_used)


def summary(rows: Sequence[PrefixScore]) -> list[dict[str, Any]]:
    """Per prefix: medians of each column, worst gaps, median coverage, curves fitted / not."""
    out = []
    for f in sorted({r.fraction for r in rows}):
        ok = [r for r in rows if r.fraction == f and not r.error]
        if not ok:
            out.append({"fraction": f, "curves": 0, "not_fitted": sum(r.fraction == f for r in rows)})
            continue
        col = {k: np.array([r.rmse[k] for r in ok]) for k in COLUMNS}
        naive = np.minimum(col["last"], col["mean"])
        best_ref = min(float(np.median(col["last"])), float(np.median(col["paper"])))
        med_wb = float(np.median(col["workbench"]))
        cover = np.array([r.coverage for r in ok])
        out.append({
            "fraction": f,
            "curves": len(ok),
            "not_fitted": sum(r.fraction == f and bool(r.error) for r in rows),
            **{f"median_{k}": float(np.median(col[k])) for k in COLUMNS},
            "gain_vs_better_of_last_and_paper": 1 - med_wb / best_ref if best_ref > 0 else math.nan,
            "worst_vs_naive": float(np.max(col["workbench"] - naive)),
            "worst_vs_naive_curve": ok[int(np.argmax(col["workbench"] - naive))].curve,
            "curves_worse_than_naive_by_0.02": int(np.sum(col["workbench"] - naive > 0.02)),
            "worst_vs_paper": float(np.max(col["workbench"] - col["paper"])),
            "worst_vs_paper_curve": ok[int(np.argmax(col["workbench"] - col["paper"]))].curve,
            "curves_worse_than_paper_by_0.05": int(np.sum(col["workbench"] - col["paper"] > 0.05)),
            "mean_log_ratio_vs_paper": float(np.mean(np.log(np.maximum(col["workbench"], 1e-12) / np.maximum(col["paper"], 1e-12)))),
            "median_coverage": float(np.nanmedian(cover)) if np.isfinite(cover).any() else math.nan,
            **_excess_summary(ok),
        })
    return out


def _excess_summary(ok: Sequence[PrefixScore]) -> dict[str, Any]:
    """The noise-floor view of one prefix: median excess errors, the workbench's gain over the
    better of paper and last3, and its worst per-curve gaps (in RMSE) against each."""
    ex = {k: np.array([excess_error(r.rmse[k], r.noise) for r in ok]) for k in EXCESS_COLUMNS}
    med = {k: float(np.nanmedian(v)) if np.isfinite(v).any() else math.nan for k, v in ex.items()}
    ref = min(med["paper"], med["last3"])
    wb = np.array([r.rmse["workbench"] for r in ok])
    gap = {k: wb - np.array([r.rmse[k] for r in ok]) for k in ("paper", "last3")}
    return {
        "median_noise": float(np.nanmedian([r.noise for r in ok])),
        **{f"median_excess_{k}": v for k, v in med.items()},
        "excess_gain_vs_better_of_paper_and_last3": 1 - med["workbench"] / ref if ref > 0 else math.nan,
        "worst_vs_last3": float(np.nanmax(gap["last3"])),
        "worst_vs_last3_curve": ok[int(np.nanargmax(gap["last3"]))].curve,
        "curves_worse_than_paper_or_last3_by_0.05": int(np.sum((gap["paper"] > 0.05) | (gap["last3"] > 0.05))),
    }


def format_table(rows: Sequence[PrefixScore]) -> str:
    """The per-curve table, then the summary rows."""
    w = max([len(r.curve) for r in rows] + [5])
    head = f"{'curve':<{w}} {'prefix':>6} {'n_fit':>5} {'n_test':>6} " + " ".join(f"{k:>9}" for k in COLUMNS) + f" {'cover95':>7}"
    lines = [head]
    for r in sorted(rows, key=lambda r: (r.fraction, r.curve)):
        if r.error:
            lines.append(f"{r.curve:<{w}} {r.fraction:>6.2f} {r.n_fit:>5d} {r.n_test:>6d} not fitted: {r.error}")
            continue
        lines.append(f"{r.curve:<{w}} {r.fraction:>6.2f} {r.n_fit:>5d} {r.n_test:>6d} " + " ".join(f"{r.rmse[k]:>9.4f}" for k in COLUMNS) + f" {r.coverage:>7.0%}")
    for s in summary(rows):
        if not s["curves"]:
            lines.append(f"prefix {s['fraction']:.2f}: no curve could be fitted")
            continue
        lines.append(
            f"prefix {s['fraction']:.2f} over {s['curves']} curves ({s['not_fitted']} not fitted): median rmse "
            + ", ".join(f"{k} {s['median_' + k]:.4f}" for k in COLUMNS)
            + f"; workbench {_under(s['gain_vs_better_of_last_and_paper'])} the better of last and paper; "
            f"worst vs better naive {s['worst_vs_naive']:+.4f} ({s['worst_vs_naive_curve']}; {s['curves_worse_than_naive_by_0.02']} curves > 0.02), "
            f"worst vs paper {s['worst_vs_paper']:+.4f} ({s['curves_worse_than_paper_by_0.05']} curves > 0.05); "
            f"mean log(workbench / paper rmse) {s['mean_log_ratio_vs_paper']:+.3f}; "
            f"median coverage {s['median_coverage']:.0%}"
        )
        lines.append(
            f"prefix {s['fraction']:.2f} beyond the noise (held-out noise sd, median {s['median_noise']:.4f}): median excess error "
            + ", ".join(f"{k} {s['median_excess_' + k]:.4f}" for k in EXCESS_COLUMNS)
            + f"; workbench {_under(s['excess_gain_vs_better_of_paper_and_last3'])} the better of paper and last3 (target 30% under); "
            f"worst vs last3 {s['worst_vs_last3']:+.4f} ({s['worst_vs_last3_curve']}), worst vs paper {s['worst_vs_paper']:+.4f}; "
            f"{s['curves_worse_than_paper_or_last3_by_0.05']} curves > 0.05 over either (target 0)"
        )
    return "\n".join(lines)


def curve_files(folder: str | Path) -> list[Path]:
    """The *.csv curves in `folder`, sorted (ranges.csv is the score-range table, not a curve)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"not a folder of curve CSVs: {folder}")
    files = sorted(p for p in folder.glob("*.csv") if p.name != RANGES_FILE)
    if not files:
        raise UserError(f"{folder}: no .csv curves in it")
    return files


def _under(gain: float) -> str:
    """A gain as "12% under" (better) or "12% over" (worse)."""
    return f"{abs(gain):.0%} {'under' if gain >= 0 else 'over'}" if math.isfinite(gain) else "(no reference)"


def load_folder(folder: str | Path) -> list[Curve]:
    """Every curve in `folder` (see curve_files); an unreadable one is a UserError naming it."""
    return [Curve.from_csv(p) for p in curve_files(folder)]
