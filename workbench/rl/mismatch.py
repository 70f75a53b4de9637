"""The training/inference mismatch: how far the trainer's log-probs of the tokens it trains on
are from the log-probs the generator sampled them with, where both should be the same policy.

    part = mismatch_partial(logp, gen_logp, mask, versions, version, bound=(0.5, 2.0))  # one micro-batch
    add_partial(sums, part)                       # engine/train/micro.py folds micro-batches and ranks
    stats.update(mismatch_metrics(sums))          # pops the partial keys, returns train/mismatch_*

Which tokens: those sampled by `version`, scored by the trainer under that same version's weights,
so any gap is pure mismatch (numerics: bf16 vs fp32, kernels, vLLM's sampler). The trainer calls
this on its own forward with its current version (the loss's forward, free), and on up to
`train.mismatch_rows` rows with each earlier version whose weights it keeps for this
(engine/train/lagged.py: as many as the pipeline runs ahead): in a pipelined run most tokens were
sampled one or two versions back. Tokens from older versions would add the policy change of
staleness on top, so they are left out;
`train/mismatch_tokens` counts the tokens measured (0: none this step, the metrics are NaN, logged
as null).

With d = logp_trainer - logp_generator on a token x the generator sampled, the ratio is
r = exp(d) = pi_trainer(x) / pi_gen(x), and the k3 estimator r - 1 - log r = exp(d) - 1 - d is
an unbiased, always non-negative estimate of KL(gen || trainer) from the generator's samples
(Schulman's k3; the direction whose samples we have). Identical log-probs give KL 0, ratio 1,
and no token out of the bound.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

# The ratio bound of `train/mismatch_frac` when none is configured (`train.mismatch_bound`).
DEFAULT_BOUND = (0.5, 2.0)
# The partial sums' keys: "_max" folds by max in engine/train/micro.add_partial, the rest add up.
_K3, _OUT, _COUNT, _MAX = "mismatch_k3_sum", "mismatch_out_sum", "mismatch_count", "mismatch_ratio_max"


def mismatch_partial(
    logp: torch.Tensor, gen_logp: torch.Tensor, mask: torch.Tensor, versions: torch.Tensor, version: int,
    bound: Sequence[float] = DEFAULT_BOUND,
) -> dict[str, float]:  # fmt: skip
    """Partial sums over one micro-batch's tokens with mask > 0 sampled by `version` (all [N, T])."""
    lo, hi = float(bound[0]), float(bound[1])
    pick = (mask > 0) & (versions == version)
    d = (logp.detach() - gen_logp)[pick].double()  # float64: exp(d) - 1 - d cancels for small d
    if not d.numel():
        return {_COUNT: 0.0}
    ratio = d.exp()
    return {
        _K3: float((ratio - 1.0 - d).sum()),
        _OUT: float(((ratio < lo) | (ratio > hi)).sum()),
        _COUNT: float(d.numel()),
        _MAX: float(ratio.max()),
    }


def mismatch_metrics(sums: dict[str, float]) -> dict[str, float]:
    """The step's `train/mismatch_*` from the folded partial sums; pops their keys from `sums`."""
    k3, out, n = (sums.pop(k, 0.0) for k in (_K3, _OUT, _COUNT))
    top = sums.pop(_MAX, math.nan)
    return {
        "train/mismatch_kl": k3 / n if n else math.nan,
        "train/mismatch_ratio_max": top if n else math.nan,
        "train/mismatch_frac": out / n if n else math.nan,
        "train/mismatch_tokens": float(n),
    }
