"""`SigmoidFit`: a fitted compute-performance curve with its uncertainty, and what it answers.

R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)   (ScaleRL Eq. 1; R0 is fixed, not fitted)

The intervals come from bootstrap replicates kept in `samples` (columns A, B, C_mid), so every
derived quantity (a forecast, a band, the compute to reach a target) gets an interval by pushing
each replicate through the same formula and taking percentiles.

Forecast: with method "auto" (fit_sigmoid's default) `forecast` holds a Blend (forecast/blend.py):
at and beyond the last fitted compute, predict / band / sample_curves use it instead of the
sigmoid alone; `forecast_used` says which forecast and why. compute_to_reach stays the sigmoid's
(A, B, C_mid are what recipes are compared by).

Past the data (far.py, mixed in): where a stretched exponential fits as well with a plateau
outside A's interval (`families`), band and compute_to_reach past the last fitted compute span
what both allow, and where A is not identified the band's lower edge stays at its level at the
last fitted compute; `horizon(c)` says how far past the data c is, against the backtest's reach.

No gain: when the data show no rise (see sigmoid.py), `no_gain` is True and the fit is a flat
forecast. A is then the level (with its bootstrap interval in A_ci and the level replicates in
samples[:, 0]), B and C_mid are NaN (not identified), converged is False and `reason` starts with
"no gain detected". predict, band, compute_to_reach and the decision/compare/chart functions all
use the flat level.

    fit.predict([1e4, 5e4])                      # array of fitted scores
    lo, hi = fit.band(c, level=0.95, kind="mean") # or kind="prediction" (adds point noise)
    r = fit.compute_to_reach(0.6)                 # Reach(compute, lo, hi, reachable, p_reachable)
    fit.to_json(); SigmoidFit.from_json(text)
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, Mapping

import numpy as np
from scipy.special import expit
from scipy.stats import norm

from workbench.errors import UserError, as_number
from workbench.scaling.forecast.far import PastTheData
from workbench.scaling.forecast.blend import MIN_POINTS_BLEND, Blend

Interval = tuple[float, float]


@dataclass(frozen=True)
class Reach:
    """Compute needed to reach `target`.

    compute is the point estimate: 0.0 when R0 already meets the target, math.inf when the target
    is at or beyond the fitted asymptote A (`reachable` is then False). (lo, hi) is the interval
    over bootstrap replicates; hi = inf means that, at this confidence, the target may never be
    reached. p_reachable is the fraction of replicates whose asymptote passes the target.
    """

    target: float
    compute: float
    lo: float
    hi: float
    reachable: bool
    p_reachable: float
    note: str = ""  # why the target is out of reach, when the fit says more than `reachable` does


def _ci(values: np.ndarray, level: float) -> Interval:
    """Percentile interval by order statistics (robust to +inf entries)."""
    v = np.sort(np.asarray(values, dtype=float))
    if len(v) == 0:
        return (math.nan, math.nan)
    a = (1 - level) / 2
    i_lo = int(math.floor(a * (len(v) - 1)))
    i_hi = int(math.ceil((1 - a) * (len(v) - 1)))
    return (float(v[i_lo]), float(v[i_hi]))


def _curve(c: np.ndarray, r0: float, a: Any, b: Any, cmid: Any) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return r0 + (a - r0) * expit(b * (np.log(c) - np.log(cmid)))


@dataclass(eq=False)  # fields hold arrays: compare fits by their to_dict()
class SigmoidFit(PastTheData):
    """A fitted sigmoid. A, B, C_mid are least-squares estimates; *_ci are bootstrap intervals at `level`."""

    A: float
    B: float
    C_mid: float
    R0: float
    A_ci: Interval
    B_ci: Interval
    C_mid_ci: Interval
    level: float
    rmse: float  # root mean square residual over the fitted points
    r2: float  # 1 - SSE / SST over the fitted points
    n: int  # number of fitted points
    sigma: float  # residual standard deviation, sqrt(SSE / (n - p))
    converged: bool
    reason: str = ""  # why not converged, or why no sigmoid was kept ("no gain detected: ..."); empty when converged
    warnings: list[str] = field(default_factory=list)
    r0_source: str = "measured"  # "measured" (score at compute 0), "given" or "first"
    fit_from: float | None = None
    fit_until: float | None = None
    fixed_A: bool = False  # A was held fixed (compare() refits at a shared A)
    autocorr: float = 0.0  # lag-1 autocorrelation of the residuals
    block: int = 1  # bootstrap block length used
    seed: int = 0
    compute: np.ndarray = field(default_factory=lambda: np.zeros(0))  # every point given, in order
    score: np.ndarray = field(default_factory=lambda: np.zeros(0))
    used: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # which points were fitted
    run: np.ndarray = field(default_factory=lambda: np.zeros(0, int))  # run index of each point
    run_names: list[str] = field(default_factory=lambda: ["curve"])
    samples: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))  # bootstrap (A, B, C_mid)
    no_gain: bool = False  # the data show no rise: a flat forecast at the level A (B, C_mid are NaN)
    gain_p: float = math.nan  # p-value of the gain test (nan when A was held fixed)
    method: str = "sigmoid"  # "auto" (sigmoid / flat / trend weighted by backtest), "sigmoid" or "paper"
    forecast: Blend | None = None  # method="auto": the forecast used at and beyond the last fitted compute
    prior_note: str = ""  # with a history prior: the prior, and how far it moved A, B, C_mid
    # A no-gain fit whose latest points rise beyond the noise (no_gain.rising_tail): origin
    # (last fitted compute), level (the rising points' mean), span (their ln C), z, k, rise.
    # Beyond the origin the band's upper edge opens to 1 (see _takeoff_edge); None otherwise.
    takeoff: dict[str, float] | None = None
    # ceiling.ceiling_check(fit).to_dict(), set by ceiling.attach_ceiling_check (the run report,
    # `workbench fit`): the sigmoid's A beside a stretched exponential's plateau; its "line" is
    # printed by summary(). None: not checked.
    ceiling_check: dict[str, Any] | None = None

    @property
    def forecast_used(self) -> str:
        """Which forecast `predict` and `band` use beyond the data, and why (one line)."""
        fam = self.disagreeing
        both = ("; " + fam.line() if fam else "") + ("; A is not identified, so past the data the band's lower edge stays at "
                                                      "its level at the last fitted compute" if self.unidentified else "")
        if self.forecast is not None:
            w = self.forecast.weights
            mix = ", ".join(f"{k} {w[k]:.0%}" for k in sorted(w, key=lambda k: -w[k]))
            return f"blend ({mix}): {self.forecast.why}" + both
        if self.method == "paper":
            return "sigmoid (the paper's procedure: A x C_mid grid, B fitted, sigmoid always kept)"
        if self.no_gain and self.takeoff:
            t = self.takeoff
            return (f"flat level (no gain detected), but the last {int(t['k'])} fitted points rise {t['rise']:+.3f} over the "
                    f"earlier level ({t['z']:.1f} noise se): a take-off may be starting, and how high it goes the flat level "
                    "cannot tell: the band's upper edge opens to 1 beyond the data")
        if self.no_gain:
            return "flat level (no gain detected)"
        if self.method == "auto":
            return f"sigmoid alone (fewer than {MIN_POINTS_BLEND} fitted points: too few for a rolling-origin backtest)" + both
        return "sigmoid" + both

    # ---------------------------------------------------------------- predictions
    def predict(self, c: Any) -> Any:
        """Fitted score at compute c (scalar -> float, array -> array). C = 0 gives R0."""
        arr = self._compute_arg(c)
        if self.no_gain:
            out = np.where(arr > 0, self.A, self.R0)
        else:
            out = _curve(arr, self.R0, self.A, self.B, self.C_mid)
        if self.forecast is not None:
            out = np.where(self.forecast.covers(arr), self.forecast.predict(arr), out)
        return float(out) if np.ndim(c) == 0 else out

    def sample_curves(self, c: Any, mixture: bool = True) -> np.ndarray:
        """(n_samples, len(c)) curves of the bootstrap replicates at compute c (flat ones when no_gain); past
        the blend's backtest reach a mixture of its candidates (Blend.sample), unless mixture=False."""
        arr = np.atleast_1d(self._compute_arg(c))
        s = self.samples
        if self.no_gain:
            out = np.where(arr[None, :] > 0, s[:, :1], self.R0)
        else:
            out = _curve(arr[None, :], self.R0, s[:, :1], s[:, 1:2], s[:, 2:3])
        fc = self.forecast
        if fc is not None and len(s):
            # the sigmoid candidates' spread: the bootstrap curves' (none when the fit kept no sigmoid)
            sig = out if not self.no_gain else np.zeros_like(out)
            mixed = fc.sample(arr, sig, np.random.default_rng([self.seed, 2]), mixture)
            out = np.where(fc.covers(arr)[None, :], mixed, out)
        return out

    def band(self, c: Any, level: float = 0.95, kind: Literal["mean", "prediction"] = "mean") -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) arrays of a pointwise band at compute c.

        kind="mean": where the true curve lies (percentiles of the bootstrap curves).
        kind="prediction": where a new measured point lies: the mean band widened in quadrature
        by the residual noise, z * sigma. With a blended forecast (`forecast`, method "auto"), at
        and beyond its origin the replicates are the blend's, and both bands are widened by the
        blend's rolling-origin error (Blend.model_sd), and past its backtest's reach they also span
        the mixture of its candidates (`_mixture_band`). Past the data both also span `far_band`
        (far.py: a second family, an unidentified A). Both are clipped to [0, 1].
        """
        if kind not in ("mean", "prediction"):
            raise UserError(f"band kind must be 'mean' or 'prediction', not {kind!r}")
        if not 0 < level < 1:
            raise UserError(f"level must be in (0, 1), got {level}")
        arr = np.atleast_1d(self._compute_arg(c))
        if len(self.samples) == 0:
            raise UserError("this fit has no bootstrap samples (n_boot=0): no band available")
        curves = self.sample_curves(arr, mixture=False)
        a = (1 - level) / 2
        lo, hi = np.quantile(curves, [a, 1 - a], axis=0)
        z = norm.ppf(1 - a)
        if kind == "prediction" or self.forecast is not None:
            mid = np.asarray(self.predict(arr))
            extra = np.full(arr.shape, self.sigma if kind == "prediction" else 0.0)
            if self.forecast is not None:
                # beyond the data, the blend's own rolling-origin error (grown with the horizon from 0
                # at the origin, so the band continues from the fit's) is what the replicates do not
                # know: widen by it (a prediction band: its error with point noise, on top of sigma)
                after = self.forecast.covers(arr)
                extra = np.where(after, np.hypot(extra, self.forecast.model_sd(arr, noise=kind == "prediction")), extra)
            widen = extra > 0
            lo = np.where(widen, mid - np.hypot(np.maximum(mid - lo, 0), z * extra), lo)
            hi = np.where(widen, mid + np.hypot(np.maximum(hi - mid, 0), z * extra), hi)
            if self.forecast is not None:
                lo, hi = self._mixture_band(arr, kind == "prediction", a, lo, hi)
        if self.no_gain and self.takeoff:
            hi = np.maximum(hi, self._takeoff_edge(arr, z if kind == "prediction" else 0.0))
        far = self.far_band(arr, level, kind)
        if far is not None:  # past the data: what the second family or an unidentified A allows too (far.py)
            lo, hi = np.fmin(lo, far.lo), np.fmax(hi, far.hi)
        return np.clip(lo, 0, 1), np.clip(hi, 0, 1)

    def _mixture_band(self, c: np.ndarray, prediction: bool, a: float, lo: np.ndarray,
                      hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Past the backtest's reach the band (lo, hi) also spans the candidates' mixture (Blend.sample):
        replicates each spread by N(0, extra^2) draws (sigma for new points, the blend's error not yet
        handed to the mixture); widening around the mean would also stretch the gap between humps."""
        fc = self.forecast
        mix = fc.mixing(c)
        if not mix.any():
            return lo, hi
        curves = self.sample_curves(c)[:, None, :]
        noise = np.random.default_rng([self.seed, 3]).standard_normal((len(self.samples), 20, len(c)))
        m_lo, m_hi = np.full(len(c), np.inf), np.full(len(c), -np.inf)
        for new_points in sorted({False, prediction}):  # a prediction band holds the mean band (noise may pull a quantile in)
            extra = np.hypot(self.sigma if new_points else 0.0, fc.mixture_sd(c, noise=new_points))
            q_lo, q_hi = np.quantile((curves + extra[None, None, :] * noise).reshape(-1, len(c)), [a, 1 - a], axis=0)
            m_lo, m_hi = np.fmin(m_lo, q_lo), np.fmax(m_hi, q_hi)
        return np.where(mix > 0, np.fmin(lo, m_lo), lo), np.where(mix > 0, np.fmax(hi, m_hi), hi)

    def _takeoff_edge(self, c: np.ndarray, z: float) -> np.ndarray:
        """The upper edge at c of a take-off that may be starting: from the rising points' level
        (plus z x sigma for new points) at the last fitted compute, opening linearly in ln C to 1
        over one more span of the rising points (the data cannot tell how high it goes)."""
        t = self.takeoff or {}
        h = np.maximum(np.log(np.maximum(c, 1e-300)) - math.log(t["origin"]), 0.0)
        start = t["level"] + z * self.sigma
        edge = start + (1.0 - start) * np.minimum(1.0, h / t["span"])
        return np.where(c >= t["origin"] * (1 - 1e-9), edge, -np.inf)

    def compute_to_reach(self, target: float, level: float | None = None) -> Reach:
        """Compute at which the fitted curve reaches `target`, with a bootstrap interval (see Reach)."""
        target = as_number("target", target)
        if not 0 <= target <= 1:
            raise UserError(f"target must be a score in [0, 1], got {target}")
        level = self.level if level is None else level
        if self.no_gain:
            return self._reach_flat(float(target), level)
        point = _reach(target, self.R0, np.array([self.A]), np.array([self.B]), np.array([self.C_mid]))[0]
        if len(self.samples):
            each = _reach(target, self.R0, self.samples[:, 0], self.samples[:, 1], self.samples[:, 2])
            lo, hi = _ci(each, level)
            p = float(np.mean(np.isfinite(each)))
        else:
            lo = hi = math.nan
            p = float(np.isfinite(point))
        note = self._reach_note(target, point)
        fam = self.disagreeing
        if fam is not None and point > self.origin and len(self.samples):  # a target past the data: both families' computes
            f_lo, f_hi = fam.reach(float(target), level)
            lo, hi = min(lo, f_lo), max(hi, f_hi)
            note = "; ".join(x for x in (note, fam.reach_note(float(target), f_hi, self.predict)) if x)
        return Reach(float(target), float(point), lo, hi, bool(np.isfinite(point)), p, note)

    def _reach_note(self, target: float, point: float) -> str:
        """Reach is read off the sigmoid (A, B, C_mid); say so when the blended forecast (predict)
        passes a target the sigmoid never reaches, so the two answers do not look contradictory."""
        if np.isfinite(point) or self.forecast is None:
            return ""
        grid = self.forecast.origin * np.logspace(0, 3, 241)
        hit = np.nonzero(np.asarray(self.predict(grid)) >= target)[0]
        if not len(hit):
            return ""
        return (f"the sigmoid's ceiling A = {self.A:.4f} stays below {target:g}, but the blended forecast (predict) "
                f"passes it near compute {grid[hit[0]]:.4g}, carried by its log-compute trend; trust A for the ceiling")

    def _reach_flat(self, target: float, level: float) -> Reach:
        # flat forecast: met now (at the first fitted compute) if the level meets it, else never
        now = float(self.compute[self.used].min()) if self.used.any() else 0.0

        def at(v: Any) -> Any:
            return np.where(self.R0 >= target, 0.0, np.where(v >= target, now, np.inf))

        point = float(at(np.array(self.A)))
        lo = hi = math.nan
        p = float(np.isfinite(point))
        if len(self.samples):
            each = at(self.samples[:, 0])
            lo, hi = _ci(each, level)
            p = float(np.mean(np.isfinite(each)))
        note = "" if np.isfinite(point) else f"no gain detected: the forecast is flat at {self.A:.4f}, so {target:g} is not reached at any compute"
        return Reach(target, point, lo, hi, bool(np.isfinite(point)), p, note)

    @property
    def tail_coefficient(self) -> float:
        """The coefficient D of the power-law tail the sigmoid has far past C_mid: R ~ A - D / C^B,
        D = (A - R0) C_mid^B."""
        return (self.A - self.R0) * self.C_mid**self.B

    @property
    def rising(self) -> bool:
        return not self.no_gain and self.A >= self.R0

    @property
    def residuals(self) -> np.ndarray:
        """Measured minus fitted score on the fitted points."""
        return self.score[self.used] - self.predict(self.compute[self.used])

    def _compute_arg(self, c: Any) -> np.ndarray:
        try:
            arr = np.asarray(c, dtype=float)
        except (TypeError, ValueError):
            raise UserError(f"compute to predict at must be a number or an array of numbers, got {c!r}") from None
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise UserError("compute to predict at must be finite and >= 0")
        return arr

    # ---------------------------------------------------------------- text & JSON
    def summary(self) -> str:
        pct = f"{self.level:.0%}"

        def row(name: str, v: float, ci: Interval, fmt: str) -> str:
            if not len(self.samples):  # fitted with n_boot=0: no replicates, no interval
                return f"  {name:<6}= {v:{fmt}}   (no interval: fitted without bootstrap)"
            return f"  {name:<6}= {v:{fmt}}   {pct} CI [{ci[0]:{fmt}}, {ci[1]:{fmt}}]"

        if self.no_gain:
            lines = [
                f"flat fit on {self.n} points: NO GAIN DETECTED (R0 = {self.R0:.4g}, {self.r0_source})",
                row("A", self.A, self.A_ci, ".4f") + "   (the flat level forecast at any compute)",
                "  B, C_mid: not identified (no rise that stands out from the noise)",
                f"  rmse = {self.rmse:.4g}   sigma = {self.sigma:.4g}   residual lag-1 autocorr = {self.autocorr:.2f} (block {self.block})",
                f"  {self.reason}",
                f"  forecast: {self.forecast_used}",
            ]
            return "\n".join(lines + [f"  warning: {w}" for w in self.warnings])
        lines = [
            f"sigmoid fit on {self.n} points (R0 = {self.R0:.4g}, {self.r0_source})",
            row("A", self.A, self.A_ci, ".4f"),
            row("B", self.B, self.B_ci, ".3f"),
            row("C_mid", self.C_mid, self.C_mid_ci, ".4g"),
            f"  R^2 = {self.r2:.4f}   rmse = {self.rmse:.4g}   residual lag-1 autocorr = {self.autocorr:.2f} (block {self.block})",
        ]
        if not self.converged:
            lines.append(f"  NOT CONVERGED: {self.reason}")
        lines.append(f"  forecast: {self.forecast_used}")
        if self.prior_note:
            lines.append(f"  {self.prior_note}")
        if self.ceiling_check:
            lines.append(f"  {self.ceiling_check['line']}")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (arrays as lists; inf as the string 'inf')."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                if v.dtype.kind == "f" and np.isnan(v).any():
                    v = np.where(np.isnan(v), None, v.astype(object))  # JSON has no NaN: null (read back as NaN)
                v = v.tolist()
            elif isinstance(v, tuple):
                v = [_num_out(x) for x in v]
            elif isinstance(v, float):
                v = _num_out(v)
            elif isinstance(v, Blend):
                v = v.to_dict()
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SigmoidFit":
        known = {f.name for f in fields(cls)}
        if not isinstance(d, Mapping):
            raise UserError(f"a SigmoidFit is read from a JSON object (SigmoidFit.to_json), got a {type(d).__name__}")
        unknown = set(d) - known
        if unknown:
            raise UserError(f"unknown SigmoidFit keys: {sorted(map(str, unknown))}")
        missing = sorted(f.name for f in fields(cls) if f.name not in d and f.default is MISSING and f.default_factory is MISSING)
        if missing:
            raise UserError(f"not a whole SigmoidFit (SigmoidFit.to_json writes one): missing {', '.join(missing)}")
        kw = dict(d)
        for k in ("A_ci", "B_ci", "C_mid_ci"):
            if k in kw:
                kw[k] = tuple(_num_in(x) for x in kw[k])
        for k in ("A", "B", "C_mid", "R0", "level", "rmse", "r2", "sigma", "autocorr", "gain_p"):
            if k in kw:
                kw[k] = _num_in(kw[k])
        for k, dt in (("compute", float), ("score", float), ("used", bool), ("run", int)):
            if k in kw:
                kw[k] = np.asarray(kw[k], dtype=dt)
        if "samples" in kw:
            kw["samples"] = np.asarray(kw["samples"], dtype=float).reshape(-1, 3)
        if kw.get("forecast") is not None:
            kw["forecast"] = Blend.from_dict(kw["forecast"])
        return cls(**kw)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> "SigmoidFit":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"not a SigmoidFit JSON: {e}") from None
        return cls.from_dict(d)


def _num_out(x: float) -> Any:
    x = float(x)
    return x if math.isfinite(x) else str(x)  # JSON has no inf/nan


def _num_in(x: Any) -> float:
    return float(x)  # float("inf") / float("nan") parse the strings back


def _reach(target: float, r0: float, a: np.ndarray, b: np.ndarray, cmid: np.ndarray) -> np.ndarray:
    """C at which R(C) = target, per parameter set: 0 if R0 already meets it, inf if never."""
    d = a - r0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        frac = (target - r0) / d  # share of the gain needed
        c = cmid * (frac / (1 - frac)) ** (1 / b)
    out = np.where(frac <= 0, 0.0, np.where((frac >= 1) | (d == 0), np.inf, c))
    return np.where(np.isnan(out), np.inf, out)
