"""Run health: rules over a run's metric rows that flag it going wrong before its curve says so.

    flags = check_health(rows, cfg.health)     # [HealthFlag(rule, step, metric, message)], [] for a healthy run
    note = verdict_note(flags)                 # "the forecast assumes the run stays healthy; from step N, ..."

Pure: metric rows in (metrics.jsonl's, `{"step": N, key: value}`), flags out; no Ray, no files.
A flag is a `HealthFlag`; summary.json and the report hold it as `flag.as_dict()`
(`HealthFlag.from_dict` reads it back).
The engine puts the flags in summary.json (`health`) and on the MLflow run as tags
(`health/<rule>` = message) at each evaluation and at the end; the run report prints them and
the forecast's verdict names the first (workbench/runs/report.py). Thresholds are `health:` in
the run config (HealthConfig in workbench/config/health.py; the defaults below when none is given).

The rules (each reports its first occurrence only). Each fires on a change, not on a level the
run starts at: a run that starts with most completions cut off, or most groups all-fail, and
improves is learning, not going wrong (the SmolLM2 route starts at 70% truncation and falls to 0).
Two also stand down while the run is learning: while validation has risen, the latest evaluation
at or before the step standing above the first one by more than `divergence` and twice their
noise (val/pass_rate_se). Such a flag comes once the gain is gone.

- `mismatch`: train/mismatch_kl growing: its running median above `mismatch_growth` x its early
  level and above the floor `mismatch_kl`.
- `entropy`: train/entropy's running median below (1 - `entropy_drop`) x its start: the highest of
  its first `window` values (a median there would already hold a collapse in the first steps),
  while validation has not risen (SmolLM2's entropy falls 80% as it learns to answer briefly:
  learning to answer, not a collapse).
- `length`: train/response_len's running median above `length_growth` x its early level.
- `truncation`: train/truncation_rate's running median crossing above `truncation_rate`, while
  validation has not risen (a SmolLM2 seed cuts 42-88% of its replies at 32 tokens again in steps
  32-44 while it passes 0.6-0.7 in validation: the sum comes before the cut).
- `grad_spike`: one train/grad_norm above `grad_spike` x the median of the `window` steps before.
- `zero_variance`: train/zero_variance_frac's running median crossing to or above `zero_variance`.
- `divergence`: val/pass_rate fell more than `divergence` below its best evaluation, at two
  evaluations in a row, while train/pass_rate's running median rose more than `divergence` since
  then (a reward hack or overfitting); both moves must also pass twice their noise
  (val/pass_rate_se; the spread of the training pass rates), so a small evaluation's noise, or one
  unlucky evaluation after a lucky best, does not flag.

A running median is over the last `window` values (one noisy step never flags); a metric's early
level is the median of its first `window` values. A crossing (truncation, zero_variance) is from
the healthy side: a metric whose early level is already past its threshold arms the rule only once
its running median has come back, so a start past it never flags and a return past it does.
The step a flag names is where the metric turned: the first step, in the window whose median
crossed, whose own value is past the threshold (grad_spike: the spike; divergence: the first of the
two evaluations past the fall).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from statistics import median, pstdev
from typing import Any, Callable, Mapping, Optional, Sequence

Row = dict[str, Any]


@dataclass(frozen=True)
class HealthFlag:
    """One flag: the rule, the step where its metric turned, the metric, and what to look at."""

    rule: str
    step: int
    metric: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        """As summary.json, the report and the `health` list hold it: {rule, step, metric, message}."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HealthFlag":
        return cls(rule=str(d["rule"]), step=int(d["step"]), metric=str(d["metric"]), message=str(d["message"]))


# The thresholds when no config is given: HealthConfig's defaults (workbench/config/health.py owns them).
DEFAULTS: dict[str, float] = {
    "window": 5, "mismatch_growth": 4.0, "mismatch_kl": 0.01, "entropy_drop": 0.8, "length_growth": 3.0,
    "truncation_rate": 0.5, "grad_spike": 10.0, "zero_variance": 0.9, "divergence": 0.05,
}  # fmt: skip
VERDICT_PREFIX = "the forecast assumes the run stays healthy"
# The metric keys the rules read (a run's rows cut to these and `step` judge the same).
METRICS: tuple[str, ...] = (
    "train/mismatch_kl", "train/entropy", "train/response_len", "train/truncation_rate", "train/grad_norm",
    "train/zero_variance_frac", "train/pass_rate", "val/pass_rate", "val/pass_rate_se",
)  # fmt: skip


def _series(rows: Sequence[Row], key: str) -> list[tuple[int, float]]:
    """(step, value) of `key` in step order, without missing or non-finite values (a skipped step)."""
    out = []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            out.append((int(r["step"]), float(v)))
    return sorted(out)


def _look(step: int, what: str) -> str:
    return f"Look at {what} and at the completions: `workbench samples RUN --step {step}`"


def _crossing(series: list[tuple[int, float]], w: int, start: int, past: Callable[[float], bool],
              excused: Callable[[int], bool] = lambda step: False) -> Optional[tuple[int, float]]:
    """(the step where the metric turned, the running median there) at the first index >= `start`
    whose running median is `past` the threshold and whose step is not `excused`; None when none is."""
    vals = [v for _, v in series]
    for i in range(max(start, w - 1), len(series)):
        level = median(vals[i - w + 1 : i + 1])
        if past(level) and not excused(series[i][0]):
            turn = next(j for j in range(i - w + 1, i + 1) if past(vals[j]))
            return series[turn][0], level
    return None


def _crossed(rows: Sequence[Row], key: str, w: int, past: Callable[[float], bool],
             excused: Callable[[int], bool] = lambda step: False) -> Optional[tuple[int, float]]:
    """(the step where the metric turned, the running median there) where `key`'s running median
    crosses `past` the threshold from the healthy side, at a step not `excused`. A metric whose
    early level is already past it (a run that starts there) arms the check once a running median
    is back on the healthy side; the turn is then looked for from the first healthy value of that
    window on. None: no crossing."""
    s = _series(rows, key)
    vals = [v for _, v in s]
    if len(vals) < w:
        return None
    armed_from: Optional[int] = None if past(median(vals[:w])) else 0
    for i in range(w - 1, len(vals)):
        lo = i - w + 1
        level = median(vals[lo : i + 1])
        if not past(level):
            if armed_from is None:
                armed_from = next(j for j in range(lo, i + 1) if not past(vals[j]))
        elif armed_from is not None and not excused(s[i][0]):
            turn = next((j for j in range(max(lo, armed_from), i + 1) if past(vals[j])), i)
            return s[turn][0], level
    return None


def _validation_rose(rows: Sequence[Row], d: float) -> Callable[[int], bool]:
    """Whether, at a step, the latest evaluation at or before it stands above the first one by more
    than `d` and twice their combined standard error (val/pass_rate_se): the run is learning."""
    val = _series(rows, "val/pass_rate")
    se = dict(_series(rows, "val/pass_rate_se"))

    def rose(step: int) -> bool:
        seen = [(s, v) for s, v in val if s <= step]
        if len(seen) < 2:
            return False
        (s0, v0), (s1, v1) = seen[0], seen[-1]
        return v1 - v0 > max(d, 2 * math.hypot(se.get(s0, 0.0), se.get(s1, 0.0)))

    return rose


def _relative(rows: Sequence[Row], key: str, w: int, past: Callable[[float, float], bool], peak: bool = False,
              excused: Callable[[int], bool] = lambda step: False) -> Optional[tuple[int, float, float]]:
    """(step, early level, running median) where `key` first moves `past` its early level, at a
    step not `excused`: the early level is the median of its first `w` values, checked from the
    window after them; `peak`: their highest, checked from the first full window on (a fall within
    the first steps is caught there)."""
    s = _series(rows, key)
    if len(s) <= w - (1 if peak else 0):
        return None
    first = [v for _, v in s[:w]]
    early = max(first) if peak else median(first)
    hit = _crossing(s, w, w - 1 if peak else w, lambda v: past(v, early), excused)
    return None if hit is None else (hit[0], early, hit[1])


def _grad_spike(rows: Sequence[Row], w: int, k: float) -> Optional[HealthFlag]:
    s = _series(rows, "train/grad_norm")
    for i in range(w, len(s)):
        base = median(v for _, v in s[i - w : i])
        if base > 0 and s[i][1] > k * base:
            step = s[i][0]
            n = sum(1 for j in range(i, len(s)) if s[j][1] > k * median(v for _, v in s[j - w : j]))
            return _flag("grad_spike", step, "train/grad_norm",
                         f"gradient norm spiked to {s[i][1]:.3g}, {s[i][1] / base:.0f}x its recent median {base:.3g} "
                         f"({n} such step{'s' if n != 1 else ''} in the run). "
                         + _look(step, "train/loss, train/ratio_max and the learning rate"))
    return None


def _divergence(rows: Sequence[Row], w: int, d: float) -> Optional[HealthFlag]:
    """Both moves must pass `d` and their noise: the validation fall twice the standard error of
    the difference (val/pass_rate_se), the training rise twice that of two window medians' difference
    (from the spread of the training pass rates in the two windows). The best evaluation is the
    highest of many noisy ones, so one evaluation far under it is common on a healthy run: the fall
    must hold at the next evaluation too, and the flag names the first of the two."""
    val = _series(rows, "val/pass_rate")
    se = dict(_series(rows, "val/pass_rate_se"))
    train = _series(rows, "train/pass_rate")
    if len(val) < 2 or len(train) < w:
        return None

    def window(step: int) -> list[float]:
        before = [v for s, v in train if s <= step][-w:]
        return before if len(before) == w else [v for _, v in train[:w]]  # too few before: the first window's

    def rose(since: int, step: int) -> Optional[tuple[float, float]]:
        """(the training window medians at `since` and `step`) when training rose past `d` and its noise."""
        w0, w1 = window(since), window(step)
        t0, t1 = median(w0), median(w1)
        enough = len([s for s, _ in train if s <= step]) >= w
        return (t0, t1) if enough and t1 - t0 > max(d, 2 * pstdev(w0 + w1) * math.sqrt(2 / w)) else None

    best_step, best = val[0]
    first: Optional[tuple[int, float]] = None  # the evaluation where the fall was first seen
    for step, v in val[1:]:
        if v > best:
            best_step, best, first = step, v, None
            continue
        if not best - v > max(d, 2 * math.hypot(se.get(best_step, 0.0), se.get(step, 0.0))):
            first = None
            continue
        if first is None:
            first = (step, v)
            continue
        if moved := rose(best_step, step) or rose(best_step, first[0]):
            return _flag("divergence", first[0], "val/pass_rate",
                         f"validation pass rate fell from {best:.3f} (step {best_step}) to {first[1]:.3f} and {v:.3f} "
                         f"(step {step}) while the training pass rate rose from {moved[0]:.3f} to {moved[1]:.3f} "
                         "(a reward hack or overfitting). " + _look(first[0], "what passes in training but fails in validation"))
    return None


def _flag(rule: str, step: int, metric: str, message: str) -> HealthFlag:
    return HealthFlag(rule=rule, step=int(step), metric=metric, message=message)


def check_health(rows: Sequence[Row], cfg: Any = None, run: Optional[str] = None) -> list[HealthFlag]:
    """Every rule over `rows` (one run's metric rows); `cfg` a HealthConfig (None: `DEFAULTS`);
    `run` the run folder the messages' `workbench samples` line names (None: RUN).
    The flags come in step order, at most one per rule."""
    h = {k: float(getattr(cfg, k, v)) if cfg is not None else v for k, v in DEFAULTS.items()}
    w = max(1, int(h["window"]))
    flags: list[HealthFlag] = []
    if hit := _relative(rows, "train/mismatch_kl", w, lambda v, e: v > max(h["mismatch_kl"], h["mismatch_growth"] * e)):
        step, early, now = hit
        flags.append(_flag("mismatch", step, "train/mismatch_kl",
                           f"the generator/trainer mismatch grew, mismatch KL from {early:.2g} to {now:.2g}. "
                           + _look(step, "train/mismatch_ratio_max, the dtypes and the FP32 head on both sides")))
    # a collapse can happen within the first window (lr 100x: by step 6): its start is the window's peak;
    # a fall while validation has risen is the policy learning to answer (SmolLM2), not a collapse
    learning = _validation_rose(rows, h["divergence"])
    if hit := _relative(rows, "train/entropy", w, lambda v, e: e > 0 and v < (1 - h["entropy_drop"]) * e, peak=True,
                        excused=learning):
        step, early, now = hit
        flags.append(_flag("entropy", step, "train/entropy",
                           f"entropy fell {1 - now / early:.0%} (from {early:.3g} to {now:.3g}). "
                           + _look(step, "repeated completions (collapse onto one answer)")))
    if hit := _relative(rows, "train/response_len", w, lambda v, e: e > 0 and v > h["length_growth"] * e):
        step, early, now = hit
        flags.append(_flag("length", step, "train/response_len",
                           f"completion length ran away, from {early:.0f} to {now:.0f} tokens ({now / early:.1f}x). "
                           + _look(step, "train/truncation_rate and repetition")))
    if hit := _crossed(rows, "train/truncation_rate", w, lambda v: v > h["truncation_rate"], learning):
        flags.append(_flag("truncation", hit[0], "train/truncation_rate",
                           f"truncation ran away, {hit[1]:.0%} of completions cut at the token limit. "
                           + _look(hit[0], "completions cut off (generation.max_new_tokens)")))
    if flag := _grad_spike(rows, w, h["grad_spike"]):
        flags.append(flag)
    if hit := _crossed(rows, "train/zero_variance_frac", w, lambda v: v >= h["zero_variance"]):
        flags.append(_flag("zero_variance", hit[0], "train/zero_variance_frac",
                           f"nothing left to learn from, {hit[1]:.0%} of groups have zero reward variance. "
                           + _look(hit[0], "whether every prompt is all-pass (too easy) or all-fail (too hard)")))
    if flag := _divergence(rows, w, h["divergence"]):
        flags.append(flag)
    if run:
        flags = [replace(f, message=f.message.replace("`workbench samples RUN ", f"`workbench samples {run} ")) for f in flags]
    return sorted(flags, key=lambda f: f.step)


def verdict_note(flags: Sequence[HealthFlag]) -> str:
    """The forecast's caveat for the first active flag ("" for a healthy run):
    "the forecast assumes the run stays healthy; from step N, entropy fell 85% (...)"."""
    if not flags:
        return ""
    f = flags[0]
    head = f.message.split(". ")[0]
    more = f" (and {len(flags) - 1} more flag{'s' if len(flags) > 2 else ''})" if len(flags) > 1 else ""
    return f"{VERDICT_PREFIX}; from step {f.step}, {head}{more}"


def health_lines(flags: Sequence[HealthFlag]) -> list[str]:
    """The run report's lines: one per flag, or that the run looks healthy."""
    if not flags:
        return ["run health: no flag (healthy by the health: rules)"]
    return [f"run health: {f.rule} from step {f.step} ({f.metric}): {f.message}" for f in flags]
