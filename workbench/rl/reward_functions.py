"""Reward functions as users write them for TRL: `reward.functions`, called and combined by weight.

    reward:
      functions:
        - {fn: mypkg.rewards:accuracy_reward}          # alone it decides pass / fail, as in TRL (no flag)
        - {fn: workbench.rl.reward_functions:format_reward, weight: 0.2}   # a second one: mark the decider pass: true,
                                                                             # or the task's checker decides

    fns = load_reward_functions(cfg.reward.functions)      # imported by path (configtools.import_spec): a bad one is one line
    scores = score_batch(fns, prompts, completions, columns, example_ids, trainer_state=RewardState(3, 100, 0.2))
    scores.rewards, scores.passed, scores.values          # the weighted sums; the pass verdicts; each function's values

Each function is called once per batch the way TRL's GRPOTrainer calls it:
`f(prompts=..., completions=..., completion_ids=..., trainer_state=..., **columns) -> list[float]`.
For a conversational task (`task.chat_template: true`) a prompt is its message list
([{"role": ..., "content": ...}], the system turn included) and a completion is
[{"role": "assistant", "content": text}]; otherwise both are strings. `columns` are the dataset's
other columns, one list each (a synthetic task: `answer`, and the family's own columns), plus
`answer` (the answer the task checks against; a dataset's own `answer` column wins),
`answer_format` and `task_passed` (the task's own checker's verdict: for code, the sandbox's).
`trainer_state` has TRL's TrainerState fields that reward functions read: `global_step` (optimizer
steps the trainer has taken, as the scoring generator last heard: the version of the newest
weights pushed to it), `max_steps` (train.max_steps) and `epoch` (global_step x
train.prompts_per_step / training prompts).

The step's reward of a sample is sum(weight * value). One function decides pass / fail: the one
with `pass: true`, or the only function when there is one (TRL has no such flag). With several
and none marked, the task's own checker decides (every task has one: its checker, or the sandbox
for code). A sample passes when the deciding function's value is > 0; that verdict alone feeds
`val/pass_rate` (the curve the sigmoid is fitted to), so a format bonus never inflates the forecast.

`None` means "not applicable", as in TRL (its `accuracy_reward` gives None when it cannot parse
the gold answer), for every function, the pass function included: the function adds nothing to
that sample's reward (its value is kept as NaN) and the sample is left out of that function's
`rewards/<name>/mean` and counted in `rewards/<name>/none`; a None from the pass function makes
the sample's verdict `not_applicable` (left out of val/pass_rate; tasks/base.py). A function's
name in metrics and kept samples is its `__name__`, as TRL names it; two functions of one name
are told apart by their paths, package.module.function (`function_names`).

A function that raises, or returns something that is not a list of that many finite numbers (or
None), is one `RewardFunctionError` line naming the function and the example; the whole batch is
refused, so no step trains on a partial batch (the run stops with that line). To name the sample
a raising function fails on, it is called again on halves of the batch, at most
`MAX_CULPRIT_CALLS` more times. Functions run in the generator's process: they are the user's own
trusted code and receive model text only as data (code answers are still run only in the
sandbox, by the task's checker).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from workbench.configtools import ConfigError, import_spec
from workbench.errors import UserError, one_line
from workbench.rl.answers import follows_format

FUNCTION_KEYS = ("fn", "weight", "pass")
MAX_CULPRIT_CALLS = 4  # more calls of a raising function, on parts of its batch, to name the sample


class RewardFunctionError(UserError):
    """A reward function failed or returned something unusable; the message names it and the example."""


@dataclass(frozen=True)
class RewardFunction:
    spec: str  # "package.module:function", as configured
    fn: Callable[..., Any]
    weight: float
    decides_pass: bool
    name: str  # its name in metrics (rewards/<name>/mean) and kept samples (function_names)


@dataclass(frozen=True)
class RewardState:
    """What a reward function gets as `trainer_state`: TRL's TrainerState fields (see the module docstring)."""

    global_step: int = 0  # optimizer steps the trainer has taken
    max_steps: int = 0  # train.max_steps
    epoch: float = 0.0  # passes over the training prompts so far


@dataclass
class BatchScores:
    rewards: list[float]  # the weighted sum per sample
    # the deciding function's value > 0 per sample (None: it gave None, not applicable); None: no
    # function decides (several, none marked): the task's checker does
    passed: Optional[list[Optional[bool]]]
    values: dict[str, list[float]]  # each function's own values, by name (NaN: None, not applicable)


@dataclass
class ValueStats:
    """One function's values over some samples, kept as sums so that chunks add up."""

    count: int = 0  # values given (None left out)
    total: float = 0.0
    squares: float = 0.0
    none: int = 0  # samples it gave None for

    @classmethod
    def of(cls, values: Sequence[float]) -> "ValueStats":
        """The sums of `values` (NaN: None, counted in `none`)."""
        given = [float(v) for v in values if not math.isnan(v)]
        return cls(len(given), sum(given), sum(v * v for v in given), len(values) - len(given))

    def merged(self, other: "ValueStats") -> "ValueStats":
        """The sums over both sets of samples (two chunks of one step)."""
        return ValueStats(self.count + other.count, self.total + other.total, self.squares + other.squares, self.none + other.none)

    @property
    def mean(self) -> float:
        """Mean over the values given (TRL's nanmean); NaN when none was given."""
        return self.total / self.count if self.count else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation (Bessel-corrected, as TRL's nanstd); 0.0 for one value."""
        if self.count < 2:
            return 0.0 if self.count else math.nan
        return math.sqrt(max(0.0, (self.squares - self.total * self.total / self.count) / (self.count - 1)))


def value_metrics(stats: dict[str, ValueStats], prefix: str) -> dict[str, float]:
    """`<prefix>/<name>/mean` and `/std` (only where the function gave a value) and `/none` (its Nones) per function."""
    out: dict[str, float] = {}
    for name, s in stats.items():
        if s.count:  # a function that applied to no sample has no mean (no point, not a zero)
            out.update({f"{prefix}/{name}/mean": s.mean, f"{prefix}/{name}/std": s.std})
        out[f"{prefix}/{name}/none"] = float(s.none)
    return out


def check_reward_functions(functions: Sequence[Any]) -> None:
    """`reward.functions`' shape, at config load: mappings with `fn` as package.module:function, a
    finite weight and at most one `pass: true`. ConfigError otherwise (nothing is imported here)."""
    if not functions:
        return
    for i, f in enumerate(functions):
        where = f"reward.functions[{i}]"
        if not isinstance(f, dict):
            raise ConfigError(f"{where}: expected a mapping like {{fn: package.module:function, weight: 1.0}}, got {f!r}")
        unknown = [k for k in f if k not in FUNCTION_KEYS]
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(FUNCTION_KEYS)})")
        fn = f.get("fn")
        module, _, attr = str(fn or "").partition(":")
        if not isinstance(fn, str) or not module or not attr:
            raise ConfigError(f"{where}.fn: {fn!r} is not package.module:function")
        w = f.get("weight", 1.0)
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
            raise ConfigError(f"{where}.weight: {w!r} is not a finite number")
        if not isinstance(f.get("pass", False), bool):
            raise ConfigError(f"{where}.pass: expected true or false, got {f['pass']!r}")
    deciders = [f["fn"] for f in functions if f.get("pass", False)]
    if len(deciders) > 1:
        raise ConfigError(f"reward.functions: at most one function may have pass: true (it decides val/pass_rate; "
                          f"none: the only function, or the task's checker); {len(deciders)} have ({', '.join(deciders)})")  # fmt: skip


def function_names(specs: Sequence[str], fns: Sequence[Callable[..., Any]]) -> list[str]:
    """Each function's name in metrics: its `__name__` (TRL's), or the spec's last part for a
    callable without one; a name two share becomes each one's path (package.module.function), and
    the same function listed twice is told apart by its position (`..._2`)."""
    base = [getattr(fn, "__name__", None) or spec.partition(":")[2].split(".")[-1] for spec, fn in zip(specs, fns)]
    names = [spec.replace(":", ".") if base.count(b) > 1 else b for spec, b in zip(specs, base)]
    return [f"{n}_{i + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)]


def load_reward_functions(functions: Sequence[dict]) -> list[RewardFunction]:
    """`reward.functions` checked and imported ([] when empty: the task's own +1 / -1). The only
    function decides pass / fail unless it says `pass: false`."""
    check_reward_functions(functions)
    fns = [import_spec(f["fn"], "reward.functions") for f in functions]
    names = function_names([f["fn"] for f in functions], fns)
    alone = len(functions) == 1
    return [RewardFunction(f["fn"], fn, float(f.get("weight", 1.0)), bool(f.get("pass", alone)), name)
            for f, fn, name in zip(functions, fns, names)]  # fmt: skip


def _bad_value(v: Any) -> Optional[str]:
    """Why `v` is no reward (None when it is a finite real number; a bool is 1 or 0, as in TRL)."""
    if not isinstance(v, numbers.Real):
        if hasattr(v, "item") and getattr(v, "shape", None) == ():  # a numpy / torch scalar
            return _bad_value(v.item())
        return f"a {type(v).__name__} ({v!r:.40})"
    if not math.isfinite(float(v)):
        return f"{float(v)}"
    return None


def _call(f: RewardFunction, kwargs: dict[str, Any], n: int, example_ids: Sequence[Any]) -> list[Optional[float]]:
    """One function's values on the batch, checked (see the module docstring); None: not applicable."""
    try:
        out = f.fn(**kwargs)
    except Exception as e:  # noqa: BLE001 - a user's function: any failure is one line
        raise RewardFunctionError(
            f"reward function {f.spec} raised {type(e).__name__}: {one_line(e)} on {_culprit(f, kwargs, n, example_ids)}; "
            "the batch is not trained on"
        ) from None
    if hasattr(out, "tolist") and not isinstance(out, (list, tuple)):
        out = out.tolist()  # numpy arrays, tensors
    if not isinstance(out, (list, tuple)):
        raise RewardFunctionError(f"reward function {f.spec} returned a {type(out).__name__}, not a list of {n} numbers "
                                  f"(first example: {example_ids[0] if n else '-'}); the batch is not trained on")  # fmt: skip
    if len(out) != n:
        raise RewardFunctionError(f"reward function {f.spec} returned {len(out)} values for {n} completions "
                                  f"(examples {example_ids[0]}..{example_ids[-1]}); the batch is not trained on")  # fmt: skip
    for i, v in enumerate(out):
        why = None if v is None else _bad_value(v)  # None: not applicable to this sample (TRL's convention)
        if why is not None:
            raise RewardFunctionError(f"reward function {f.spec} returned {why} for example {example_ids[i]} "
                                      f"(completion {i} of the batch), not a finite number; the batch is not trained on")  # fmt: skip
    return [None if v is None else float(v) for v in out]


def _culprit(f: RewardFunction, kwargs: dict[str, Any], n: int, example_ids: Sequence[Any]) -> str:
    """Where the batch call raised: the sample, found by calling `f` on halves of the batch (the
    first half raises: the culprit is in it; else in the second), at most MAX_CULPRIT_CALLS times;
    a range of samples when the calls ran out, the whole batch when no part raises alone."""

    def raises(a: int, b: int) -> bool:
        part = {k: (v[a:b] if isinstance(v, list) and len(v) == n else v) for k, v in kwargs.items()}
        try:
            f.fn(**part)
        except Exception:  # noqa: BLE001 - we are looking for the samples it fails on
            return True
        return False

    lo, hi, confirmed, calls = 0, n, True, 0  # [lo, hi) holds the culprit; confirmed: it raised on that range alone
    while calls < MAX_CULPRIT_CALLS and (hi - lo > 1 or not confirmed):
        calls += 1
        if hi - lo == 1:  # narrowed to one sample by elimination: does it raise alone?
            confirmed = raises(lo, hi)
            if not confirmed:
                return (f"a batch of {n} completions (examples {example_ids[0]}..{example_ids[-1]}; no part of it "
                        f"raised alone in {calls} more calls)")  # fmt: skip
            break
        mid = (lo + hi) // 2
        if raises(lo, mid):
            hi, confirmed = mid, True
        else:
            lo, confirmed = mid, False
    found = f", found in {calls} more calls on parts of the batch" if calls else ""
    if hi - lo == 1:
        return f"example {example_ids[lo]} (completion {lo} of the batch{found})"
    return f"one of examples {example_ids[lo]}..{example_ids[hi - 1]} (completions {lo}..{hi - 1} of the batch{found})"


def score_batch(
    functions: Sequence[RewardFunction], prompts: list, completions: list, columns: dict[str, list], example_ids: Sequence[Any],
    *, completion_ids: Optional[list] = None, trainer_state: Optional[RewardState] = None,
) -> BatchScores:  # fmt: skip
    """Every function called once on the batch, TRL's way; the weighted sums and the pass verdicts."""
    n = len(completions)
    kwargs = {**columns, "prompts": prompts, "completions": completions,
              "completion_ids": completion_ids, "trainer_state": trainer_state or RewardState()}  # fmt: skip
    got = {f.name: _call(f, kwargs, n, example_ids) for f in functions}
    # TRL's nansum: a function that gave None for a sample adds nothing to its reward
    rewards = [sum(f.weight * v for f in functions if (v := got[f.name][i]) is not None) for i in range(n)]
    decider = next((f for f in functions if f.decides_pass), None)
    passed = None if decider is None else [None if v is None else v > 0 for v in got[decider.name]]
    values = {name: [math.nan if v is None else v for v in vs] for name, vs in got.items()}
    return BatchScores(rewards, passed, values)


# ---------------------------------------------------------------------------- shipped functions


def completion_text(completion: Any) -> str:
    """A completion's text: the string itself, or the content of a conversational completion's last message."""
    if isinstance(completion, str):
        return completion
    return str(completion[-1]["content"]) if completion else ""


def format_reward(completions: list, answer_format: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion gives an answer in the task's `answer_format`, else 0.0 (whatever the
    answer). A task without an answer format scores 0.0."""
    return [1.0 if fmt and follows_format(completion_text(c), fmt) else 0.0 for c, fmt in zip(completions, answer_format)]


def correct(completions: list, task_passed: list, **kwargs: Any) -> list[float]:
    """The task's own verdict as TRL-style values: +1.0 passed, -1.0 failed (for code: the sandbox's)."""
    return [1.0 if ok else -1.0 for ok in task_passed]
