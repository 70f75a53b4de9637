"""Early decisions, measured: would a fraction of each run have ranked the recipes as the full runs do?

A study is a mapping recipe -> its runs (seeds), each run a curve (compute, score), as in
`findings`. Each run is cut at a fraction of its own compute (25% and 50% by default); the cut
runs are fitted per recipe and ranked two ways:
- by forecast: the fitted curve's score at the recipe's full compute (the mean over its runs);
- by A then B: `compare` under the paper's +-0.02 rule on A.

The truth is the full runs. Only the pairs the full runs separate are scored:
- by forecast: the measured final scores (each run's last three points), whose t-intervals over
  the seeds do not overlap;
- by A then B: A intervals that do not overlap beyond the margin, or, for a tie on A, intervals
  of B refit at the shared A that do not overlap.
With fewer than `min_pairs` separable pairs the share is not reported (None): at that count a
percentage says nothing.

    calls = early_calls(study)          # [EarlyCall(fraction=0.25, by="forecast", ...), ...]
    for c in calls: print(c.sentence())

A `workbench sweep --stop-early` run of the same grid is scored against the full runs too:
`stop_early_check(study, stopped={recipe: runs stopped}, runs={recipe: runs}, saved_frac=...)`
says how much compute it saved, which recipes it dropped (every run stopped) or cut (some runs
stopped), and whether either touched a recipe that ended in the full runs' top 3 (by measured
final score, as above).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from scipy import stats

from workbench.errors import UserError
from workbench.scaling.data import as_curve
from workbench.scaling.decide.compare import Comparison, compare
from workbench.scaling.decide.findings import fit_study
from workbench.scaling.fit.result import SigmoidFit
from workbench.scaling.forecast.families import A_MARGIN

Ranking = Literal["forecast", "A then B"]


@dataclass(frozen=True)
class EarlyCall:
    fraction: float  # of each run's compute that the early fits saw
    by: Ranking
    ranking: list[str]  # the early ranking, best first
    separable: int  # pairs the full runs separate
    correct: int  # of those, ordered the same way early
    share: float | None  # correct / separable; None below the minimum count of pairs
    winner: str | None  # the full runs' winner; None when their top two are not separable
    picked: bool | None  # the early ranking put the winner first; None without a winner

    def sentence(self) -> str:
        head = f"at {self.fraction:.0%} of compute, ranked by {self.by}: "
        if self.share is None:
            pairs = f"not measurable at this scale ({self.separable} separable pairs, {self.correct} ordered correctly)"
        else:
            pairs = f"{self.share:.0%} of {self.separable} separable pairs ordered correctly"
        if self.winner is None:
            top = "no winner to pick (the full runs' top two are not separable)"
        else:
            top = f"the winner {self.winner} {'picked' if self.picked else 'not picked'} (early top: {self.ranking[0]})"
        return head + pairs + "; " + top


def cut(run: Any, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """A run's points up to `fraction` of its own last compute."""
    c = as_curve(run)
    keep = c.compute <= fraction * float(np.max(c.compute)) + 1e-12
    return c.compute[keep], c.score[keep]


def _final(runs: Sequence[Any], level: float) -> tuple[float, float, float]:
    """Mean measured final score over the runs (each run's last three points), with its t-interval."""
    finals = np.array([float(np.mean(as_curve(r).score[-3:])) for r in runs])
    m = float(finals.mean())
    if len(finals) < 2:
        return m, -math.inf, math.inf
    half = float(stats.t.ppf((1 + level) / 2, len(finals) - 1) * finals.std(ddof=1) / math.sqrt(len(finals)))
    return m, m - half, m + half


def _apart(lo1: float, hi1: float, lo2: float, hi2: float) -> bool:
    return hi1 < lo2 or hi2 < lo1


def _truth_by_forecast(study: Mapping[str, Sequence[Any]], level: float) -> tuple[dict[tuple[str, str], bool], str | None]:
    """(pair -> first is better) for the separable pairs, and the separable winner."""
    fin = {n: _final(r, level) for n, r in study.items()}
    order = sorted(fin, key=lambda n: -fin[n][0])
    better = {(a, b): fin[a][0] > fin[b][0] for a in order for b in order if a < b and _apart(*fin[a][1:], *fin[b][1:])}
    top2 = order[:2]
    winner = order[0] if len(order) == 1 or _apart(*fin[top2[0]][1:], *fin[top2[1]][1:]) else None
    return better, winner


def _truth_by_a_then_b(cmp: Comparison, margin: float) -> dict[tuple[str, str], bool]:
    rows = {r.name: r for r in cmp.rows}
    better = {}
    for a in rows:
        for b in rows:
            if not a < b:
                continue
            x, y = rows[a], rows[b]
            if x.group != y.group:
                sep = abs(x.A - y.A) > margin and _apart(x.A_lo, x.A_hi, y.A_lo, y.A_hi)
            else:
                sep = all(map(math.isfinite, (x.B_shared, y.B_shared))) and _apart(x.B_shared_lo, x.B_shared_hi, y.B_shared_lo, y.B_shared_hi)
            if sep:
                better[(a, b)] = x.rank < y.rank
    return better


def _score(fraction: float, by: Ranking, ranking: list[str], truth: Mapping[tuple[str, str], bool], winner: str | None,
           min_pairs: int) -> EarlyCall:
    pos = {n: i for i, n in enumerate(ranking)}
    correct = sum((pos[a] < pos[b]) == first_better for (a, b), first_better in truth.items())
    share = correct / len(truth) if len(truth) >= min_pairs else None
    return EarlyCall(fraction, by, ranking, len(truth), correct, share, winner, None if winner is None else ranking[0] == winner)


def early_calls(study: Mapping[str, Sequence[Any]], *, fractions: Sequence[float] = (0.25, 0.5), min_pairs: int = 10,
                margin: float = A_MARGIN, level: float = 0.95, seed: int = 0, fits: Mapping[str, SigmoidFit] | None = None,
                **fit_kw: Any) -> list[EarlyCall]:
    """Score early rankings against the full runs' (module docstring), per fraction and ranking.
    `fits`: the full runs' joint fits when already made (`findings.fit_study`), else fitted here."""
    if len(study) < 2:
        raise UserError(f"early_calls needs at least two recipes, got {len(study)}")
    if any(not 0 < f < 1 for f in fractions):
        raise UserError(f"early_calls: fractions must lie in (0, 1), got {list(fractions)}")
    full = dict(fits) if fits is not None else fit_study(study, seed=seed, level=level, **fit_kw)
    full_cmp = compare(full, margin=margin, level=level, seed=seed)
    truth_f, winner_f = _truth_by_forecast(study, level)
    truth_ab, winner_ab = _truth_by_a_then_b(full_cmp, margin), full_cmp.winner
    budget = {n: float(np.mean([np.max(as_curve(r).compute) for r in runs])) for n, runs in study.items()}
    out = []
    for f in fractions:
        fits = fit_study({n: [cut(r, f) for r in runs] for n, runs in study.items()}, seed=seed, level=level, **fit_kw)
        by_forecast = sorted(fits, key=lambda n: -float(fits[n].predict(budget[n])))
        out.append(_score(f, "forecast", by_forecast, truth_f, winner_f, min_pairs))
        by_ab = [r.name for r in compare(fits, margin=margin, level=level, seed=seed).rows]
        out.append(_score(f, "A then B", by_ab, truth_ab, winner_ab, min_pairs))
    return out


@dataclass(frozen=True)
class StopEarlyCheck:
    saved_frac: float  # of the grid's compute, not spent
    stopped_runs: int  # runs stopped, of `runs`
    runs: int
    dropped: list[str]  # recipes every run of which was stopped
    cut: list[str]  # recipes some (not all) runs of which were stopped
    recipes: int  # in the grid
    top: list[str]  # the full runs' top `len(top)` by measured final score

    @property
    def dropped_top(self) -> list[str]:
        return [n for n in self.top if n in self.dropped]

    @property
    def cut_top(self) -> list[str]:
        return [n for n in self.top if n in self.cut]

    def sentence(self) -> str:
        top = f"the full runs' top {len(self.top)} ({', '.join(self.top)})"
        parts = [f"stop-early on the same grid saved {self.saved_frac:.0%} of its compute, stopping {self.stopped_runs} of "
                 f"{self.runs} runs; it dropped {len(self.dropped)} of {self.recipes} recipes (every run stopped)"
                 + (f": {', '.join(self.dropped)}" if self.dropped else "")]
        if self.cut:
            parts.append(f"it stopped some runs of {', '.join(self.cut)}")
        if self.dropped_top:
            parts.append(f"it DROPPED {', '.join(self.dropped_top)}, in {top}")
        elif self.cut_top:
            parts.append(f"it dropped none of {top}, but stopped runs of {', '.join(self.cut_top)}")
        else:
            parts.append(f"it stopped no run of {top}")
        return "; ".join(parts)


def stop_early_check(study: Mapping[str, Sequence[Any]], stopped: Mapping[str, int], runs: Mapping[str, int],
                     saved_frac: float, *, top: int = 3, level: float = 0.95) -> StopEarlyCheck:
    """Score a stop-early sweep of the same grid against the full runs of `study`: `stopped` and
    `runs` count each recipe's stopped runs and all its runs there; `saved_frac` is its saved share
    of compute. A recipe is dropped when every run of it was stopped."""
    unknown = sorted((set(stopped) | set(runs)) - set(study))
    if unknown:
        raise UserError(f"the stop-early sweep ran recipes the study does not hold: {', '.join(unknown)}")
    fin = {n: _final(r, level)[0] for n, r in study.items()}
    best = sorted(fin, key=lambda n: -fin[n])[:top]
    hit = {n: k for n, k in stopped.items() if k > 0}
    dropped = sorted(n for n, k in hit.items() if k >= runs.get(n, k))
    cut = sorted(n for n in hit if n not in dropped)
    return StopEarlyCheck(float(saved_frac), sum(hit.values()), sum(runs.values()), dropped, cut, len(study), best)
