"""The types of a verifiable task, which the task families import (the loader, tasks/base.py, sits above them).

    ex = Example(id=0, prompt="07+45=", answer="52")
    task = TaskData(name="addition", train=[ex], val=[...], checker=exact_checker, stop=None)

`Checker` is `(completion, answer) -> bool`; `exact_checker` is the default one of synthetic
tasks (and of the builtin model's warm-up).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

Checker = Callable[[str, str], bool]


@dataclass(frozen=True)
class Example:
    id: int  # unique within a task, across train and val
    prompt: str
    answer: str


@dataclass
class TaskData:
    name: str
    train: list[Example]
    val: list[Example]
    checker: Checker
    stop: Optional[list[str]]  # extra stop strings besides the tokenizer's EOS (None: EOS only)
    # Characters a character-level model needs for this task (synthetic tasks declare it; for
    # files it is every character in the data). The builtin model's tokenizer is built from it.
    alphabet: str = ""
    checker_name: str = ""
    difficulty: Optional[int] = None
    seed: int = 0
    chat_template: bool = False  # prompts go through the tokenizer's chat template (TaskConfig)
    info: dict = field(default_factory=dict)  # free-form facts for logging (source file, sizes)


def exact_checker(completion: str, answer: str) -> bool:
    """Right iff the completion equals the answer once surrounding whitespace is stripped."""
    return completion.strip() == answer.strip()
