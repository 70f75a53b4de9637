"""Reward functions written the way TRL users write them (GRPOTrainer's `reward_funcs`), for the
reward.functions tests; importable by Ray workers through PYTHONPATH (see conftest).

Each records the keyword names it was called with in CALLS (in this process), so a test can see
exactly what was passed."""

from __future__ import annotations

import math
import re

CALLS: list[dict] = []


def _text(c):
    return c if isinstance(c, str) else c[0]["content"]


def correct_number(prompts, completions, answer, **kwargs):
    """TRL style: 1.0 when the last number in the completion equals the answer, else 0.0."""
    CALLS.append({"prompts": prompts, "completions": completions, "answer": answer, **kwargs})
    out = []
    for c, a in zip(completions, answer):
        nums = re.findall(r"-?\d+", _text(c))
        out.append(1.0 if nums and nums[-1] == str(a) else 0.0)
    return out


def short_bonus(completions, **kwargs):
    """A graded float: shorter completions score more (in [0, 1])."""
    return [1.0 / (1.0 + len(_text(c))) for c in completions]


def always_one(completions, **kwargs):
    return [1.0] * len(completions)


def one_short(completions, **kwargs):
    return [0.0] * (len(completions) - 1)


def gives_nan(completions, **kwargs):
    return [0.0] + [math.nan] * (len(completions) - 1)


def gives_text(completions, **kwargs):
    return ["high"] * len(completions)


def gives_none(completions, **kwargs):
    return None


RAISE_CALLS: list[int] = []  # raises_on_seven's calls: the size of each batch it was given


def raises_on_seven(completions, **kwargs):
    """Raises when any completion contains a 7."""
    RAISE_CALLS.append(len(completions))
    if any("7" in _text(c) for c in completions):
        raise ValueError("cannot score a seven")
    return [0.0] * len(completions)


NOT_CALLABLE = 3


def always_raises(completions, **kwargs):
    raise RuntimeError("the scoring service is down")


def only_sevens(completions, answer, **kwargs):
    """TRL's multi-task convention: None for a sample the function does not apply to (answers
    other than 7), else 2.0 for a completion that ends with 7 and -2.0 otherwise."""
    return [None if str(a) != "7" else (2.0 if _text(c).endswith("7") else -2.0) for c, a in zip(completions, answer)]


def says_seven(completions, **kwargs):
    """Booleans, as TRL accepts them (it builds a float tensor from the list): True where a 7 is written."""
    return [("7" in _text(c)) for c in completions]


def raises_two_lines(completions, **kwargs):
    """Raises with a message of several lines, as many libraries' errors are."""
    raise ValueError("the judge said:\n  status 503\n  try later")


def accuracy_reward(completions, solution, **kwargs):
    """As TRL's `trl.rewards.accuracy_reward`: 1.0 when the completion's last number is the gold
    solution, 0.0 when not, None when the gold solution cannot be parsed (TRL: not applicable)."""
    out = []
    for c, sol in zip(completions, solution):
        gold = re.fullmatch(r"\s*(-?\d+)\s*", str(sol))
        if gold is None:
            out.append(None)
            continue
        nums = re.findall(r"-?\d+", _text(c))
        out.append(1.0 if nums and nums[-1] == gold.group(1) else 0.0)
    return out


def progress(completions, trainer_state, **kwargs):
    """A schedule read from TRL's trainer_state: the share of max_steps done (its epoch must be there too)."""
    assert trainer_state.epoch >= 0.0
    return [trainer_state.global_step / trainer_state.max_steps] * len(completions)


def correct(completions, **kwargs):
    """Shares its name with workbench.rl.reward_functions:correct (the metric names tell them apart)."""
    return [0.0] * len(completions)


def raises_on_batches_of_three(completions, **kwargs):
    """Fails on a batch of three (a batch-size bug), never on fewer."""
    if len(completions) == 3:
        raise RuntimeError("batch of three")
    return [0.0] * len(completions)
