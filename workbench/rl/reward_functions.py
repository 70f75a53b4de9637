"""Reward functions as users write them for TRL: `reward.functions`, called and combined by weight.

    reward:
      functions:
        - {fn: mypkg.rewards:correct, weight: 1.0, pass: true}   # decides pass / fail
        - {fn: workbench.rl.reward_functions:format_reward, weight: 0.2}

    fns = load_reward_functions(cfg.reward.functions)      # imported by path: a bad one is one line
    scores = score_batch(fns, prompts, completions, columns, example_ids)
    scores.rewards, scores.passed                          # the weighted sums; the pass function's value > 0

Each function is called once per batch the way TRL's GRPOTrainer calls it:
`f(prompts=..., completions=..., completion_ids=..., trainer_state=..., **columns) -> list[float]`.
For a conversational task (`task.chat_template: true`) a prompt is its message list
([{"role": ..., "content": ...}], the system turn included) and a completion is
[{"role": "assistant", "content": text}]; otherwise both are strings. `columns` are the dataset's
other columns, one list each (a synthetic task: `answer`, and the family's own columns), plus
`answer` (the answer the task checks against; a dataset's own `answer` column wins),
`answer_format` and `task_passed` (the task's own checker's verdict: for code, the sandbox's).
`trainer_state.global_step` is the policy version that sampled the completions.

The step's reward of a sample is sum(weight * value). Exactly one function has `pass: true`:
a sample passes when its value is > 0, and that verdict alone feeds `val/pass_rate` (the curve
the sigmoid is fitted to), so a format bonus never inflates the forecast.

As in TRL, a function may give None for a sample it does not apply to (a multi-task reward): it
adds nothing to that sample's reward (its value is kept as NaN); the pass function must score
every sample. A function that raises, returns something that is not a list of that many finite
numbers (or None), is one `RewardFunctionError` line naming the function and the example; the whole batch is refused, so no
step trains on a partial batch (the run stops with that line). Functions run in the generator's
process: they are the user's own trusted code and receive model text only as data (code answers
are still run only in the sandbox, by the task's checker).
"""

from __future__ import annotations

import importlib
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from workbench.configtools import ConfigError
from workbench.errors import UserError, one_line
from workbench.rl.answers import follows_format

FUNCTION_KEYS = ("fn", "weight", "pass")


class RewardFunctionError(UserError):
    """A reward function failed or returned something unusable; the message names it and the example."""


@dataclass(frozen=True)
class RewardFunction:
    spec: str  # "package.module:function", as configured
    fn: Callable[..., Any]
    weight: float
    decides_pass: bool


@dataclass(frozen=True)
class RewardState:
    """What a reward function gets as `trainer_state` (TRL passes its TrainerState)."""

    global_step: int  # the policy version that sampled the completions


@dataclass
class BatchScores:
    rewards: list[float]  # the weighted sum per sample
    passed: list[bool]  # the pass function's value > 0
    values: dict[str, list[float]]  # each function's own values, by spec (NaN: None, not applicable)


def check_reward_functions(functions: Sequence[Any]) -> None:
    """`reward.functions`' shape, at config load: mappings with `fn` as package.module:function, a
    finite weight and exactly one `pass: true`. ConfigError otherwise (nothing is imported here)."""
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
    if len(deciders) != 1:
        said = "none has" if not deciders else f"{len(deciders)} have ({', '.join(deciders)})"
        raise ConfigError(f"reward.functions: exactly one function must have pass: true (it decides val/pass_rate); {said}")


def import_function(spec: str) -> Callable[..., Any]:
    """The callable named 'package.module:function' (dots after the colon reach attributes)."""
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # noqa: BLE001 - an import runs user code: any failure is one line
        raise UserError(f"reward.functions: cannot import {spec!r}: {type(e).__name__}: {one_line(e)}") from None
    if not callable(obj):
        raise UserError(f"reward.functions: {spec!r} is not callable")
    return obj


def load_reward_functions(functions: Sequence[dict]) -> list[RewardFunction]:
    """`reward.functions` checked and imported ([] when empty: the task's own +1 / -1)."""
    check_reward_functions(functions)
    return [RewardFunction(f["fn"], import_function(f["fn"]), float(f.get("weight", 1.0)), bool(f.get("pass", False)))
            for f in functions]  # fmt: skip


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
            f"reward function {f.spec} raised {type(e).__name__}: {one_line(e)} on {_first_raising(f, kwargs, n, example_ids)}; "
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
        if v is None and f.decides_pass:
            raise RewardFunctionError(f"reward function {f.spec} returned None for example {example_ids[i]} (completion {i} "
                                      "of the batch): the pass function decides every sample's verdict, so it must score "
                                      "each one; the batch is not trained on")  # fmt: skip
        why = None if v is None else _bad_value(v)  # None: not applicable to this sample (TRL's convention)
        if why is not None:
            raise RewardFunctionError(f"reward function {f.spec} returned {why} for example {example_ids[i]} "
                                      f"(completion {i} of the batch), not a finite number; the batch is not trained on")  # fmt: skip
    return [None if v is None else float(v) for v in out]


def _first_raising(f: RewardFunction, kwargs: dict[str, Any], n: int, example_ids: Sequence[Any]) -> str:
    """'example <id>': the first sample the function raises on alone (the batch call raised)."""
    for i in range(n):
        one = {k: (v[i : i + 1] if isinstance(v, list) and len(v) == n else v) for k, v in kwargs.items()}
        try:
            f.fn(**one)
        except Exception:  # noqa: BLE001 - we are looking for the sample it fails on
            return f"example {example_ids[i]} (completion {i} of the batch)"
    return f"a batch of {n} completions (examples {example_ids[0]}..{example_ids[-1]}; no single one raises alone)"


def score_batch(
    functions: Sequence[RewardFunction], prompts: list, completions: list, columns: dict[str, list], example_ids: Sequence[Any],
    *, completion_ids: Optional[list] = None, global_step: int = 0,
) -> BatchScores:  # fmt: skip
    """Every function called once on the batch, TRL's way; the weighted sums and the pass verdicts."""
    n = len(completions)
    kwargs = {**columns, "prompts": prompts, "completions": completions,
              "completion_ids": completion_ids, "trainer_state": RewardState(global_step)}  # fmt: skip
    got = {f.spec: _call(f, kwargs, n, example_ids) for f in functions}
    # TRL's nansum: a function that gave None for a sample adds nothing to its reward
    rewards = [sum(f.weight * v for f in functions if (v := got[f.spec][i]) is not None) for i in range(n)]
    decider = next(f for f in functions if f.decides_pass)
    values = {spec: [math.nan if v is None else v for v in vs] for spec, vs in got.items()}
    return BatchScores(rewards, [v > 0 for v in values[decider.spec]], values)


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
