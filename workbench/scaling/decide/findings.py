"""The leave-one-out findings table: each reverted choice against ScaleRL, beside the paper's finding.

A study is a mapping recipe -> its runs (seeds), each run a curve (compute, score). Every recipe is
fitted jointly over its seeds (shared A, B, C_mid; the bootstrap resamples whole runs), and each
leave-one-out recipe is set against the baseline:

    study = {"scalerl": [run0, run1, run2], "scalerl-loo-loss-dapo": [...], ...}
    table = findings(study, baseline="scalerl", left_out={"scalerl-loo-length-penalty": "why"})
    print(table)        # a markdown table, one row per choice
    table.rows[0].verdict

The paper's finding per choice is what the reference sheet states (ScaleRL, Khatri, Madaan et al.
2025, section "Other reported effects"): loss type, FP32 head, model size, generation length and
batch size move the asymptote A; aggregation, advantage normalisation, curriculum and the
off-policy algorithm mostly move efficiency B; CISPO's B 2.01 against DAPO's 1.77.

A verdict compares the choice on the quantity the paper says it moves, with the paper's margin
on A (+-0.02) and the bootstrap interval of the difference:
- "agrees": the reverted recipe is worse on that quantity, beyond the margin and the noise;
- "disagrees": it is better beyond both, or (for an efficiency choice) it moved A instead;
- "not separable at this scale": the difference is within the margin or the noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from workbench.errors import UserError
from workbench.scaling.decide.compare import diff_interval
from workbench.scaling.fit.result import SigmoidFit
from workbench.scaling.fit.sigmoid import fit_sigmoid_multi, refit_at_shared_A
from workbench.scaling.forecast.families import A_MARGIN

Moves = Literal["A", "B", ""]


@dataclass(frozen=True)
class PaperClaim:
    """What the paper says about one reverted choice (from the reference sheet, nothing more)."""

    choice: str  # the choice the preset reverts
    moves: Moves  # "A": the asymptote; "B": mostly efficiency; "": the sheet does not say
    says: str


_A_MOVERS = "the sheet lists loss type among the choices that move the asymptote"
_B_MOVERS = "the sheet lists {} among the choices that mostly move efficiency"
PAPER_CLAIMS: dict[str, PaperClaim] = {
    "scalerl-loo-loss-dapo": PaperClaim("DAPO loss instead of CISPO", "A", _A_MOVERS + "; CISPO B 2.01 vs DAPO 1.77"),
    "scalerl-loo-loss-gspo": PaperClaim("GSPO loss instead of CISPO", "A", _A_MOVERS),
    "scalerl-loo-no-fp32": PaperClaim("LM head in the model's dtype", "A", "FP32 logits at the LM head raise A from 0.52 to 0.61"),
    "scalerl-loo-agg-sample": PaperClaim("sample-level aggregation", "B", _B_MOVERS.format("aggregation")),
    "scalerl-loo-agg-token": PaperClaim("token-level aggregation", "B", _B_MOVERS.format("aggregation")),
    "scalerl-loo-norm-prompt": PaperClaim("per-prompt advantage std", "B", _B_MOVERS.format("advantage normalisation")),
    "scalerl-loo-norm-none": PaperClaim("no advantage normalisation", "B", _B_MOVERS.format("advantage normalisation")),
    "scalerl-loo-no-zvf": PaperClaim("keep zero-variance prompts", "B", _B_MOVERS.format("curriculum (read here as the data filters)")),
    "scalerl-loo-no-npr": PaperClaim("no No-Positive-Resampling", "B", _B_MOVERS.format("curriculum (read here as the data filters)")),
    "scalerl-loo-ppo-off-policy": PaperClaim("PPO-off-policy-k instead of PipelineRL-k", "B", _B_MOVERS.format("the off-policy algorithm")),
    "scalerl-loo-length-penalty": PaperClaim("length penalty instead of forced interruption", "", "the sheet states no direction for length control"),
    "scalerl-sync": PaperClaim("synchronous RL instead of PipelineRL-k", "", "not a leave-one-out row: the price of asynchrony"),
}

Verdict = Literal["agrees", "disagrees", "not separable at this scale", "no claim to test", "left out"]


@dataclass(frozen=True)
class FindingRow:
    recipe: str
    choice: str
    runs: int
    A: float
    A_ci: tuple[float, float]
    B: float
    B_ci: tuple[float, float]
    dA: float  # this recipe's A minus the baseline's
    dA_ci: tuple[float, float]
    dB: float  # B minus the baseline's: refit at their shared mean A when A ties (the paper's way), else as fitted
    dB_ci: tuple[float, float]
    paper_moves: Moves
    paper_says: str
    verdict: Verdict
    why: str  # the numbers behind the verdict, or why the row was left out


@dataclass
class Findings:
    baseline: str
    base_fit: SigmoidFit
    rows: list[FindingRow]
    margin: float

    def __str__(self) -> str:
        b = self.base_fit
        head = (f"baseline {self.baseline}: A {b.A:.3f} [{b.A_ci[0]:.3f}, {b.A_ci[1]:.3f}], "
                f"B {b.B:.2f} [{b.B_ci[0]:.2f}, {b.B_ci[1]:.2f}]")
        lines = [head, "", "| choice reverted | runs | A | dA | dB (at shared A on a tie) | paper | verdict |", "|---|---|---|---|---|---|---|"]
        for r in self.rows:
            if r.verdict == "left out":
                lines.append(f"| {r.choice} ({r.recipe}) | - | - | - | - | {r.paper_says} | left out: {r.why} |")
                continue
            lines.append(
                f"| {r.choice} ({r.recipe}) | {r.runs} | {r.A:.3f} [{r.A_ci[0]:.3f}, {r.A_ci[1]:.3f}] "
                f"| {r.dA:+.3f} [{r.dA_ci[0]:+.3f}, {r.dA_ci[1]:+.3f}] | {_signed(r.dB, r.dB_ci)} "
                f"| {f'moves {r.paper_moves}: ' if r.paper_moves else ''}{r.paper_says} | {r.verdict}: {r.why} |"
            )
        lines.append(f"\n(A within +-{self.margin:g} of the baseline is a tie; intervals are 95% bootstrap intervals over whole runs)")
        return "\n".join(lines)


def _signed(v: float, ci: tuple[float, float]) -> str:
    return "-" if not math.isfinite(v) else f"{v:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _excludes_zero(ci: tuple[float, float]) -> bool:
    return ci[0] > 0 or ci[1] < 0


def fit_study(study: Mapping[str, Sequence[Any]], **fit_kw: Any) -> dict[str, SigmoidFit]:
    """One joint fit per recipe over its seeds."""
    fits = {}
    for name, runs in study.items():
        if not runs:
            raise UserError(f"findings: recipe {name!r} has no runs")
        fits[name] = fit_sigmoid_multi({f"{name}#{i}": r for i, r in enumerate(runs)}, **fit_kw)
    return fits


def findings(study: Mapping[str, Sequence[Any]], *, baseline: str = "scalerl", left_out: Mapping[str, str] | None = None,
             claims: Mapping[str, PaperClaim] | None = None, margin: float = A_MARGIN, level: float = 0.95,
             seed: int = 0, fits: Mapping[str, SigmoidFit] | None = None, **fit_kw: Any) -> Findings:
    """The findings table of a leave-one-out study (module docstring). `left_out` names recipes whose
    choice cannot be active in this setup, with the reason; they get a row without numbers."""
    if baseline not in study:
        raise UserError(f"findings: the baseline {baseline!r} is not in the study (recipes: {', '.join(sorted(study))})")
    claims = PAPER_CLAIMS if claims is None else claims
    left_out = dict(left_out or {})
    fits = dict(fits) if fits is not None else fit_study({n: r for n, r in study.items() if n not in left_out}, seed=seed, level=level, **fit_kw)
    rng = np.random.default_rng(seed)
    base = fits[baseline]
    rows = []
    order = list(claims)  # rows in the paper's order of choices, whatever order the runs came in
    names = sorted({n for n in study if n != baseline} | set(left_out), key=lambda n: (order.index(n) if n in order else len(order), n))
    for name in names:
        claim = claims.get(name, PaperClaim(name, "", "not a choice the sheet reports on"))
        if name in left_out:
            nan2 = (math.nan, math.nan)
            rows.append(FindingRow(name, claim.choice, 0, math.nan, nan2, math.nan, nan2, math.nan, nan2, math.nan, nan2,
                                   claim.moves, claim.says, "left out", left_out[name]))
            continue
        rows.append(_row(name, fits[name], base, claim, len(study[name]), margin, level, rng))
    return Findings(baseline, base, rows, margin)


def _row(name: str, fit: SigmoidFit, base: SigmoidFit, claim: PaperClaim, runs: int, margin: float, level: float,
         rng: np.random.Generator) -> FindingRow:
    dA = fit.A - base.A
    dA_ci = diff_interval(fit.samples[:, 0], base.samples[:, 0], level, rng, least=1000)
    a_moved = abs(dA) > margin and _excludes_zero(dA_ci)
    dB, dB_ci = math.nan, (math.nan, math.nan)
    if not (fit.no_gain or base.no_gain):
        mine, theirs = fit, base
        if abs(dA) <= margin:  # a tie on A: compare B at the shared mean A, the paper's way
            shared = 0.5 * (fit.A + base.A)
            mine, theirs = refit_at_shared_A(fit, shared), refit_at_shared_A(base, shared)
        dB, dB_ci = mine.B - theirs.B, diff_interval(mine.samples[:, 1], theirs.samples[:, 1], level, rng, least=1000)
    b_moved = math.isfinite(dB) and _excludes_zero(dB_ci)
    where = ("beyond the +-{m:g} margin and the noise" if a_moved else "beyond the +-{m:g} margin but within the noise"
             if abs(dA) > margin else "within the +-{m:g} margin").format(m=margin)
    a_txt = f"dA {dA:+.3f} {where}"
    b_txt = f"dB {dB:+.2f} " + ("beyond the noise" if b_moved else "within the noise") if math.isfinite(dB) else "B not comparable (no gain)"
    verdict: Verdict
    if claim.moves == "A":
        verdict = ("agrees" if dA < 0 else "disagrees") if a_moved else "not separable at this scale"
        why = a_txt
    elif claim.moves == "B":
        if a_moved:
            verdict, why = "disagrees", a_txt + " (the paper: mostly efficiency)"
        else:
            verdict = ("agrees" if dB < 0 else "disagrees") if b_moved else "not separable at this scale"
            why = f"{a_txt}; {b_txt}"
    else:
        verdict, why = "no claim to test", f"{a_txt}; {b_txt}"
    return FindingRow(name, claim.choice, runs, fit.A, tuple(fit.A_ci), fit.B, tuple(fit.B_ci), dA, dA_ci, dB, dB_ci,
                      claim.moves, claim.says, verdict, why)
