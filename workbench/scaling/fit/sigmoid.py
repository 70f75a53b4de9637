"""Fit ScaleRL's sigmoid R(C) = R0 + (A - R0) / (1 + (C_mid/C)^B) with honest intervals.

    fit = fit_sigmoid(compute, score)                   # R0 = the score measured at compute 0
    fit = fit_sigmoid(compute, score, r0=0.40, fit_from=1500)
    fit = fit_sigmoid_multi({"seed0": (c0, s0), "seed1": (c1, s1)})   # one recipe, several seeds
    print(fit.summary())

How (see numerics.py): R0 is fixed, never fitted (the paper measures it). A is searched in [0, 1],
so a rising curve gets A > R0 and a falling curve A < R0 without special cases; C_mid and B are
searched on a grid derived from the data in log-compute, A is solved exactly at each grid point,
then the best local minima are polished. Intervals: a residual moving-block bootstrap (block
length from the residual autocorrelation; 1 = the plain residual bootstrap) that, with several
runs, also resamples whole runs. Compute-0 points only define R0 (their residual does not depend
on A, B, C_mid), so they are not counted among fitted points.

No gain: flat, noisy or wandering data give a no-gain fit (`no_gain=True`, a flat forecast);
the rules and the flat fit are in no_gain.py.

The fit is one straight sequence, `fit_sigmoid_multi`: settle the options, gather the fitted
points, the point estimate (numerics / paper / MAP), the residuals' noise, the diagnosis, the
gain check (no_gain.py; a no-gain fit ends there), the forecast blend (forecast/blend.py), the
bootstrap, and the SigmoidFit. Each step is one call, made once.
"""


from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from workbench.errors import UserError, as_number
from workbench.scaling.data import MIN_POINTS, Curve, as_curve, resolve_r0
from workbench.scaling.fit import numerics, paper
from workbench.scaling.fit.no_gain import flat_fit, gain_check
from workbench.scaling.fit.prior import SigmoidPrior, bootstrap_map, fit_map, shift_note
from workbench.scaling.fit.result import SigmoidFit, _ci
from workbench.scaling.forecast import blend

__all__ = ["METHODS", "FitOptions", "fit_options", "fit_sigmoid", "fit_sigmoid_multi", "refit_at_shared_A"]
METHODS = ("auto", "sigmoid", "paper")  # forecast methods of fit_sigmoid (see its docstring)
"""The values of `fit_sigmoid(..., method=)`: auto (the backtest-weighted blend), sigmoid, paper."""


@dataclass(frozen=True)
class FitOptions:
    """How to fit: every option of `fit_sigmoid` / `fit_sigmoid_multi`, in one place.

    r0: the fixed start score. None = the score measured at compute 0 (a UserError says so when
    there is no compute-0 point); "first" = the score of the first point (a documented fallback).
    fit_from / fit_until: fit only points with fit_from <= C <= fit_until (the paper leaves out the
    first ~1.5k GPU-hours: early progress is nearly linear and noisy).
    fixed_A: hold A at this value and fit only B and C_mid (used to compare B at a shared A).
    n_boot: bootstrap replicates for the intervals (0 = none; intervals are then NaN).
    block: bootstrap block length, or "auto" (from the residuals' lag-1 autocorrelation).
    method: how to forecast (see METHODS). "auto" (default): A, B, C_mid and their intervals are
    the least-squares sigmoid's, and the forecast beyond the data blends the sigmoid, the paper's
    sigmoid and a log-linear trend by their rolling-origin backtest inside the prefix
    (forecast/blend.py; `fit.forecast_used` says which and why). "sigmoid": the sigmoid (or the flat
    level when no gain is detected) alone. "paper": the paper's procedure (paper.py).
    prior: a SigmoidPrior (history of finished runs): the sigmoid is its MAP fit.
    """

    r0: float | str | None = None
    fit_from: float | None = None
    fit_until: float | None = None
    fixed_A: float | None = None
    n_boot: int = 200
    block: int | str = "auto"
    level: float = 0.95
    seed: int = 0
    method: str = "auto"
    prior: SigmoidPrior | None = None

    def checked(self) -> "FitOptions":
        """The options validated (one-line UserErrors) and settled: a fit at a fixed A is the
        sigmoid alone (it compares B), and the paper's procedure or a fixed A take no prior."""
        n_boot = int(as_number("n_boot", self.n_boot, integer=True))
        fit_from = None if self.fit_from is None else as_number("fit_from", self.fit_from)
        fit_until = None if self.fit_until is None else as_number("fit_until", self.fit_until)
        level = as_number("level", self.level)
        if not 0 < level < 1:
            raise UserError(f"level must be in (0, 1), got {level}")
        if self.method not in METHODS:
            raise UserError(f"unknown forecast method {self.method!r}: use one of {', '.join(METHODS)}")
        method = "sigmoid" if self.fixed_A is not None else self.method
        prior = None if method == "paper" or self.fixed_A is not None else self.prior
        if prior is not None and not isinstance(prior, SigmoidPrior):
            raise UserError(f"prior must be a SigmoidPrior (SigmoidPrior.from_fits, or tracking.prior.history_prior), got a {type(prior).__name__}")
        if n_boot < 0 or (0 < n_boot < 20):
            raise UserError(f"n_boot must be 0 or at least 20 (got {n_boot})")
        if fit_from is not None and not (math.isfinite(fit_from) and fit_from >= 0):
            raise UserError(f"fit_from must be a compute >= 0, got {fit_from}")
        if fit_until is not None and fit_from is not None and fit_until <= fit_from:
            raise UserError(f"fit_until ({fit_until}) must be above fit_from ({fit_from})")
        if self.fixed_A is not None and not 0 <= self.fixed_A <= 1:
            raise UserError(f"fixed_A must be in [0, 1], got {self.fixed_A}")
        if self.block != "auto" and not (isinstance(self.block, (int, np.integer)) and not isinstance(self.block, bool) and self.block >= 1):
            raise UserError(f"block must be 'auto' or a length >= 1, got {self.block!r}")
        return dataclasses.replace(self, n_boot=n_boot, fit_from=fit_from, fit_until=fit_until, level=level, method=method, prior=prior)


def fit_options(options: FitOptions | None = None, **kw: Any) -> FitOptions:
    """`options` (default FitOptions()) with the keywords `kw` replacing its fields; an unknown
    keyword is a UserError naming the known ones."""
    known = {f.name for f in dataclasses.fields(FitOptions)}
    unknown = sorted(set(kw) - known)
    if unknown:
        raise UserError(f"unknown fit option(s) {', '.join(map(repr, unknown))}: use {', '.join(sorted(known))}")
    return dataclasses.replace(options or FitOptions(), **kw)


def fit_sigmoid(compute: Any, score: Any, options: FitOptions | None = None, **kw: Any) -> SigmoidFit:
    """Fit one curve. The options (keywords, or a FitOptions) are FitOptions': r0, fit_from,
    fit_until, fixed_A, n_boot, block, level, seed, method, prior."""
    return fit_sigmoid_multi([Curve(compute, score)], options, **kw)


def fit_sigmoid_multi(runs: Sequence[Any] | Mapping[str, Any], options: FitOptions | None = None, **kw: Any) -> SigmoidFit:
    """Fit several runs (seeds) of one recipe jointly: shared A, B, C_mid and R0.

    runs: a list of Curve / (compute, score) pairs, or a dict name -> either. R0 defaults to the
    mean of the runs' compute-0 scores. The bootstrap resamples whole runs, so the spread between
    seeds shows up in the intervals. Options as in `fit_sigmoid`.

    The fit, top to bottom, one call per step: 1. settle the options; 2. gather the curves and
    the fitted points (`_FitData`); 3. the point estimate (`_point_fit`: numerics, paper or MAP;
    fitted values and residuals with it); 4. the residuals' noise (autocorrelation, block length);
    5. the diagnosis (converged?); 6. the gain check (no_gain.py; a no-gain fit ends here as
    `flat_fit`); 7. the forecast blend (method "auto"); 8. the bootstrap; 9. the SigmoidFit.
    """
    opts = fit_options(options, **kw).checked()
    data = _FitData.gather(runs, opts)
    point, prior_note = _point_fit(data, opts)
    rho, L = numerics.noise_blocks(point.resid, data.run_used)
    L = L if opts.block == "auto" else int(opts.block)
    converged, reason, warnings = _diagnose(point.theta, point.bounds, point.lm_ok, data.n, opts.fixed_A, float(data.y.max()))
    common = dict(R0=data.R0, level=opts.level, n=data.n, r0_source=data.r0_source, fit_from=opts.fit_from,
                  fit_until=opts.fit_until, seed=opts.seed, compute=data.compute, score=data.score, used=data.used,
                  run=data.run, run_names=data.names, method=opts.method, forecast=None, prior_note=prior_note)
    gain_p, why = math.nan, ""
    if opts.fixed_A is None and opts.method != "paper" and opts.prior is None:  # the gain check's rules
        gain_p, why = gain_check(data.x, data.y, data.run_used, data.R0, point, rho, L, converged, opts.seed)
    if why:  # no gain: the flat level is the forecast (a blend would extrapolate noise)
        return flat_fit(data.y, data.compute[data.used], data.run_used, why, gain_p, opts.n_boot, opts.seed, common)
    if opts.method == "auto":
        common["forecast"] = blend.fit_blend(data.x, data.y, data.R0, point.theta, prior=opts.prior)
    samples = _bootstrap(data, point, L, opts, warnings)
    return _assemble(data, point, opts, samples, converged, reason, warnings, rho, L, gain_p, common)


def _assemble(data: "_FitData", point: numerics.PointFit, opts: FitOptions, samples: np.ndarray, converged: bool,
              reason: str, warnings: list[str], rho: float, L: int, gain_p: float, common: dict[str, Any]) -> SigmoidFit:
    """The SigmoidFit of a kept sigmoid: the point estimate, its intervals from the samples, goodness of fit."""
    theta, sse = point.theta, point.sse
    A, C_mid, B = float(theta[0]), float(math.exp(theta[1])), float(math.exp(theta[2]))
    nan = (math.nan, math.nan)
    sst = float(((data.y - data.y.mean()) ** 2).sum())
    return SigmoidFit(
        A=A, B=B, C_mid=C_mid,
        A_ci=(A, A) if opts.fixed_A is not None else (_ci(samples[:, 0], opts.level) if opts.n_boot else nan),
        B_ci=_ci(samples[:, 1], opts.level) if opts.n_boot else nan,
        C_mid_ci=_ci(samples[:, 2], opts.level) if opts.n_boot else nan,
        rmse=float(math.sqrt(sse / data.n)),
        r2=float(1 - sse / sst) if sst > 0 else math.nan,
        sigma=float(math.sqrt(sse / max(data.n - (2 if opts.fixed_A is not None else 3), 1))),
        converged=converged, reason=reason, warnings=warnings, fixed_A=opts.fixed_A is not None,
        autocorr=rho, block=L, samples=samples, gain_p=gain_p, **common,
    )


@dataclass
class _FitData:
    """The curves of one fit, concatenated, and the points it fits (`used`: compute > 0, inside
    [fit_from, fit_until]); x = ln C and y of the used points."""

    names: list[str]
    compute: np.ndarray
    score: np.ndarray
    run: np.ndarray
    used: np.ndarray
    R0: float
    r0_source: str

    @property
    def n(self) -> int:
        return int(self.used.sum())

    @property
    def x(self) -> np.ndarray:
        return np.log(self.compute[self.used])

    @property
    def y(self) -> np.ndarray:
        return self.score[self.used]

    @property
    def run_used(self) -> np.ndarray:
        return self.run[self.used]

    @classmethod
    def gather(cls, runs: Sequence[Any] | Mapping[str, Any], opts: FitOptions) -> "_FitData":
        items = list(runs.items()) if isinstance(runs, Mapping) else [(None, r) for r in runs]
        if not items:
            raise UserError("no curves to fit")
        curves = [as_curve(obj, name=name or f"run{i}") for i, (name, obj) in enumerate(items)]
        # a dict names its runs; in a list, one curve keeps its own name and several are run0, run1...
        names = [name if name is not None else (cv.name if len(curves) == 1 else f"run{i}")
                 for i, ((name, _), cv) in enumerate(zip(items, curves))]
        compute = np.concatenate([c.compute for c in curves])
        R0, r0_source = resolve_r0(opts.r0, curves)
        used = compute > 0
        if opts.fit_from is not None:
            used &= compute >= opts.fit_from
        if opts.fit_until is not None:
            used &= compute <= opts.fit_until
        data = cls(names, compute, np.concatenate([c.score for c in curves]),
                   np.concatenate([np.full(len(c), i) for i, c in enumerate(curves)]), used, R0, r0_source)
        where = (f" in [{opts.fit_from or 0:g}, {opts.fit_until if opts.fit_until is not None else math.inf:g}]"
                 if (opts.fit_from or opts.fit_until) else " with compute > 0")
        if data.n < MIN_POINTS:
            raise UserError(f"only {data.n} point(s){where}; a sigmoid fit needs at least {MIN_POINTS}")
        if np.ptp(data.y) == 0 and opts.fixed_A is None:
            raise UserError(f"scores{where} are all {data.y[0]:g}: nothing to fit")
        return data


def _point_fit(data: _FitData, opts: FitOptions) -> tuple[numerics.PointFit, str]:
    """(the point estimate, the prior's note): the paper's grid fit, or the global least-squares
    fit (the MAP fit with a prior)."""
    x, y = data.x, data.y
    if opts.method == "paper":
        theta, sse = paper.fit_paper(x, y, data.R0)
        return numerics.PointFit.at(theta, x, y, data.R0, True, paper.bounds_for(x, data.R0), sse), ""
    bounds = numerics.Bounds.for_data(x)
    theta, sse, lm_ok = numerics.fit_global(x, y, data.R0, bounds, opts.fixed_A)
    if opts.prior is None:
        return numerics.PointFit.at(theta, x, y, data.R0, lm_ok, bounds, sse), ""
    lsq = theta
    theta = fit_map(x, y, data.R0, opts.prior, math.sqrt(sse / max(len(y) - 3, 1)), lsq, bounds)
    return numerics.PointFit.at(theta, x, y, data.R0, lm_ok, bounds), shift_note(opts.prior, lsq, theta)


def _bootstrap(data: _FitData, point: numerics.PointFit, L: int, opts: FitOptions, warnings: list[str]) -> np.ndarray:
    """(n_boot, 3) bootstrap samples of (A, B, C_mid); warns (in `warnings`) when refits hit the bounds."""
    if not opts.n_boot:
        return np.zeros((0, 3))
    rng = np.random.default_rng(opts.seed)
    if opts.prior is not None:
        th_b = bootstrap_map(data.x, data.y, point.theta, data.run_used, data.R0, opts.prior, point.bounds, opts.n_boot, L, rng)
        at_bound = np.zeros(opts.n_boot, bool)
    else:
        th_b, at_bound = numerics.bootstrap(data.x, point.fitted, point.resid, data.run_used, data.R0, point.theta,
                                            point.bounds, opts.n_boot, L, rng, opts.fixed_A)
    if at_bound.mean() > 0.1:
        warnings.append(f"{at_bound.mean():.0%} of bootstrap refits hit the C_mid/B search bounds: the intervals are truncated")
    return np.column_stack([th_b[:, 0], np.exp(th_b[:, 2]), np.exp(th_b[:, 1])])


def _diagnose(theta: np.ndarray, b: numerics.Bounds, lm_ok: bool, n: int, fixed_A: float | None, y_max: float) -> tuple[bool, str, list[str]]:
    """converged=False with a reason when the optimum sits on a search bound (not identified)."""
    tol = 1e-6
    reasons, warnings = [], []
    if not lm_ok:
        reasons.append("the least-squares refinement did not converge")
    if theta[1] >= b.m_hi - tol:
        reasons.append("C_mid ran to its upper bound (100x the last compute): the curve has not bent yet, so A and C_mid are not identified")
    if theta[1] <= b.m_lo + tol:
        reasons.append("C_mid ran to its lower bound: the fitted points are all saturated; fit earlier points")
    if theta[2] >= b.lb_hi - tol:
        reasons.append(f"B ran to its upper bound {numerics.B_MAX:g}: a step, not a sigmoid")
    if theta[2] <= b.lb_lo + tol:
        reasons.append(f"B ran to its lower bound {numerics.B_MIN:g}: no sigmoid shape in the data")
    if fixed_A is None and theta[0] >= b.a_hi - tol:
        if y_max < 0.97:
            # an optimum pushing past a pass rate of 1 while no score is near 1: no ceiling in sight
            reasons.append("A ran to its upper bound 1.0: the curve shows no saturation yet, so the asymptote is not identified")
        else:
            warnings.append("A is at its upper bound 1.0 (the scores reach ~1)")
    if fixed_A is None and theta[0] <= b.a_lo + tol:
        warnings.append("A is at its lower bound 0.0")
    if n < 8:
        warnings.append(f"only {n} fitted points: intervals are rough")
    return (not reasons), "; ".join(reasons), warnings


def refit_at_shared_A(fit: SigmoidFit, A: float, *, n_boot: int | None = None) -> SigmoidFit:
    """Refit a fit's own data with A held at `A` (the paper's way to compare B when A ties).

    A no-gain fit can be refit too (a sigmoid through flat data with A held), but its B means
    nothing: the result has converged=False and a reason that says so."""
    runs = {name: (fit.compute[fit.run == i], fit.score[fit.run == i]) for i, name in enumerate(fit.run_names)}
    out = fit_sigmoid_multi(
        runs,
        r0=fit.R0,
        fit_from=fit.fit_from,
        fit_until=fit.fit_until,
        fixed_A=A,
        n_boot=len(fit.samples) if n_boot is None else n_boot,
        block=fit.block,
        level=fit.level,
        seed=fit.seed,
    )
    if fit.no_gain:
        why = f"no gain detected in these data (level {fit.A:.4f}): B at a shared A = {A:g} is not identified"
        out = dataclasses.replace(out, converged=False, reason=why + (f"; {out.reason}" if out.reason else ""))
    return out

