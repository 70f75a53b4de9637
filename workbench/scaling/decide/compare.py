"""Rank recipes by their fitted curves, and say which differences are real.

The paper's rule (ScaleRL A.5): three seeds of one recipe gave A within +-0.015, so two recipes
whose asymptotes differ by at most 0.02 tie on A. Tied recipes are refit with A held at their
shared mean A and then compared on B (compute efficiency).

    cmp = compare({"cispo": fit1, "dapo": fit2, "grpo": fit3})
    print(cmp)          # ranked text table with intervals and a verdict per row
    cmp.to_frame()      # pandas DataFrame
    cmp.winner          # name of the top recipe, or None when the top is a tie on A and B

A difference counts as real only when it clears the margin AND the bootstrap interval of the
difference (replicates of independent fits paired at random) excludes 0; otherwise it is reported
as not distinguishable. Tie groups are formed top-down: a group holds every recipe whose A lies
within `margin` of the group's best A.

A no-gain fit (flat forecast, `SigmoidFit.no_gain`) ranks by its level (its A, with the level's
interval); it has no B, so it is never refit at a shared A, sorts after the rising recipes of its
tie group, and a tie on A with it has no winner on B ("B not comparable").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from workbench.errors import UserError
from workbench.scaling.data import as_curve
from workbench.scaling.forecast.families import A_MARGIN  # owned there: the ceiling check and SigmoidFit use it too
from workbench.scaling.fit.result import SigmoidFit, _ci
from workbench.scaling.fit.sigmoid import fit_sigmoid_multi, refit_at_shared_A


@dataclass(frozen=True)
class CompareRow:
    rank: int
    name: str
    A: float
    A_lo: float
    A_hi: float
    B: float
    B_lo: float
    B_hi: float
    C_mid: float
    C_mid_lo: float
    C_mid_hi: float
    group: int  # recipes in one group tie on A
    shared_A: float  # the group's mean A (nan for a group of one)
    B_shared: float  # B refit at shared_A (nan for a group of one)
    B_shared_lo: float
    B_shared_hi: float
    verdict: str


@dataclass
class Comparison:
    rows: list[CompareRow]
    margin: float
    winner: str | None

    def to_records(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.rows]

    def to_frame(self) -> Any:
        import pandas as pd  # lazy: the science stays numpy/scipy

        return pd.DataFrame(self.to_records()).set_index("rank")

    def __str__(self) -> str:
        w = max([4] + [len(r.name) for r in self.rows])
        lines = [f"{'#':>2} {'recipe':<{w}} {'A':>7} {'A interval':>17} {'B':>6} {'B interval':>15} {'B@shared A':>18}  verdict"]
        for r in self.rows:
            shared = f"{r.B_shared:.2f} [{r.B_shared_lo:.2f},{r.B_shared_hi:.2f}]" if math.isfinite(r.B_shared) else "-"
            lines.append(
                f"{r.rank:>2} {r.name:<{w}} {r.A:>7.4f} [{r.A_lo:.4f}, {r.A_hi:.4f}] {r.B:>6.2f} [{r.B_lo:5.2f}, {r.B_hi:5.2f}] {shared:>18}  {r.verdict}"
            )
        lines.append(f"(A within +-{self.margin:g} is a tie; tied recipes are compared on B refit at their shared mean A)")
        return "\n".join(lines)


def diff_interval(a: np.ndarray, b: np.ndarray, level: float, rng: np.random.Generator, least: int = 0) -> tuple[float, float]:
    """Interval of a - b from two fits' bootstrap replicates paired at random (at least `least` pairs);
    (nan, nan) when either has none."""
    if len(a) == 0 or len(b) == 0:
        return (math.nan, math.nan)
    k = max(len(a), len(b), least)
    return _ci(a[rng.integers(0, len(a), k)] - b[rng.integers(0, len(b), k)], level)


def _diff_excludes_zero(a: np.ndarray, b: np.ndarray, level: float, rng: np.random.Generator) -> bool:
    lo, hi = diff_interval(a, b, level, rng)
    return lo > 0 or hi < 0


def compare(
    fits: Mapping[str, SigmoidFit],
    *,
    curves: Mapping[str, Any] | None = None,
    margin: float = A_MARGIN,
    level: float = 0.95,
    seed: int = 0,
) -> Comparison:
    """Rank recipes by A, then B, with the paper's +-margin tie rule on A.

    curves: optional raw data per name (a Curve, (compute, score) or a list of runs) used to refit
    B at the shared A; by default each fit's own stored data is refit.
    """
    if not isinstance(fits, Mapping):
        raise UserError(f"compare takes a dict name -> SigmoidFit (e.g. {{'baseline': fit_a, 'ablation': fit_b}}), got a {type(fits).__name__}")
    if not fits:
        raise UserError("compare needs at least one fit")
    for name, f in fits.items():
        if not isinstance(f, SigmoidFit):
            raise UserError(f"compare: {name!r} is a {type(f).__name__}, not a SigmoidFit")
    rng = np.random.default_rng(seed)
    names = sorted(fits, key=lambda n: (-fits[n].A, _neg_b(fits[n])))
    groups: list[list[str]] = []
    for n in names:  # top-down: a group holds all A within margin of its best
        if groups and fits[groups[-1][0]].A - fits[n].A <= margin:
            groups[-1].append(n)
        else:
            groups.append([n])

    shared: dict[str, SigmoidFit] = {}
    for g in groups:
        if len(g) < 2:
            continue
        a_shared = float(np.mean([fits[n].A for n in g]))
        for n in g:
            if fits[n].no_gain:
                continue  # no B to refit: the tie is reported as not comparable on B
            shared[n] = _refit(fits[n], a_shared, None if curves is None else curves.get(n))

    def b_key(n: str) -> float:
        return -_neg_b(shared[n] if n in shared else fits[n])

    ordered = [n for g in groups for n in sorted(g, key=lambda n: -b_key(n))]
    group_of = {n: i + 1 for i, g in enumerate(groups) for n in g}
    rows = []
    for rank, n in enumerate(ordered, start=1):
        f, s = fits[n], shared.get(n)
        rows.append(
            CompareRow(
                rank, n, f.A, *f.A_ci, f.B, *f.B_ci, f.C_mid, *f.C_mid_ci,
                group=group_of[n],
                shared_A=s.A if s else math.nan,
                B_shared=s.B if s else math.nan,
                B_shared_lo=s.B_ci[0] if s else math.nan,
                B_shared_hi=s.B_ci[1] if s else math.nan,
                verdict=_verdict(n, ordered, fits, shared, group_of, margin, level, rng),
            )
        )
    return Comparison(rows, margin, _winner(ordered, fits, shared, group_of, margin, level, rng))


def _neg_b(f: SigmoidFit) -> float:
    """Sort key: -B, with no-gain fits (B is NaN) after every rising one."""
    return math.inf if f.no_gain or not math.isfinite(f.B) else -f.B


def _refit(fit: SigmoidFit, a: float, raw: Any) -> SigmoidFit:
    if raw is None:
        return refit_at_shared_A(fit, a)
    runs = raw if isinstance(raw, (list, dict)) else [as_curve(raw)]
    return fit_sigmoid_multi(runs, r0=fit.R0, fit_from=fit.fit_from, fit_until=fit.fit_until, fixed_A=a, n_boot=max(len(fit.samples), 0), level=fit.level, seed=fit.seed)


def _b_samples(n: str, fits: Mapping[str, SigmoidFit], shared: dict[str, SigmoidFit]) -> np.ndarray:
    return (shared[n] if n in shared else fits[n]).samples[:, 1]


def _verdict(n, ordered, fits, shared, group_of, margin, level, rng) -> str:
    flat = "no gain detected, ranked by its level; " if fits[n].no_gain else ""
    i = ordered.index(n)
    if i + 1 >= len(ordered):
        return flat + ("last" if len(ordered) > 1 else "only recipe")
    m = ordered[i + 1]
    if group_of[n] != group_of[m]:
        dA = fits[n].A - fits[m].A
        real = _diff_excludes_zero(fits[n].samples[:, 0], fits[m].samples[:, 0], level, rng)
        return flat + f"A above {m} by {dA:.3f}: " + ("real" if real else "beyond the margin but within the noise")
    if fits[n].no_gain or fits[m].no_gain:
        who = n if fits[n].no_gain else m
        return flat + f"ties {m} on A (|dA| <= {margin:g}); B not comparable: no gain detected in {who}"
    diff = shared[n].B - shared[m].B
    real = _diff_excludes_zero(_b_samples(n, fits, shared), _b_samples(m, fits, shared), level, rng)
    return f"ties {m} on A (|dA| <= {margin:g}); B at shared A higher by {diff:.2f}: " + ("real" if real else "not distinguishable")


def _winner(ordered, fits, shared, group_of, margin, level, rng) -> str | None:
    if len(ordered) == 1:
        return ordered[0]
    a, b = ordered[0], ordered[1]
    if group_of[a] != group_of[b]:
        return a
    if fits[a].no_gain or fits[b].no_gain:
        return None  # tied on A, and one of them has no B to compare
    return a if _diff_excludes_zero(_b_samples(a, fits, shared), _b_samples(b, fits, shared), level, rng) else None
