"""The laws behind `predict_config`: each fitted parameter as a form in the log of a setting, chosen by a
leave-one-out backtest against carrying the nearest run's curve over, and the draws that carry the
runs' uncertainty to an unseen value. The model is described in `config_curve`'s docstring; this
module holds its numbers and is used only there.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from scipy.special import expit, logit

from workbench.errors import UserError, as_number
from workbench.scaling.data import r0_rule
from workbench.scaling.fit.result import SigmoidFit, _curve
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
class LadderRuns:
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
        return usable_samples(self.fits[i])

    def weights(self, k: int, link: str) -> np.ndarray:
        if k == 0:  # R0 is measured: no fit variance, equal weights
            return np.ones(len(self.fits))
        var = np.array([np.var(_to(link, self.samples(i)[:, k - 1])) for i in range(len(self.fits))])
        return 1.0 / (var + np.median(var) + 1e-12)

    def observed(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        f = self.fits[i]
        return f.compute[f.used], f.score[f.used]


def usable_samples(fit: SigmoidFit) -> np.ndarray:
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


def check_runs(runs: Mapping[Any, Any], at: float, seed: int, names: Mapping[Any, str] | None) -> LadderRuns:
    if not isinstance(runs, Mapping):
        raise UserError(f"runs must be a dict: value of the setting -> SigmoidFit or (compute, score), got a {type(runs).__name__}")
    if len(runs) < MIN_RUNS:
        raise UserError(f"runs at {len(runs)} value(s) of the setting given: predicting a configuration needs runs at "
                        f"{MIN_RUNS} or more values (a value's seeds count once)")
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
    return LadderRuns(np.array(sorted(vals)), fits, labels)


def _loo_params(r: LadderRuns) -> dict[tuple[int, int], np.ndarray]:
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


def nearest(u: np.ndarray, at: float, exclude: int | None = None) -> int:
    """Index of the run nearest to `at` in log value (a tie goes to the larger run)."""
    d = np.abs(u - at) - 1e-9 * u  # the tie-break: larger u is nearer
    if exclude is not None:
        d[exclude] = np.inf
    return int(np.argmin(d))


def _carry_loo(r: LadderRuns) -> np.ndarray:
    """(n, 4): each run's parameters as predicted by its nearest other run's (leave-one-out)."""
    return np.array([r.point[nearest(r.u, r.u[j], exclude=j)] for j in range(len(r.fits))])


def _rmse(c: np.ndarray, y: np.ndarray, params: Any) -> float:
    return float(np.sqrt(np.mean((_curve(c, *params) - y) ** 2)))


def select_forms(r: LadderRuns) -> tuple[tuple[int, ...] | None, list[dict[str, Any]], dict[tuple[int, int], np.ndarray]]:
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


def law_draws(r: LadderRuns, combo: tuple[int, ...], loo: Mapping[tuple[int, int], np.ndarray], at: float, n_draws: int,
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


def carry_draws(r: LadderRuns, at: float, n_draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(point, draws) of the nearest run's curve carried over: its bootstrap replicates plus z x one
    neighbour-to-neighbour difference of the parameters (the error of assuming nothing changes)."""
    i = nearest(r.u, math.log(at))
    s = r.samples(i)
    picked = np.column_stack([np.full(n_draws, r.point[i, 0]), s[rng.integers(0, len(s), n_draws)]])
    diff = np.column_stack([_to(link, r.point[:, k]) - _to(link, _carry_loo(r)[:, k]) for k, link in enumerate(_CARRY_LINKS)])
    step = diff[rng.integers(0, len(r.fits), n_draws)] * rng.standard_normal(n_draws)[:, None]
    draws = np.column_stack([_back(link, _to(link, picked[:, k]) + step[:, k]) for k, link in enumerate(_CARRY_LINKS)])
    draws[:, :2] = np.clip(draws[:, :2], 0, 1)
    return r.point[i].copy(), draws
