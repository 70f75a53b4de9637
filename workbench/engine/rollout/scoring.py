"""Turning a rollout worker's verdicts into training groups and validation metrics.

    groups, dropped = verdict_groups(chunk_id, prompt_ids, n, outs, verdicts)
    metrics = validation_metrics(task.val, ids, k, verdicts)
    stats = reward_value_stats(verdicts)      # reward.functions' values as sums: a chunk's, summed per step

Verdicts come from `workbench.tasks.base.check_batch` (one per completion, prompt-major), or, for
an environment, `tasks/env/scoring.episode_verdicts`. A sample whose check hit a sandbox error (or
whose episode an environment fault ended: `env_error`) is never scored as a wrong answer: in
training its whole group is left out (counted in the chunk's `dropped_groups` and
`reward/verdict/sandbox_error` / `env_error`), in validation the sample is left out of its
prompt's mean (counted in `val/verdict/...`).
A verdict's reward is `rl/shaping.reward_for` (+1 / -1), or, with `reward.functions`, the weighted
sum they gave it (workbench.rl.reward_functions); `passed` is then the pass function's verdict, the one
validation counts, so a format bonus never moves `val/pass_rate`. A `not_applicable` verdict (the
pass function gave None) trains with the reward the other functions gave it (none: 0, which a
group of such samples alone, all 0, leaves to the zero-variance filter), and in validation is left
out of its prompt's mean like a sandbox error (a prompt with no applicable sample is left out of
`val/pass_rate` and `val/prompts`; counted in `val/verdict/not_applicable`). Each function's values
give `val/rewards/<name>/mean`, `/std` (over the samples it gave a value) and `/none` (the Nones).
More than half of a batch's checks failing that way stops the run (`refuse_broken_sandbox`).

Validation of a single task gives today's names (`val/pass_rate`, `val/pass_rate_se`, ...). A
mixed task adds, per domain, `val/pass_rate/<d>`, `val/pass_rate_se/<d>`, `val/pass_at_k/<d>` and
`val/prompts/<d>`; its overall `val/pass_rate` is the mean over domains of their pass rates
(each domain counts once, whatever the size of its validation set), with standard error
sqrt(sum of the domains' SE^2) / number of domains.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from workbench.engine.batch import Group
from workbench.runs.samples import group_note
from workbench.rl.reward_functions import ValueStats, value_metrics
from workbench.rl.shaping import reward_for
from workbench.tasks.base import refuse_broken_sandbox, verdict_counts
from workbench.tasks.types import VERDICTS, Example, Verdict

# verdicts left out of a validation prompt's pass rate: the sandbox or the environment failed, or the pass function does not apply
UNSCORED = ("sandbox_error", "not_applicable", "env_error")
# verdicts whose group is not trained on: nothing was judged (counted in the chunk's dropped_groups)
DROPS_GROUP = ("sandbox_error", "env_error")


def verdict_groups(
    chunk_id: int, prompt_ids: list[int], n: int, outs: list, verdicts: list[Verdict], texts: Optional[list[str]] = None,
    turns: Optional[list[str]] = None,
) -> tuple[list[Group], int]:
    """(groups, number of groups dropped for a sandbox or environment error) from prompt-major completions;
    `texts` (the decoded completions) go into each group's note (runs/samples.group_note)."""
    refuse_broken_sandbox(verdicts, f"chunk {chunk_id}")
    groups, dropped = [], 0
    for gi, pid in enumerate(prompt_ids):
        vs = verdicts[gi * n : (gi + 1) * n]
        if any(v.verdict in DROPS_GROUP for v in vs):
            dropped += 1
            continue
        correct = [v.passed for v in vs]
        rewards = [reward_for(v.passed) if v.reward is None else v.reward for v in vs]
        part = turns[gi * n : (gi + 1) * n] if turns is not None else None
        note = group_note(texts[gi * n : (gi + 1) * n], vs, part) if texts is not None else None
        groups.append(Group(pid, chunk_id, outs[gi * n : (gi + 1) * n], correct, rewards, note=note))
    return groups, dropped


def _summary(rates: np.ndarray) -> tuple[float, float, float]:
    """(mean, standard error over prompts, pass@k) of per-prompt pass rates."""
    if not len(rates):
        return float("nan"), float("nan"), float("nan")
    se = float(rates.std(ddof=1) / np.sqrt(len(rates))) if len(rates) > 1 else 0.0
    return float(rates.mean()), se, float((rates > 0).mean())


def validation_metrics(val: list[Example], ids: list[int], k: int, verdicts: list[Verdict]) -> dict[str, float]:
    """Pass rates over `k` verdicts per prompt `ids` (positions in `val`), overall and per domain."""
    refuse_broken_sandbox(verdicts, "a validation pass")
    rates: dict[str, list[float]] = {}
    for gi, i in enumerate(ids):
        vs = [v for v in verdicts[gi * k : (gi + 1) * k] if v.verdict not in UNSCORED]
        if vs:
            rates.setdefault(val[i].domain, []).append(float(np.mean([v.passed for v in vs])))
    out: dict[str, float] = {}
    mixed = any(val[i].domain for i in ids)
    if not mixed:
        r = np.asarray(rates.get("", []))
        mean, se, at_k = _summary(r)
        out.update({"val/pass_rate": mean, "val/pass_rate_se": se, "val/pass_at_k": at_k, "val/prompts": float(len(r))})
    else:
        means, ses, at_ks = [], [], []
        for d in dict.fromkeys(val[i].domain for i in ids):  # domains in order
            r = np.asarray(rates.get(d, []))
            mean, se, at_k = _summary(r)
            out.update({f"val/pass_rate/{d}": mean, f"val/pass_rate_se/{d}": se, f"val/pass_at_k/{d}": at_k,
                        f"val/prompts/{d}": float(len(r))})  # fmt: skip
            means.append(mean)
            ses.append(se)
            at_ks.append(at_k)
        out["val/pass_rate"] = float(np.mean(means))
        out["val/pass_rate_se"] = float(np.sqrt(np.sum(np.square(ses))) / len(ses))
        out["val/pass_at_k"] = float(np.mean(at_ks))
        out["val/prompts"] = float(sum(len(v) for v in rates.values()))
    out.update({f"val/verdict/{v}": float(c) for v, c in verdict_counts(verdicts).items()})
    out.update(value_metrics(reward_value_stats(verdicts), "val/rewards"))
    return out


def reward_value_stats(verdicts: list[Verdict]) -> dict[str, ValueStats]:
    """Each reward function's values over `verdicts` (those `reward.functions` scored), by name:
    sums that add up over a step's chunks (rl/reward_functions.ValueStats). {} without functions."""
    by_name: dict[str, list[float]] = {}
    for v in verdicts:
        for name, x in (v.values or {}).items():
            by_name.setdefault(name, []).append(float(x))
    return {name: ValueStats.of(xs) for name, xs in by_name.items()}


def chunk_verdict_metrics(verdicts: list[Verdict]) -> dict[str, float]:
    """`reward/verdict/<v>` counts of a batch of training checks (every verdict name, zeros included)."""
    counts = verdict_counts(verdicts)
    return {f"reward/verdict/{v}": float(counts[v]) for v in VERDICTS}
