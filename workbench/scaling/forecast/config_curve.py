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
At least 3 values > 0, one fit per value (a value's seeds fitted jointly count once), every fit showing
a rise (a no-gain fit has no B or C_mid to extrapolate). Loading runs from folders, MLflow or
CSVs is workbench.runs.by_setting; this module knows only fits and numbers. A value fitted from
one run (one seed: a fit's `run_names`) is warned about, with the `--seeds` that fixes it: a
one-seed depth ladder's law won its own backtest and missed the held-out rung (docs/measured.md).

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
- the CPU batch ladder: the Measured page (docs/measured.md), "Predicting a configuration: the CPU ladders".
Not offered: a saturating A with its own ceiling (3 coefficients: with 3-4 runs a leave-one-out
fold has no degree of freedom left to score it), and laws in the value itself rather than its log
(the settings this is for, widths, batches, lengths, move A and C_mid per doubling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import numpy as np
from scipy.stats import norm

from workbench.errors import UserError, as_number
from workbench.scaling.fit.result import Interval, Reach, SigmoidFit, _ci, _curve, _reach
from workbench.scaling.forecast.config_laws import (  # noqa: F401  (FORMS, MIN_RUNS, N_DRAWS: this module's public constants)
    CARRIED,
    FORMS,
    MIN_RUNS,
    N_DRAWS,
    PARAMS,
    carry_draws,
    check_runs,
    law_draws,
    nearest,
    select_forms,
    usable_samples,
)


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
        rs = usable_samples(ref)
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
        lines = [f"predicted {self.key}={self.at:g} from {len(self.values)} values ({seen})",
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
                             title=title or f"{self.key}={self.at:g} predicted from {len(fits)} values (dashed: predicted, grey: its band)")
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


def _one_seed_warning(key: str, one_seed: list[float], n_values: int) -> str:
    """The warning for values of the setting fitted from one run each ("" when every value has
    seeds): one seed's luck can choose the law, which then wins its backtest and misses a new value."""
    if not one_seed:
        return ""
    which = (f"each rung (value of {key}) has one seed" if len(one_seed) == n_values else
             f"the rungs {key} = {', '.join(f'{v:g}' for v in one_seed)} have one seed each")
    return (f"{which}: a law chosen on one seed's curves can win its own backtest and still miss the new value; "
            f"run more seeds per value, e.g. `workbench sweep NOTEBOOK --grid GRID.yaml --ladder {key} --seeds 3`, "
            "and predict from all of them (a value's seeds are fitted jointly)")


def predict_config(runs: Mapping[Any, Any], at: float, *, key: str = "setting", level: float = 0.95,
                   n_draws: int = N_DRAWS, seed: int = 0, names: Mapping[Any, str] | None = None) -> ConfigPrediction:
    """Predict the curve at value `at` of a setting from runs at other values (see the module docstring).

    runs: value -> SigmoidFit (with bootstrap samples) or (compute, score). names: value -> the
    run's display name. Returns a ConfigPrediction (parameters with intervals, band, reach, worth)."""
    at = as_number("at", at)
    level = as_number("level", level)
    if not 0 < level < 1:
        raise UserError(f"level must be in (0, 1), got {level}")
    r = check_runs(runs, at, seed, names)
    combo, table, loo = select_forms(r)
    n, rng = int(as_number("n_draws", n_draws, integer=True)), np.random.default_rng(seed)
    point, draws = carry_draws(r, at, n, rng) if combo is None else law_draws(r, combo, loo, at, n, rng)
    warnings = [f"run {n} did not converge ({f.reason}): the law weights its parameters by their (wide) intervals"
                for n, f in zip(r.names, r.fits) if not f.converged]
    one_seed = _one_seed_warning(key, [v for v, f in zip(r.values, r.fits) if len(f.run_names) < 2], len(r.values))
    if one_seed:
        warnings.append(one_seed)
    fallback = ""
    if combo is None:
        fallback = r.names[nearest(r.u, math.log(at))]
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
