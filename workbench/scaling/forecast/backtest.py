"""Backtests: fit on a compute prefix, score the forecast on the rest of the curve.

This is how the paper validates its fits (fit to 50k GPU-hours, predict 100k). A forecast method
is only as good as its backtests on real curves.

    bt = backtest(curve, fractions=(0.25, 0.5, 0.75))
    print(bt)              # one row per prefix
    bt.to_frame()          # pandas DataFrame
    bt.rows[1].rmse        # held-out RMSE of the fit on the first half of the compute

Each row: the prefix (fraction of the final compute), the number of points fitted and held out,
the held-out RMSE, the error at the final point (forecast - measured), and the share of held-out
points inside the prediction band (kind="prediction"), which should be near `level` when the
band is honest. A prefix with too few points to fit gets a row with `error` set.

Beside the fit, every row scores two naive forecasts on the same held-out points: the prefix's
last value (`naive_last_rmse`) and the mean of the prefix's fitted points (`naive_mean_rmse`). A
forecast method earns its keep only where it beats them; `no_gain` marks prefixes where the fit
found no rise and forecast flat (see sigmoid.py).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from workbench.errors import UserError
from workbench.scaling.data import as_curve
from workbench.scaling.fit.result import SigmoidFit
from workbench.scaling.fit.sigmoid import fit_sigmoid


@dataclass(frozen=True)
class BacktestRow:
    fraction: float
    until: float  # compute the fit stopped at
    n_fit: int
    n_test: int
    rmse: float
    final_error: float  # forecast - measured at the last point
    coverage: float  # share of held-out points inside the prediction band
    A: float
    B: float
    C_mid: float
    error: str = ""  # why this prefix could not be fitted
    naive_last_rmse: float = math.nan  # held-out RMSE of forecasting the prefix's last value
    naive_mean_rmse: float = math.nan  # ... of forecasting the mean of the prefix's fitted points
    no_gain: bool = False  # the prefix fit found no rise: its forecast is flat


@dataclass
class BacktestResult:
    rows: list[BacktestRow]
    level: float
    fits: list[SigmoidFit | None]

    def to_records(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.rows]

    def to_frame(self) -> Any:
        import pandas as pd  # lazy: the science stays numpy/scipy

        return pd.DataFrame(self.to_records())

    def __str__(self) -> str:
        head = (f"{'prefix':>6} {'until':>10} {'n_fit':>5} {'n_test':>6} {'rmse':>8} {'final_err':>9} {'cover':>6} {'A':>7} {'B':>6} {'C_mid':>10}"
                f" {'naive:last':>10} {'mean':>7}")
        lines = [head]
        for r in self.rows:
            if r.error:
                lines.append(f"{r.fraction:>6.2f} {r.until:>10.4g}  not fitted: {r.error}")
            else:
                lines.append(
                    f"{r.fraction:>6.2f} {r.until:>10.4g} {r.n_fit:>5d} {r.n_test:>6d} {r.rmse:>8.4f} {r.final_error:>+9.4f}"
                    f" {r.coverage:>6.0%} {r.A:>7.4f} {r.B:>6.3f} {r.C_mid:>10.4g} {r.naive_last_rmse:>10.4f} {r.naive_mean_rmse:>7.4f}"
                    + ("  no gain: flat" if r.no_gain else "")
                )
        lines.append(f"(coverage: held-out points inside the {self.level:.0%} prediction band; naive: held-out rmse of the prefix's last value / mean)")
        return "\n".join(lines)


def score_holdout(fit: SigmoidFit, compute: np.ndarray, score: np.ndarray) -> tuple[float, float, float]:
    """(rmse, final_error, coverage) of a fit's forecast on held-out points."""
    if len(compute) == 0:
        return math.nan, math.nan, math.nan
    pred = np.asarray(fit.predict(compute))
    err = pred - score
    cover = math.nan
    if len(fit.samples):
        lo, hi = fit.band(compute, level=fit.level, kind="prediction")
        cover = float(np.mean((score >= lo) & (score <= hi)))
    return float(np.sqrt(np.mean(err**2))), float(err[-1]), cover


def naive_rmse(compute: np.ndarray, score: np.ndarray, until: float, fit_from: float | None = None) -> tuple[float, float]:
    """Held-out RMSE (points past `until`) of the two naive forecasts: the last value at or before
    `until`, and the mean of the points a fit would use (0 < C <= until, C >= fit_from)."""
    c, s = np.asarray(compute, dtype=float), np.asarray(score, dtype=float)
    test = c > until
    prefix = ~test
    used = prefix & (c > 0) & (c >= (fit_from or 0.0))
    if not test.any() or not prefix.any():
        return math.nan, math.nan
    last = s[prefix][-1]
    mean = s[used].mean() if used.any() else last
    return float(np.sqrt(np.mean((s[test] - last) ** 2))), float(np.sqrt(np.mean((s[test] - mean) ** 2)))


def last_k_rmse(compute: np.ndarray, score: np.ndarray, until: float, k: int = 3) -> float:
    """Held-out RMSE (points past `until`) of a last value read as the mean of the prefix's last
    `k` points (steadier than the single last point on a noisy curve)."""
    c, s = np.asarray(compute, dtype=float), np.asarray(score, dtype=float)
    test = c > until
    if not test.any() or test.all():
        return math.nan
    level = float(s[~test][-k:].mean())
    return float(np.sqrt(np.mean((s[test] - level) ** 2)))


def holdout_noise(compute: np.ndarray, score: np.ndarray, until: float) -> float:
    """The held-out points' own noise sd, from their successive differences (a smooth curve
    cancels out of them): the RMSE a forecast that knew the true mean curve would score."""
    c, s = np.asarray(compute, dtype=float), np.asarray(score, dtype=float)
    st = s[c > until]
    return float(np.sqrt(np.mean(np.diff(st) ** 2) / 2)) if len(st) > 1 else math.nan


def excess_error(rmse: float, noise: float) -> float:
    """A forecast's error beyond the points' noise: sqrt(max(rmse^2 - noise^2, 0))."""
    return float(math.sqrt(max(rmse**2 - noise**2, 0.0))) if math.isfinite(rmse) and math.isfinite(noise) else math.nan


def backtest(
    curve: Any,
    fractions: float | Sequence[float] = (0.25, 0.5, 0.75),
    *,
    r0: float | str | None = None,
    fit_from: float | None = None,
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> BacktestResult:
    """Fit on each prefix C <= fraction * C_last of `curve` (a Curve or (compute, score)); score the rest."""
    cv = as_curve(curve)
    fractions = [fractions] if isinstance(fractions, numbers.Real) else list(fractions)  # one prefix, or several
    for f in fractions:
        if not 0 < f < 1:
            raise UserError(f"backtest fractions must be in (0, 1), got {f}")
    c, s = cv.compute, cv.score
    if r0 is None and c[0] != 0:
        raise UserError("no point at compute 0 to measure R0 from: pass r0=")
    rows: list[BacktestRow] = []
    fits: list[SigmoidFit | None] = []
    for f in sorted(fractions):
        until = f * c[-1]
        test = c > until
        naive = naive_rmse(c, s, until, fit_from)
        try:
            fit = fit_sigmoid(c, s, r0=r0, fit_from=fit_from, fit_until=until, n_boot=n_boot, level=level, seed=seed)
        except UserError as e:
            rows.append(BacktestRow(f, until, int((~test & (c > 0)).sum()), int(test.sum()), *([math.nan] * 6), str(e), *naive))
            fits.append(None)
            continue
        rmse, final_err, cover = score_holdout(fit, c[test], s[test])
        rows.append(BacktestRow(f, until, fit.n, int(test.sum()), rmse, final_err, cover, fit.A, fit.B, fit.C_mid, "", *naive, fit.no_gain))
        fits.append(fit)
    return BacktestResult(rows, level, fits)
