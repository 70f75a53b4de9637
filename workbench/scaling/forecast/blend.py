"""The forecast beyond the data: two sigmoids and a log-linear trend, weighted by their backtest.

    fit = fit_sigmoid(compute, score)          # method="auto" (the default) attaches a Blend
    fit.forecast.weights, fit.forecast_used     # which forecast was used, and why
    fit.predict(c); fit.band(c)                 # at and beyond the last fitted compute: the blend

Why: on real curves a sigmoid fitted to a prefix that has not bent is often worse than a straight
line, and a line is badly wrong once the curve bends. Averaging forecasts that fail in different
ways beats each of them. Which to trust more can be read from the prefix: refit every candidate
on rolling origins inside it (its first 60%, 70% and 80% of points) and score each on the later
points of the prefix. That backtest is only as informative as the curve is clean, so the weights
use each candidate's excess error over the point noise (its squared bias; the noise variance is
estimated from successive differences of the prefix): weight ~ excess ** -WEIGHT_POWER = 1 / bias.
On a clean curve a sigmoid that tracks the points to the noise takes nearly all the weight; on a
noisy one the excesses are alike and the weights near equal.

Candidates (x = ln C):
- sigmoid: the least-squares Eq. 1 sigmoid (the fit's own A, B, C_mid; with a history prior its
  MAP fit, see prior.py);
- paper: the paper's grid fit (paper.py), which holds C_mid within 10x the data and A >= R0 on a
  rising curve, so it extrapolates more tamely from a short prefix;
- trend: a straight line in ln C with the slope of the latest half of the points, anchored at
  the recent level (the mean of the latest max(3, n/5) points) at the last fitted compute,
  clipped to the score range.

Measured on the 24 development curves (benchmarks/bench_forecast.py, README "Measured here"),
against the previous default (these plus a flat recent level, weights mse ** -2): better on 14
curves and worse on 3 at the 25% prefix, 15 and 7 at 50%; mean log(rmse / the paper's rmse)
-0.30 and -0.11 (was -0.19 and -0.08). Variants measured and rejected (every curve, both
prefixes; medians, mean log-ratios, worst cases; and the tests' synthetic and demo curves):
- raw mse ** -p weights: p = 0 (equal) is as good on the real curves but blind on clean ones
  (the demo run's 40% backtest misses its 0.03 target, a saturated run is forecast to gain past
  its ceiling); p = 1, 2 are worse on the real curves. Excess weights with power 0.25 or 0.35
  fail the clean cases too, with power 0.75 or 1 the real ones (a verl replicate 0.08-0.11 worse
  than the paper's fit at 25%);
- origins at 40-60% of the points; horizon-matched origins (fit on the first 1/4, 1/3 or 1/2 of
  the prefix's compute, so the inner horizon ratio equals the real one): worse;
- keeping only candidates within 1.5-9x the best inner mse; shrinking weights part-way to equal;
  weights exp(-(mse - best) / (T x noise variance)), T = 1, 3, 10;
- a flat recent level (last 1, 3, n/10 or n/5 points) as a candidate (it drags rising curves
  down), or as a fallback when it backtests 1-4x better than the blend;
- a half-slope trend, a regression line, a line in linear C as extra candidates; the trend's
  slope from the latest third or quarter of the points; the trend capped at the sigmoids'
  ceilings; sigmoids fitted with binomial weights 1 / (p (1 - p) + eps);
- a stretched exponential (stretched.py) as a fourth candidate: the real curves approach their
  ceilings more slowly than it does, so the median excess error over the noise rose from 0.1241
  to 0.1262 at 25% and from 0.0215 to 0.0297 at 50% (2026-11-26). It serves the ceiling check
  (ceiling.py) instead.
A fit that detects no gain still forecasts its flat level (sigmoid.py).

The blend applies at and beyond the last fitted compute (`origin`); below it `predict` is the fit.
It continues from the fit: at the origin it is lifted onto the fit's value (the candidates mixed
there differ from it: the trend starts at the recent mean of the points, the paper's sigmoid
elsewhere), the lift fading over ANCHOR_HORIZONS of the mean inner horizon, and its extra band
width grows from 0 at the origin, so neither the line nor the band jumps where the data end.
Beyond LINE_REACH (10x the origin) the trend hands its weight over to the sigmoids, so far
forecasts saturate at the sigmoids' ceilings instead of following a line in ln C forever.
Band: replicate curves (the fit's bootstrap spread around each sigmoid candidate, the level and
the slope drawn from their standard errors) mixed with the weights, widened in quadrature by the
blend's own rolling-origin error, grown with the horizon as sqrt(horizon / mean inner horizon)
(so it is 0 at the origin and the blend's rmse one mean inner horizon later).
Past the backtest's reach (`reach`, below) the weights were never measured: there each replicate
moves to one candidate, drawn with its weight (`mixing`, over one mean inner horizon), so the band
spans the candidates instead of narrowing around their weighted mean, and SigmoidFit.band joins
that mixture's band to the one above (never narrower). On 200 sigmoid runs cut at 50k GPU-hours
(4.6x C_mid) the 10x prediction band held a new point 87% of the time before (every miss below:
the trend kept ~40% weight) and 97% after, the mean band the true curve 48% and 96%
(benchmarks/bench_ceiling.py --coverage 200; 95% and 95% on 60 other seeds); bench_forecast.py's
held-out medians and median coverage are unchanged, and no curve's coverage fell.
With fewer than MIN_POINTS_BLEND fitted points there is no inner backtest and the forecast is the
sigmoid alone; a fit that detects no gain forecasts its flat level (sigmoid.py).
How far the rolling-origin backtest reached (`Blend.reach`, a multiple of the earliest origin's
compute) is what `Horizon` (SigmoidFit.horizon) states beside a forecast past the data: "10x the
compute seen; backtested only to 1.8x". Past the data the band also spans a second curve family
where the data cannot tell them apart (far.py, families.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from workbench.scaling.fit import numerics

# Candidates: sigmoids fitted by least squares ("sigmoid") or the paper's grid ("paper"), and lines
# in ln C through the recent level with the recent slope times a damping factor (1 = the trend;
# Blend stores the factor, so blends saved with other lines still read back).
SIGMOIDS = ("sigmoid", "paper")
LINES = {"trend": 1.0}
ORIGINS = (0.6, 0.7, 0.8)  # rolling origins, as shares of the prefix's points
WEIGHT_POWER = 0.5  # weights proportional to (rolling-origin mse - noise variance) ** -WEIGHT_POWER: 1 / bias
EXCESS_FLOOR = 0.01  # excess mse below this share of the noise variance counts as this (no division by 0)
LINE_REACH = math.log(10.0)  # lines are trusted to 10x the last fitted compute; beyond, the sigmoids take over
MIN_POINTS_BLEND = 10  # fewest fitted points for a rolling-origin backtest (4 to fit, 2 to score)
# The forecast continues from the fit: at the origin the blend is lifted onto the fit's value,
# the lift fading linearly to 0 over this many mean inner horizons (ln C). Measured on the
# development curves: 0.25 leaves the 25% median as it was and the 50% one 0.0001 better; 0.5, 1
# and 2 horizons make one or the other worse (50% excess-error gain 29.6%, 28.9%, 28.9%).
ANCHOR_HORIZONS = 0.25

Predictor = Callable[[np.ndarray], np.ndarray]


def _level_k(n: int) -> int:
    return max(3, math.ceil(n / 5))


def _flat(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Recent level and its standard error."""
    k = min(len(y), _level_k(len(y)))
    tail = y[-k:]
    return float(tail.mean()), float(tail.std(ddof=1) / math.sqrt(k)) if k > 1 else 0.0


def _trend(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Slope in ln C of the latest half of the points, its standard error, and the residual sd."""
    h = max(4, len(y) // 2)
    xs, ys = x[-h:], y[-h:]
    xc = xs - xs.mean()
    sxx = float(xc @ xc)
    if sxx <= 0:
        return 0.0, 0.0, float(ys.std())
    b = float(xc @ (ys - ys.mean()) / sxx)
    r = ys - ys.mean() - b * xc
    s = float(math.sqrt(r @ r / max(h - 2, 1)))
    return b, s / math.sqrt(sxx), s


def _noise_var(y: np.ndarray) -> float:
    """Point-noise variance from successive differences (a smooth curve cancels out of them)."""
    return float(np.mean(np.diff(y) ** 2) / 2) if len(y) > 1 else 0.0


def _weights(mse: dict[str, float], noise_var: float) -> dict[str, float]:
    """Weights from each candidate's excess rolling-origin mse over the point noise (its squared
    bias): ~ excess ** -WEIGHT_POWER. On a clean curve the backtest is decisive (a sigmoid that
    tracks the points to the noise takes most weight); on a noisy one the excesses are alike and
    the weights near equal, as the measurements favour there."""
    floor = max(EXCESS_FLOOR * noise_var, 1e-12)
    inv = {k: max(v - noise_var, floor) ** -WEIGHT_POWER for k, v in mse.items()}
    tot = sum(inv.values())
    return {k: v / tot for k, v in inv.items()}


def _sigmoid(kind: str, x: np.ndarray, y: np.ndarray, r0: float, prior: Any = None) -> np.ndarray:
    if prior is not None and kind == "sigmoid":
        from workbench.scaling.fit.prior import map_theta

        return map_theta(x, y, r0, prior)[0]
    if kind == "paper":
        from workbench.scaling.fit.paper import fit_paper

        return fit_paper(x, y, r0)[0]
    theta, _, _ = numerics.fit_global(x, y, r0, numerics.Bounds.for_data(x), None, n_m=48, n_b=32, n_starts=3)
    return theta


def _candidates(x: np.ndarray, y: np.ndarray, r0: float, lo: float, hi: float, prior: Any = None) -> dict[str, Predictor]:
    out: dict[str, Predictor] = {}
    for k in SIGMOIDS:
        th = _sigmoid(k, x, y, r0, prior)
        out[k] = lambda xn, th=th: numerics.predict(th[None, :], r0, xn[None, :])[0]
    level, _ = _flat(x, y)
    slope, _, _ = _trend(x, y)
    x0 = float(x[-1])
    for k, damp in LINES.items():
        out[k] = lambda xn, d=damp: np.clip(level + d * slope * (xn - x0), lo, hi)
    return out


@dataclass(frozen=True)
class Blend:
    """The forecast beyond `origin`: candidates mixed by their rolling-origin backtest."""

    origin: float  # last fitted compute; the blend applies at C >= origin
    weights: dict[str, float]  # per candidate, up to LINE_REACH past the origin (see weights_at); sum 1
    inner_rmse: dict[str, float]  # each candidate's rolling-origin rmse inside the prefix
    blend_rmse: float  # the blend's own rolling-origin rmse (sets the band's model error)
    horizon: float  # mean rolling-origin horizon in ln C
    R0: float
    sigmoids: dict[str, tuple[float, float, float]]  # sigmoid candidates' (A, B, C_mid), kept even when the fit reports no gain
    lines: dict[str, float]  # line candidates' slope damping (0 = flat)
    level: float
    level_se: float
    slope: float  # per unit ln C
    slope_se: float
    noise_sd: float  # point noise around the recent trend
    lo: float = 0.0  # score range the trend is clipped to
    hi: float = 1.0
    why: str = ""
    reach: float = math.nan  # the farthest the rolling-origin backtest scored, as a multiple of its origin's compute (nan: saved before it was kept)

    def covers(self, c: np.ndarray) -> np.ndarray:
        """Where the blend applies: at and beyond the origin (within rounding: origin is exp(ln C))."""
        return np.asarray(c, dtype=float) >= self.origin * (1 - 1e-9)

    def parts(self, c: np.ndarray) -> dict[str, np.ndarray]:
        x = np.log(np.maximum(c, 1e-300))
        out = {}
        for k, (A, B, C_mid) in self.sigmoids.items():
            with np.errstate(over="ignore"):
                out[k] = self.R0 + (A - self.R0) / (1 + np.exp(-B * (x - math.log(C_mid))))
        for k, d in self.lines.items():
            out[k] = np.clip(self.level + d * self.slope * (x - math.log(self.origin)), self.lo, self.hi)
        return out

    def weights_at(self, c: np.ndarray) -> dict[str, np.ndarray]:
        """Weights at compute c: `weights` up to LINE_REACH past the origin; beyond it the
        lines' share shrinks as LINE_REACH / horizon and passes to the sigmoids (a straight line in
        ln C is not a forecast for 1000x the compute, while the sigmoid saturates at A)."""
        h = np.log(np.maximum(np.asarray(c, dtype=float), 1e-300)) - math.log(self.origin)
        keep = np.minimum(1.0, LINE_REACH / np.maximum(h, 1e-300))
        line_w = sum(self.weights[k] for k in self.lines)
        sig_w = sum(self.weights[k] for k in self.sigmoids)
        out = {}
        for k, w in self.weights.items():
            if k in self.lines:
                out[k] = w * keep
            else:
                share = w / sig_w if sig_w > 0 else 1.0 / len(self.sigmoids)
                out[k] = w + share * line_w * (1 - keep)
        return out

    def _raw(self, c: np.ndarray) -> np.ndarray:
        p, w = self.parts(c), self.weights_at(c)
        return sum(w[k] * p[k] for k in w)

    def anchor_shift(self, c: np.ndarray) -> np.ndarray:
        """What lifts the blend onto the fit at the origin: (fit - blend there) fading linearly to 0
        over ANCHOR_HORIZONS mean inner horizons, so the forecast continues from the fit."""
        o = np.array([self.origin])
        gap = float(self.parts(o)["sigmoid"][0] - self._raw(o)[0])
        h = np.maximum(np.log(np.maximum(c, 1e-300)) - math.log(self.origin), 0.0)
        return gap * np.maximum(0.0, 1.0 - h / max(ANCHOR_HORIZONS * self.horizon, 1e-9))

    def predict(self, c: np.ndarray) -> np.ndarray:
        c = np.asarray(c, dtype=float)
        return self._raw(c) + self.anchor_shift(c)

    def _error(self, noise: bool) -> float:
        """The blend's rolling-origin rmse with point noise (noise=True) or without it (the true curve)."""
        return self.blend_rmse if noise else math.sqrt(max(self.blend_rmse**2 - self.noise_sd**2, 0.0))

    def _grow(self, c: np.ndarray, cap: float = math.inf) -> np.ndarray:
        """The horizon h (ln C past the origin, at most `cap`) in mean inner horizons, as an error
        grows with it: from 0 at the origin to 1 over the anchor's fade (ANCHOR_HORIZONS), then sqrt(h)."""
        h = np.minimum(np.maximum(np.log(np.maximum(c, 1e-300)) - math.log(self.origin), 0.0), cap) / max(self.horizon, 1e-9)
        return np.sqrt(np.maximum(np.minimum(1.0, h / ANCHOR_HORIZONS), h))

    def model_sd(self, c: np.ndarray, noise: bool) -> np.ndarray:
        """Error of the blend at c from its rolling-origin rmse, with point noise (noise=True, for a
        prediction band) or without (the noise variance taken out, for a band on the true curve),
        grown with the horizon h (in mean inner horizons): from 0 at the origin to its full size
        over the anchor's fade (ANCHOR_HORIZONS), so a band widened by it continues from the fit's
        band, then as sqrt(h) beyond one mean inner horizon."""
        return self._error(noise) * self._grow(c)

    def mixture_sd(self, c: np.ndarray, noise: bool) -> np.ndarray:
        """The blend's error still added to the mixture's replicates (`sample`) past the backtest's
        reach: as model_sd up to the reach, handing over to the mixture (1 - mixing) past it."""
        cap = math.log(self.reach) if math.isfinite(self.reach) and self.reach > 1 else math.inf
        return self._error(noise) * self._grow(c, cap) * (1.0 - self.mixing(c))

    def mixing(self, c: np.ndarray) -> np.ndarray:
        """How far the replicates at c are drawn from one candidate each rather than from the
        weighted mean of all: 0 within the reach of the rolling-origin backtest (where the weights
        were measured), rising linearly in ln C to 1 over one mean inner horizon past it (0
        everywhere for a blend saved before its reach was kept)."""
        if not math.isfinite(self.reach) or self.reach <= 1:
            return np.zeros(np.shape(c))
        h = np.log(np.maximum(np.asarray(c, dtype=float), 1e-300)) - math.log(self.origin)
        return np.clip((h - math.log(self.reach)) / max(self.horizon, 1e-9), 0.0, 1.0)

    def sample(self, c: np.ndarray, sig_curves: np.ndarray, rng: np.random.Generator, mixture: bool = True) -> np.ndarray:
        """(n, len(c)) blended replicate curves. sig_curves: the fit's bootstrap curves at c, which
        stand for every sigmoid candidate's spread around its own curve. Within the backtest's reach
        each replicate is the weighted mean of the candidates' replicates; past it (`mixing`) a
        replicate moves to one candidate's, drawn with its weight: a mixture, so the band spans the
        candidates where the backtest no longer tells which one to trust, and its mean (the point
        forecast) stays the weighted mean. mixture=False: the weighted means everywhere (the band of before)."""
        n = len(sig_curves)
        x = np.log(np.maximum(c, 1e-300))[None, :]
        parts = self.parts(c)
        spread = sig_curves - np.median(sig_curves, axis=0, keepdims=True)
        lv = self.level + self.level_se * rng.standard_normal((n, 1))
        sl = self.slope + self.slope_se * rng.standard_normal((n, 1))
        weights = self.weights_at(c)
        each = {k: (parts[k][None, :] + spread) if k in self.sigmoids
                else np.clip(lv + self.lines[k] * sl * (x - math.log(self.origin)), self.lo, self.hi) for k in weights}
        out = sum(w[None, :] * each[k] for k, w in weights.items())
        mix = self.mixing(c) if mixture else np.zeros(len(c))
        if mix.any():
            names = list(weights)
            cum = np.cumsum([weights[k] for k in names], axis=0)  # (candidates, len(c))
            u = rng.random((n, 1, 1))  # one draw per replicate: its candidate, the same at every c
            pick = np.minimum((u > cum[None, :, :]).sum(1), len(names) - 1)  # (n, len(c))
            one = np.choose(pick, [each[k] for k in names])
            out = out + mix[None, :] * (one - out)
        return out + self.anchor_shift(c)[None, :]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sigmoids"] = {k: list(v) for k, v in self.sigmoids.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Blend":
        kw = {k: (float(v) if isinstance(v, (int, float, str)) and k != "why" else v) for k, v in d.items()}
        kw["sigmoids"] = {k: tuple(float(x) for x in v) for k, v in d["sigmoids"].items()}
        return cls(**kw)


def fit_blend(x: np.ndarray, y: np.ndarray, r0: float, sigmoid_theta: np.ndarray, lo: float = 0.0, hi: float = 1.0, prior: Any = None) -> Blend | None:
    """Weigh the candidates on rolling origins inside (x = ln C, y), sorted by x. None when the
    prefix is too short for a backtest (then the sigmoid alone is the forecast). With a history
    prior (prior.SigmoidPrior) the "sigmoid" candidate is its MAP fit, on every origin too."""
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    n = len(y)
    if n < MIN_POINTS_BLEND:
        return None
    names = SIGMOIDS + tuple(LINES)
    errs: dict[str, list[np.ndarray]] = {k: [] for k in names}
    horizons, reach = [], 0.0
    for o in ORIGINS:
        m = int(round(o * n))
        if m < 4 or n - m < 2:
            continue
        preds = _candidates(x[:m], y[:m], r0, lo, hi, prior)
        for k in names:
            errs[k].append(preds[k](x[m:]) - y[m:])
        horizons.append(float(np.mean(x[m:] - x[m - 1])))
        reach = max(reach, float(x[-1] - x[m - 1]))
    mse = {k: float(np.mean(np.concatenate(v) ** 2)) for k, v in errs.items()}
    noise_var = _noise_var(y)
    weights = _weights(mse, noise_var)
    mixed = sum(weights[k] * np.concatenate(errs[k]) for k in names)
    level, level_se = _flat(x, y)
    slope, slope_se, noise = _trend(x, y)
    sigmoids = {}
    for k in SIGMOIDS:
        A, m_, lb = (float(v) for v in (sigmoid_theta if k == "sigmoid" else _sigmoid(k, x, y, r0, prior)))
        sigmoids[k] = (A, math.exp(lb), math.exp(m_))
    rmse = {k: math.sqrt(v) for k, v in mse.items()}
    blend_rmse = float(math.sqrt(np.mean(mixed**2)))
    ranked = sorted(names, key=lambda k: -weights[k])
    pct = "/".join(f"{o * 100:.0f}" for o in ORIGINS)
    why = (f"rolling-origin backtest inside the prefix (refit at {pct}% of its points, scored on the rest): rmse "
           + ", ".join(f"{k} {rmse[k]:.4f}" for k in ranked) + f", blend {blend_rmse:.4f} (sets the band's model error); weights "
           + ", ".join(f"{k} {weights[k]:.2f}" for k in ranked) + f" (1 / the error beyond the point noise, sd {math.sqrt(noise_var):.4f})")
    return Blend(
        origin=float(math.exp(x[-1])), weights=weights, inner_rmse=rmse, blend_rmse=blend_rmse,
        horizon=float(np.mean(horizons)), R0=float(r0), sigmoids=sigmoids, lines=dict(LINES), level=level, level_se=level_se,
        slope=slope, slope_se=slope_se, noise_sd=noise, lo=lo, hi=hi, why=why, reach=float(math.exp(reach)),
    )


@dataclass(frozen=True)
class Horizon:
    """How far past the data a forecast reaches, against how far its backtest reached (SigmoidFit.horizon)."""

    factor: float  # the forecast's compute / the last fitted compute
    backed_to: float  # Blend.reach: the farthest multiple the rolling-origin backtest scored (nan: no backtest)
    method: str = "auto"  # the fit's forecast method (says why there is no backtest)

    @property
    def backed(self) -> bool:
        """Inside the range the forecast's backtest covered."""
        return self.factor <= self.backed_to

    def line(self) -> str:
        """E.g. "10x the compute seen; backtested only to 1.7x: past that the forecast is not backed by one"."""
        if self.factor <= 1:
            return "inside the compute seen"
        head = f"{self.factor:.3g}x the compute seen"
        if not math.isfinite(self.backed_to):
            why = (f"fewer than {MIN_POINTS_BLEND} fitted points" if self.method == "auto"
                   else f"method {self.method!r} has no rolling-origin backtest")
            return f"{head}; not backtested ({why})"
        if self.backed:
            return f"{head}, within the {self.backed_to:.2g}x its backtest reached"
        return f"{head}; backtested only to {self.backed_to:.2g}x: past that the forecast is not backed by one"
