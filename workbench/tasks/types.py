"""The types of a verifiable task, which the task families import (the loader, tasks/base.py, sits above them).

    ex = Example(id=0, prompt="07+45=", answer="52")
    task = TaskData(name="addition", train=[ex], val=[...], checker=exact_checker, stop=None)

`Checker` is `(completion, answer) -> bool`; `exact_checker` is the default one of synthetic
tasks (and of the builtin model's warm-up). A `Verdict` is one check's outcome (one of
`VERDICTS`, with the reward `reward.functions` gave it, if any); code tasks are `sandboxed`: their
answers are checked in workbench.tasks.sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

Checker = Callable[[str, str], bool]

# What a check can say about one completion. "sandbox_error" means the sandbox itself failed
# (a worker died, a pipe broke): it is counted and shown, never scored as a wrong answer.
# "not_applicable": the reward function that decides pass / fail gave None (TRL's "does not
# apply", e.g. a gold answer it cannot parse): counted, left out of val/pass_rate; not a pass.
# "env_error": an environment's code failed or hung in the episode (tasks/env): like a sandbox
# error, its group is dropped and the sample left out of val/pass_rate, counted (env/errors).
VERDICTS = ("pass", "fail", "timeout", "error", "sandbox_error", "not_applicable", "env_error")


@dataclass(frozen=True)
class Verdict:
    """One check's outcome: `verdict` is one of VERDICTS; `seconds` is the check's CPU seconds for
    code (wall seconds for other checkers); `detail` is a short human-readable reason."""

    verdict: str
    seconds: float = 0.0
    detail: str = ""
    # The sample's reward when `reward.functions` scored it (their weighted sum); None: the
    # verdict's own +1 / -1 (workbench.rl.shaping.reward_for).
    reward: Optional[float] = None
    # Each reward function's own value for the sample, by name (with `reward.functions`; NaN: None, not
    # applicable; kept samples show them; rl/reward_functions.function_names).
    values: Optional[dict] = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r} (one of {', '.join(VERDICTS)})")

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


@dataclass(frozen=True)
class Example:
    id: int  # unique within a task, across train and val
    prompt: str
    answer: str
    domain: str = ""  # the mix source it came from (task.mix); "" in a single-task run
    # A known-good completion, for the builtin model's supervised warm-up where `answer` is not
    # itself a completion (code: the answer is the test spec). "": the answer is the completion.
    reference: str = ""
    # A conversational prompt (task.chat_template): ((role, content), ...), the row's message list;
    # `prompt` is then its text ("role: content" lines). (): the prompt is `prompt`, one user turn.
    messages: tuple = ()
    # The row's other columns, passed to reward functions as TRL passes a dataset's columns.
    columns: dict = field(default_factory=dict, compare=False, hash=False)


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
    sandboxed: bool = False  # answers are code specs checked in the sandbox (tasks.sandbox), not by `checker`
    # A mixed task (task.mix): domain -> that source's own TaskData (its checker, its flags), in
    # config order, and domain -> weight. Empty for a single task (workbench/tasks/mixture.py).
    parts: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)
    system_prompt: str = ""  # task.system_prompt: the system turn before each prompt (chat template only)
    # task.answer_format: where the checker finds the answer (workbench.rl.answers); None: the whole completion
    answer_format: Optional[str] = None
    # reward.functions, imported (workbench.rl.reward_functions.RewardFunction); []: the verdict's +1 / -1
    reward_functions: list = field(default_factory=list)
    # task.name env: the environment factory (tasks/env/factory.EnvFactory); its episodes are scored, not texts
    env: Any = None


def exact_checker(completion: str, answer: str) -> bool:
    """Right iff the completion equals the answer once surrounding whitespace is stripped."""
    return completion.strip() == answer.strip()
