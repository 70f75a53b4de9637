"""Predict the curve of a configuration you have not run, from fitted runs that differ in one setting.

    from workbench.scaling import predict_config
    p = predict_config({64: fit64, 128: fit128, 256: fit256}, at=512, key="model.n_embd")
    p.A, p.A_ci, p.B, p.B_ci, p.C_mid, p.C_mid_ci, p.R0, p.R0_ci   # the unseen run's parameters
    p.predict(c); p.band(c, kind="prediction")        # its whole curve, with a band
    p.compute_to_reach(0.5)                           # workbench.scaling.Reach, with an interval
    p.worth_it(min_gain=0.01)                         # against the largest run seen, at its compute
    p.chart(); p.to_dict(); print(p)

Input: value of the setting -> a SigmoidFit with bootstrap samples (fit_sigmoid /
fit_sigmoid_multi), or a (compute, score) curve, fitted here by fit_sigmoid (R0 by `r0_rule`).
At least 3 runs, values > 0, one run per value (fit seeds of a value jointly), every run showing
a rise (a no-gain fit has no B or C_mid to extrapolate). Loading runs from folders, MLflow or
CSVs is workbench.runs.predict; this module knows only fits and numbers.

The model. With u = ln(value), each parameter moves with u in one stated form, fitted by
weighted least squares over the runs (weight 1 / (the run's bootstrap variance of the parameter
+ the median of those variances), so one badly identified run does not steer the law):

    R0     constant | linear in u                      (R0 is measured, so it needs a law too)
    A      constant | linear in u | logistic in u      (logit A linear: saturates below 1)
    B      constant | power law (ln B linear in u) | linear in u
    C_mid  constant | power law (ln C_mid linear in u)

The forms are chosen together by a leave-one-out backtest in curve space: each run is left out
in turn, every form is fitted on the others and predicts the left-out run's parameters, and the
combination whose predicted curves score the lowest mean RMSE against the left-out runs' measured
points wins (within PARSIMONY of the best score, the one with the fewest coefficients). `backtest` lists every combination's score and
`loo_largest` its error on the largest run, so the rejected forms are on record per prediction.

The laws must also beat the plainest answer: carrying the nearest run's curve over (for a value
past the largest run, the largest run's curve as it is). It is scored by the same leave-one-out
backtest (each left-out run predicted by its nearest neighbour's parameters) and sits in the
backtest table as the row "carried over". When no combination of laws scores below it, the
prediction falls back to it and says so (`fallback`, a warning): the curve is the nearest run's,
and its draws are that run's bootstrap replicates plus z x one neighbour-to-neighbour difference
(the law error of "nothing changes"), so the band spans what the neighbouring runs differ by.

Uncertainty: each draw picks one bootstrap replicate (A, B, C_mid) per run, refits the chosen
forms and predicts at the new value; it then adds the law's own error, z x one leave-one-out
residual vector of the chosen forms (z ~ N(0, 1), the fold drawn at random; the vector keeps
the parameters' correlation). So a law that held on the runs seen gets a band as narrow as their
fits allow, and one that did not gets a wide one. The prediction band adds the runs' median
point noise (sigma). Intervals are percentiles of the draws; compute_to_reach pushes each draw
through the inverse of Eq. 1 (result._reach).

Forms kept and rejected, by that backtest (mean leave-one-out curve RMSE of the best combination
using each form; `ConfigPrediction.form_scores()` prints them; benchmarks/bench_predict.py):
- synthetic ladder, 4 widths, A linear in ln w, C_mid ~ w^0.7, B and R0 constant, noise 0.015
  (tests/scaling/test_predict.py): A logistic 0.0154 kept over linear 0.0156 (as many
  coefficients, a lower score) and constant 0.0345; C_mid power law 0.0154 over constant
  0.0345; B constant 0.0154 (power law and linear tie with it: fewer coefficients kept); R0
  constant (linear ties: fewer kept).
- synthetic ladder where nothing moves: all constant, 0.0150; the slopes score 0.0154-0.0168.
- the paper's Table 1 runs at 8/16/24 generations per prompt (curves regenerated from the
  published parameters): all constant, 0.0155; A logistic 0.0255, B power law 0.0182, C_mid
  power law 0.0203 rejected (those parameters do not move monotonically with n there).
- the CPU batch ladder: README, "Predict before you pay".
Not offered: a saturating A with its own ceiling (3 coefficients: with 3-4 runs a leave-one-out
fold has no degree of freedom left to score it), and laws in the value itself rather than its log
(the settings this is for, widths, batches, lengths, move A and C_mid per doubling).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import numpy as np
from scipy.special import expit, logit
from scipy.stats import norm

from workbench.errors import UserError, as_number
from workbench.scaling.fit.result import Interval, Reach, SigmoidFit, _ci, _curve, _reach
from workbench.scaling.data import r0_rule
from workbench.scaling.fit.sigmoid import fit_sigmoid

PARAMS = ("R0", "A", "B", "C_mid")
# param -> (form name, link, has a slope in u); the link is the scale the form is linear on
FORMS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "R0": (("constant", "id", False), ("linear in log x", "id", True)),
    "A": (("constant", "id", False), ("linear in log x", "id", True), ("logistic in log x", "logit", True)),
    "B": (("constant", "log", False), ("power law", "log", True), ("linear in log x", "id", True)),
    "C_mid": (("constant", "log", False), ("power law", "log", True)),
}
MIN_RUNS = 3  # the fewest runs a law is fitted from (2 would fit any slope exactly, with no backtest)
N_DRAWS = 400
B_FLOOR = 1e-3  # a law for B extrapolated below 0 would turn the curve over: held at this floor
PARSIMONY = 0.02  # a combination within 2% of the best leave-one-out score counts as tied with it
_EPS = 1e-6


def _to(link: str, v: np.ndarray) -> np.ndarray:
    if link == "log":
        return np.log(np.maximum(v, 1e-300))
    if link == "logit":
        return logit(np.clip(v, _EPS, 1 - _EPS))
    return np.asarray(v, dtype=float)


def _back(link: str, t: np.ndarray) -> np.ndarray:
    return np.exp(t) if link == "log" else expit(t) if link == "logit" else t


def _fit_line(u: np.ndarray, t: np.ndarray, w: np.ndarray, slope: bool) -> np.ndarray:
    """Weighted least-squares (c0, c1) of t = c0 + c1 u (c1 = 0 without a slope); t may be (n,) or (m, n)."""
    t2 = np.atleast_2d(t)
    if not slope:
        return np.stack([(t2 * w).sum(1) / w.sum(), np.zeros(len(t2))], axis=1)
    X = np.stack([np.ones_like(u), u], axis=1) * np.sqrt(w)[:, None]
    coef, *_ = np.linalg.lstsq(X, (t2 * np.sqrt(w)).T, rcond=None)
    return coef.T


def _eval(coef: np.ndarray, u: float) -> np.ndarray:
    return coef[:, 0] + coef[:, 1] * u


@dataclass
class _Runs:
    """The runs' values, parameters (n, 4: R0, A, B, C_mid), weights and measured points."""

    values: np.ndarray
    fits: list[SigmoidFit]
    names: list[str]

    @property
    def u(self) -> np.ndarray:
        return np.log(self.values)

    @property
    def point(self) -> np.ndarray:
        return np.array([[f.R0, f.A, f.B, f.C_mid] for f in self.fits])

    def samples(self, i: int) -> np.ndarray:
        return _samples(self.fits[i])

    def weights(self, k: int, link: str) -> np.ndarray:
        if k == 0:  # R0 is measured: no fit variance, equal weights
            return np.ones(len(self.fits))
        var = np.array([np.var(_to(link, self.samples(i)[:, k - 1])) for i in range(len(self.fits))])
        return 1.0 / (var + np.median(var) + 1e-12)

    def observed(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        f = self.fits[i]
        return f.compute[f.used], f.score[f.used]


def _samples(fit: SigmoidFit) -> np.ndarray:
    """The fit's bootstrap replicates (A, B, C_mid) that are usable: finite, B and C_mid > 0."""
    s = fit.samples
    return s[np.all(np.isfinite(s), axis=1) & (s[:, 1] > 0) & (s[:, 2] > 0)]


def _as_fit(value: float, obj: Any, seed: int) -> SigmoidFit:
    if isinstance(obj, SigmoidFit):
        return obj
    try:
        c, y = obj
    except (TypeError, ValueError):
        raise UserError(f"run at {value:g}: give a SigmoidFit or a (compute, score) pair, got a {type(obj).__name__}") from None
    return fit_sigmoid(c, y, r0=r0_rule([(c, y)]), seed=seed)


def _check_runs(runs: Mapping[Any, Any], at: float, seed: int, names: Mapping[Any, str] | None) -> _Runs:
    if not isinstance(runs, Mapping):
        raise UserError(f"runs must be a dict: value of the setting -> SigmoidFit or (compute, score), got a {type(runs).__name__}")
    if len(runs) < MIN_RUNS:
        raise UserError(f"{len(runs)} run(s) given: predicting a configuration needs at least {MIN_RUNS} runs that differ in the setting")
    vals = [as_number("the setting's value", v) for v in runs]
    if min(vals + [at]) <= 0 or not all(map(math.isfinite, vals + [at])):
        raise UserError("the setting's values (and `at`) must be finite and > 0: the laws are in log of the value")
    if len(set(vals)) < len(vals):
        raise UserError("two runs have the same value of the setting: fit seeds of one value jointly (fit_sigmoid_multi)")
    order = np.argsort(vals)
    keys = [list(runs)[i] for i in order]
    fits, labels = [], []
    for key in keys:
        label = (names or {}).get(key, f"{float(key):g}")
        fit = _as_fit(float(key), runs[key], seed)
        if fit.no_gain or not math.isfinite(fit.B) or not math.isfinite(fit.C_mid):
            raise UserError(f"run {label} was not fitted with a sigmoid ({fit.reason or 'no B or C_mid'}): its curve "
                            "shows no rise to extrapolate; leave it out or run it longer")
        if len(fit.samples) == 0:
            raise UserError(f"run {label} was fitted without bootstrap samples (n_boot=0): refit with n_boot >= 20 so its "
                            "uncertainty can be carried into the prediction")
        fits.append(fit)
        labels.append(label)
    return _Runs(np.array(sorted(vals)), fits, labels)


def _loo_params(r: _Runs) -> dict[tuple[int, int], np.ndarray]:
    """(param index, form index) -> (n,) leave-one-out predictions of that parameter at each run."""
    n, pt, u = len(r.fits), r.point, r.u
    out: dict[tuple[int, int], np.ndarray] = {}
    for k, p in enumerate(PARAMS):
        for fi, (_, link, slope) in enumerate(FORMS[p]):
            w, t, pred = r.weights(k, link), _to(link, pt[:, k]), np.full(n, np.nan)
            for j in range(n):
                keep = np.arange(n) != j
                if keep.sum() >= 1 + slope:
                    pred[j] = _back(link, _eval(_fit_line(u[keep], t[keep], w[keep], slope), u[j]))[0]
            out[(k, fi)] = pred
    return out


CARRIED = "carried over"  # the backtest row (and forms) of the nearest run's curve carried over unchanged
_CARRY_LINKS = ("id", "id", "log", "log")  # R0, A on their own scale; B, C_mid in log (as the constant forms)


def _nearest(u: np.ndarray, at: float, exclude: int | None = None) -> int:
    """Index of the run nearest to `at` in log value (a tie goes to the larger run)."""
    d = np.abs(u - at) - 1e-9 * u  # the tie-break: larger u is nearer
    if exclude is not None:
        d[exclude] = np.inf
    return int(np.argmin(d))


def _carry_loo(r: _Runs) -> np.ndarray:
    """(n, 4): each run's parameters as predicted by its nearest other run's (leave-one-out)."""
    return np.array([r.point[_nearest(r.u, r.u[j], exclude=j)] for j in range(len(r.fits))])


def _rmse(c: np.ndarray, y: np.ndarray, params: Any) -> float:
    return float(np.sqrt(np.mean((_curve(c, *params) - y) ** 2)))


def _select(r: _Runs) -> tuple[tuple[int, ...] | None, list[dict[str, Any]], dict[tuple[int, int], np.ndarray]]:
    """The forms (one index per parameter) with the lowest mean leave-one-out curve RMSE, and the table of all;
    None for the forms when no combination beats carrying the nearest run's curve over."""
    loo = _loo_params(r)
    obs = [r.observed(j) for j in range(len(r.fits))]
    table = []
    for combo in itertools.product(*(range(len(FORMS[p])) for p in PARAMS)):
        rmse = [_rmse(c, y, [loo[(k, fi)][j] for k, fi in enumerate(combo)]) for j, (c, y) in enumerate(obs)]
        table.append({**{p: FORMS[p][fi][0] for p, fi in zip(PARAMS, combo)}, "loo_rmse": float(np.mean(rmse)),
                      "loo_largest": rmse[-1], "n_coef": sum(1 + FORMS[p][fi][2] for p, fi in zip(PARAMS, combo)), "_combo": combo})
    table.sort(key=lambda row: (row["loo_rmse"], row["n_coef"]))
    # parsimony: within PARSIMONY of the best score, the fewest coefficients (few runs overfit easily)
    near = [row for row in table if row["loo_rmse"] <= table[0]["loo_rmse"] * (1 + PARSIMONY)]
    chosen = min(near, key=lambda row: (row["n_coef"], row["loo_rmse"]))
    carried = [_rmse(c, y, params) for (c, y), params in zip(obs, _carry_loo(r))]
    carry = {**{p: CARRIED for p in PARAMS}, "loo_rmse": float(np.mean(carried)), "loo_largest": carried[-1], "n_coef": 0, "_combo": None}
    if carry["loo_rmse"] <= chosen["loo_rmse"]:  # the laws do not beat "nothing changes": fall back to it
        chosen = carry
    table.append(carry)
    table.sort(key=lambda row: (row["loo_rmse"], row["n_coef"]))
    best = chosen["_combo"]
    for row in table:
        row["chosen"] = row is chosen
        row.pop("_combo")
    return best, table, loo


def _draws(r: _Runs, combo: tuple[int, ...], loo: Mapping[tuple[int, int], np.ndarray], at: float, n_draws: int,
           rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(point (4,), draws (n_draws, 4)) of (R0, A, B, C_mid) at `at` (see the module docstring)."""
    n, u_at, pt = len(r.fits), math.log(at), r.point
    picked = np.empty((n_draws, n, 4))
    picked[:, :, 0] = pt[:, 0]
    for i in range(n):
        s = r.samples(i)
        picked[:, i, 1:] = s[rng.integers(0, len(s), n_draws)]
    fold = rng.integers(0, n, n_draws)
    z = rng.standard_normal(n_draws)
    point, draws = np.empty(4), np.empty((n_draws, 4))
    for k, (p, fi) in enumerate(zip(PARAMS, combo)):
        _, link, slope = FORMS[p][fi]
        w = r.weights(k, link)
        point[k] = _back(link, _eval(_fit_line(r.u, _to(link, pt[:, k]), w, slope), u_at))[0]
        t = _eval(_fit_line(r.u, _to(link, picked[:, :, k]), w, slope), u_at)
        resid = _to(link, pt[:, k]) - _to(link, loo[(k, fi)])  # the law's own error, fold by fold
        resid = np.nan_to_num(resid)
        draws[:, k] = _back(link, t + z * resid[fold])
    point[1], draws[:, 1] = np.clip(point[1], 0, 1), np.clip(draws[:, 1], 0, 1)
    point[0], draws[:, 0] = np.clip(point[0], 0, 1), np.clip(draws[:, 0], 0, 1)
    point[2], draws[:, 2] = max(point[2], B_FLOOR), np.maximum(draws[:, 2], B_FLOOR)  # B linear in u may cross 0
    return point, draws


def _carry_draws(r: _Runs, at: float, n_draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(point, draws) of the nearest run's curve carried over: its bootstrap replicates plus z x one
    neighbour-to-neighbour difference of the parameters (the error of assuming nothing changes)."""
    i = _nearest(r.u, math.log(at))
    s = r.samples(i)
    picked = np.column_stack([np.full(n_draws, r.point[i, 0]), s[rng.integers(0, len(s), n_draws)]])
    diff = np.column_stack([_to(link, r.point[:, k]) - _to(link, _carry_loo(r)[:, k]) for k, link in enumerate(_CARRY_LINKS)])
    step = diff[rng.integers(0, len(r.fits), n_draws)] * rng.standard_normal(n_draws)[:, None]
    draws = np.column_stack([_back(link, _to(link, picked[:, k]) + step[:, k]) for k, link in enumerate(_CARRY_LINKS)])
    draws[:, :2] = np.clip(draws[:, :2], 0, 1)
    return r.point[i].copy(), draws


@dataclass(frozen=True)
class Worth:
    """Is the predicted configuration worth running? Its score against the reference run's at `budget`."""

    reference: str
    budget: float
    score_ref: float
    score_new: float
    gain: float
    gain_lo: float
    gain_hi: float
    A_gain: float
    A_gain_lo: float
    A_gain_hi: float
    min_gain: float
    worth: bool | None  # True / False, None = uncertain
    verdict: str


@dataclass
class ConfigPrediction:
    """The predicted curve of one unseen value of a setting (see the module docstring)."""

    key: str
    at: float
    values: list[float]
    names: list[str]
    forms: dict[str, str]
    point: np.ndarray  # (R0, A, B, C_mid)
    draws: np.ndarray  # (n_draws, 4)
    sigma: float
    level: float
    backtest: list[dict[str, Any]]
    fits: list[SigmoidFit] = field(repr=False)
    warnings: list[str] = field(default_factory=list)
    fallback: str = ""  # the run whose curve was carried over because the laws did not beat it; "" when a law predicts

    R0 = property(lambda s: float(s.point[0]))
    A = property(lambda s: float(s.point[1]))
    B = property(lambda s: float(s.point[2]))
    C_mid = property(lambda s: float(s.point[3]))
    R0_ci = property(lambda s: s.interval("R0"))
    A_ci = property(lambda s: s.interval("A"))
    B_ci = property(lambda s: s.interval("B"))
    C_mid_ci = property(lambda s: s.interval("C_mid"))

    @property
    def chosen(self) -> dict[str, Any]:
        """The backtest row of the forms kept."""
        return next(row for row in self.backtest if row["chosen"])

    def form_scores(self) -> dict[str, dict[str, float]]:
        """param -> form -> the best leave-one-out curve RMSE of any combination using that form (kept vs rejected)."""
        out: dict[str, dict[str, float]] = {p: {} for p in PARAMS}
        for row in self.backtest:
            for p in PARAMS:
                out[p][row[p]] = min(out[p].get(row[p], math.inf), row["loo_rmse"])
        return out

    def interval(self, param: str, level: float | None = None) -> Interval:
        return _ci(self.draws[:, PARAMS.index(param)], self.level if level is None else level)

    def predict(self, c: Any) -> Any:
        """The predicted score at compute c (scalar -> float, array -> array)."""
        out = _curve(np.asarray(c, dtype=float), *self.point)
        return float(out) if np.ndim(c) == 0 else out

    def sample_curves(self, c: Any) -> np.ndarray:
        d = self.draws
        return _curve(np.atleast_1d(np.asarray(c, dtype=float))[None, :], d[:, :1], d[:, 1:2], d[:, 2:3], d[:, 3:4])

    def band(self, c: Any, level: float | None = None, kind: Literal["mean", "prediction"] = "mean") -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of where the curve (kind "mean") or a measured point ("prediction": + the runs' point noise) lies."""
        level = self.level if level is None else as_number("level", level)
        if kind not in ("mean", "prediction") or not 0 < level < 1:
            raise UserError(f"band needs kind 'mean' or 'prediction' and a level in (0, 1), got {kind!r}, {level}")
        a = (1 - level) / 2
        curves = self.sample_curves(c)
        lo, hi = np.quantile(curves, [a, 1 - a], axis=0)
        if kind == "prediction":
            mid, zs = np.median(curves, axis=0), norm.ppf(1 - a) * self.sigma
            lo, hi = mid - np.hypot(mid - lo, zs), mid + np.hypot(hi - mid, zs)
        return np.clip(lo, 0, 1), np.clip(hi, 0, 1)

    def compute_to_reach(self, target: float) -> Reach:
        """Compute at which the predicted curve reaches `target`, with an interval over the draws."""
        target = as_number("target", target)
        if not 0 <= target <= 1:
            raise UserError(f"target must be a score in [0, 1], got {target}")
        pt, d = self.point, self.draws
        point = float(_reach(target, pt[0], pt[1:2], pt[2:3], pt[3:4])[0])
        each = _reach(target, d[:, 0], d[:, 1], d[:, 2], d[:, 3])
        each = np.where((target > d[:, 0]) & (d[:, 1] <= target), np.inf, each)  # a draw whose A (even below R0) misses it
        lo, hi = _ci(each, self.level)
        note = "" if math.isfinite(point) else f"the predicted A = {self.A:.4f} stays below {target:g}"
        return Reach(target, point, lo, hi, math.isfinite(point), float(np.mean(np.isfinite(each))), note)

    def worth_it(self, budget: float | None = None, *, min_gain: float = 0.01, seed: int = 0) -> Worth:
        """The predicted score minus the largest run seen's (the reference) at `budget` (default: the
        reference's last fitted compute: the same spend), with an interval (draws paired at random
        with the reference's bootstrap curves); "worth it" when its low end clears min_gain, "not
        worth it" when its high end does not. The gain in A (the ceiling) is reported beside it."""
        ref, name = self.fits[-1], self.names[-1]
        budget = float(ref.compute[ref.used].max()) if budget is None else as_number("budget", budget)
        if not (math.isfinite(budget) and budget > 0):
            raise UserError(f"budget must be a compute > 0, got {budget}")
        rng = np.random.default_rng(seed)
        new = self.sample_curves(budget)[:, 0]
        rs = _samples(ref)
        rs = rs[rng.integers(0, len(rs), len(new))]
        old = _curve(np.array(budget), ref.R0, rs[:, 0], rs[:, 1], rs[:, 2])
        g_lo, g_hi = _ci(new - old, self.level)
        a_lo, a_hi = _ci(self.draws[:, 1] - rs[:, 0], self.level)
        s_new, s_ref = self.predict(budget), float(_curve(np.array(budget), ref.R0, ref.A, ref.B, ref.C_mid))
        gain = s_new - s_ref
        worth, word = (True, "worth it") if g_lo >= min_gain else (False, "not worth it") if g_hi < min_gain else (None, "uncertain")
        pct = f"{self.level:.0%}"
        verdict = (f"{word}: at compute {budget:.4g}, {self.key}={self.at:g} is predicted to score {s_new:.4f} against "
                   f"{s_ref:.4f} for {name}, gain {gain:+.4f} ({pct} CI [{g_lo:+.4f}, {g_hi:+.4f}]) against a minimum of "
                   f"{min_gain:g}; its ceiling A {self.A:.4f} vs {ref.A:.4f} ({self.A - ref.A:+.4f}, CI [{a_lo:+.4f}, {a_hi:+.4f}])")
        return Worth(name, budget, s_ref, s_new, gain, g_lo, g_hi, self.A - ref.A, a_lo, a_hi, min_gain, worth, verdict)

    def summary(self) -> str:
        pct = f"{self.level:.0%}"
        seen = ", ".join(self.names)
        lines = [f"predicted {self.key}={self.at:g} from {len(self.values)} runs ({seen})",
                 "  forms: " + ", ".join(f"{p} {self.forms[p]}" for p in PARAMS)
                 + f" (leave-one-out curve RMSE {self.chosen['loo_rmse']:.4f}; {len(self.backtest)} combinations tried)"]
        for p, fmt in (("R0", ".4f"), ("A", ".4f"), ("B", ".3f"), ("C_mid", ".4g")):
            lo, hi = self.interval(p)
            lines.append(f"  {p:<6}= {getattr(self, p):{fmt}}   {pct} CI [{lo:{fmt}}, {hi:{fmt}}]")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: key, at, the parameters with intervals, forms, the backtest table, the runs."""
        out: dict[str, Any] = {"key": self.key, "at": self.at, "level": self.level, "forms": dict(self.forms)}
        for p in PARAMS:
            out[p], out[f"{p}_ci"] = getattr(self, p), list(self.interval(p))
        out.update(sigma=self.sigma, runs=[{"name": n, "value": v, "A": f.A, "B": f.B, "C_mid": f.C_mid, "R0": f.R0}
                                           for n, v, f in zip(self.names, self.values, self.fits)],
                   backtest=self.backtest, warnings=list(self.warnings), fallback=self.fallback)
        return out

    def chart(self, *, extend: float = 2.0, x_title: str = "compute", y_title: str = "score", title: str | None = None,
              actual: tuple[Any, Any] | None = None) -> Any:
        """The smaller runs' points and fits (charts.chart_overlay) with the predicted curve and its band;
        `actual`: the real run's (compute, score), drawn as black crosses (a backtest)."""
        import altair as alt

        from workbench.scaling.charts import chart_overlay

        fits = {f"{v:g}": f for v, f in zip(self.values, self.fits)}  # the runs' own bands left out: one band, the prediction's
        base = chart_overlay(fits, extend=extend, band=None, x_title=x_title, y_title=y_title, legend=self.key,
                             title=title or f"{self.key}={self.at:g} predicted from {len(fits)} runs (dashed: predicted, grey: its band)")
        pos = np.concatenate([f.compute[f.compute > 0] for f in self.fits])
        grid = np.geomspace(pos.min(), pos.max() * extend, 240)  # chart_overlay's own x range
        lo, hi = self.band(grid)
        rows = [{"compute": float(c), "fit": float(m), "lo": float(a), "hi": float(b)} for c, m, a, b in zip(grid, self.predict(grid), lo, hi)]
        data = alt.Data(values=rows)
        area = alt.Chart(data).mark_area(opacity=0.2, color="#555").encode(x="compute:Q", y="lo:Q", y2="hi:Q")
        line = alt.Chart(data).mark_line(strokeDash=[6, 3], color="black", strokeWidth=2).encode(x="compute:Q", y="fit:Q")
        out = base + area + line
        if actual is not None:
            c, y = (np.asarray(v, dtype=float) for v in actual)
            pts = [{"compute": float(a), "score": float(b)} for a, b in zip(c, y) if a > 0]
            out += alt.Chart(alt.Data(values=pts)).mark_point(shape="cross", color="black", size=40).encode(x="compute:Q", y="score:Q")
        return out


def predict_config(runs: Mapping[Any, Any], at: float, *, key: str = "setting", level: float = 0.95,
                   n_draws: int = N_DRAWS, seed: int = 0, names: Mapping[Any, str] | None = None) -> ConfigPrediction:
    """Predict the curve at value `at` of a setting from runs at other values (see the module docstring).

    runs: value -> SigmoidFit (with bootstrap samples) or (compute, score). names: value -> the
    run's display name. Returns a ConfigPrediction (parameters with intervals, band, reach, worth)."""
    at = as_number("at", at)
    level = as_number("level", level)
    if not 0 < level < 1:
        raise UserError(f"level must be in (0, 1), got {level}")
    r = _check_runs(runs, at, seed, names)
    combo, table, loo = _select(r)
    n, rng = int(as_number("n_draws", n_draws, integer=True)), np.random.default_rng(seed)
    point, draws = _carry_draws(r, at, n, rng) if combo is None else _draws(r, combo, loo, at, n, rng)
    warnings = [f"run {n} did not converge ({f.reason}): the law weights its parameters by their (wide) intervals"
                for n, f in zip(r.names, r.fits) if not f.converged]
    fallback = ""
    if combo is None:
        fallback = r.names[_nearest(r.u, math.log(at))]
        best_law = min(row["loo_rmse"] for row in table if row["A"] != CARRIED)
        warnings.insert(0, f"no law beat carrying the nearest run's curve over (leave-one-out curve RMSE {best_law:.4f} for the "
                           f"best law vs {next(row['loo_rmse'] for row in table if row['chosen']):.4f}): predicting run "
                           f"{fallback}'s curve unchanged, its band widened by how much neighbouring runs differ")
    lo, hi = r.values.min(), r.values.max()
    if at > hi * (hi / lo) or at < lo / (hi / lo):
        warnings.append(f"{key}={at:g} is further from the runs ({lo:g}..{hi:g}) than their own span: the laws are extrapolated far")
    forms = {p: CARRIED if combo is None else FORMS[p][combo[k]][0] for k, p in enumerate(PARAMS)}
    sigma = float(np.median([f.sigma for f in r.fits]))
    return ConfigPrediction(key, at, [float(v) for v in r.values], r.names, forms, point, draws, sigma, level, table, r.fits,
                            warnings, fallback)
