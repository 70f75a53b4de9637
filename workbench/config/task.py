"""`task:`: prompts, answers and the checker (`TaskConfig`), a mixture's sources (`MixSource`), and their checks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Optional

from workbench.configtools import ConfigError


@dataclass
class TaskConfig:
    name: str = "addition"
    """A synthetic family (addition, multiplication, reverse, sort, countdown, word_problems, pyexpr), a file task (jsonl, parquet, code), hf (datasets.load_dataset), reasoning_gym (task.dataset), env (an environment: task.env) or humaneval."""
    difficulty: int = 2
    """Synthetic families: how hard the generated problems are (e.g. the number of digits for addition)."""
    path: Optional[str] = None
    """File tasks: the data file, one example a line or row; hf: a hub dataset id, or a local folder or file load_dataset reads."""
    prompt_key: str = "prompt"
    """File and hf tasks: the field that holds the prompt."""
    answer_key: str = "answer"
    """File and hf tasks: the field that holds the expected answer (or the solution text answer_regex reads it from)."""
    config: Optional[str | dict] = None
    """hf: the dataset's configuration (load_dataset's name, e.g. main for openai/gsm8k); null: its only one. reasoning_gym: a mapping of the dataset's own config fields (e.g. {min_animals: 2}); null: its defaults."""
    dataset: Optional[str] = None
    """reasoning_gym: the name of a dataset reasoning-gym registers (e.g. leg_counting, chain_sum), scored by its own score_answer."""
    split: str = "train"
    """hf: the split the training prompts come from."""
    val_split: Optional[str] = None
    """hf: the split the validation prompts come from; null: task.num_val rows held out of task.split."""
    revision: Optional[str] = None
    """hf: the hub dataset's branch, tag or commit (pin it on a multi-node cluster: every node loads the dataset itself)."""
    answer_regex: Optional[str] = None
    """hf: a regex whose first group (or whole match) is the answer in answer_key's text, e.g. '#### *(.+)' for GSM8K."""
    checker: str = "auto"
    """How completions are scored: auto (the task's own), exact, math (math-verify) or package.module:function (your own)."""
    num_train: int = 2000
    """Synthetic families: training prompts generated."""
    num_val: int = 200
    """Validation prompts held out (synthetic: generated; files: taken from the file)."""
    seed: int = 0
    """Seed of the task's generation and train/validation split (the run's own seed is the top-level seed)."""
    chat_template: bool = False
    """Wrap each prompt as a user turn with the tokenizer's chat template (generation prompt added); a prompt that is a message list keeps its turns."""
    system_prompt: Optional[str] = None
    """The system turn put before each prompt (chat_template only; a conversation with its own system turn keeps it)."""
    answer_format: Optional[Literal["last_number", "boxed", "hash", "answer_tag"]] = None
    """Where the checker finds the answer in a completion: last_number, boxed (\\boxed{x}), hash (#### x) or answer_tag (<answer>x</answer>); null: the whole completion (countdown: answer_tag, word_problems: last_number)."""
    env: Optional[str] = None
    """env: the environment factory, package.module:Factory (a TRL environment_factory class, or a reset/step class); its episodes' budgets are the env: section."""
    mix: list[MixSource] = field(default_factory=list)
    """A task mixture: sources, each an ordinary task config plus weight and domain; when set they replace the fields above."""


@dataclass
class MixSource(TaskConfig):
    """One source of `task.mix`: prompts are drawn in proportion to `weight`; `domain` names its
    metrics (val/pass_rate/<domain>) and defaults to the source's task name."""

    weight: float = 1.0
    """This source's share of the prompts drawn, relative to the other sources' weights (> 0)."""
    domain: str = ""
    """Names the source's metrics (val/pass_rate/<domain>); empty: the source's task name."""


def validate_mix(task: TaskConfig) -> None:
    """task.mix: positive weights, one source per domain, domain names fit for metric keys."""
    seen: set[str] = set()
    for i, src in enumerate(task.mix):
        where = f"task.mix[{i}]"
        if src.mix:
            raise ConfigError(f"{where}.mix: a mix source cannot itself be a mix; list its sources in task.mix")
        if not src.weight > 0:
            raise ConfigError(f"{where}.weight must be > 0 (got {src.weight:g}); drop the source to leave it out")
        domain = src.domain or src.name
        if not re.fullmatch(r"[A-Za-z0-9_-]+", domain):
            raise ConfigError(f"{where}.domain {domain!r}: use letters, digits, '_' or '-' (it names metrics)")
        if domain in seen:
            raise ConfigError(f"{where}.domain {domain!r} is used twice: give each source its own domain")
        seen.add(domain)
        if src.num_val < 1 or src.num_train < 1:
            raise ConfigError(f"{where}: num_train and num_val must be >= 1")


def validate_task(task: TaskConfig, val_prompts: int) -> None:
    """The mixture's sources, a system prompt only with the chat template, and enough generated
    validation prompts for an evaluation's `val_prompts` (eval.num_prompts)."""
    from workbench.tasks.chat import check_system_prompt

    validate_mix(task)
    check_system_prompt(task)
    for where, t in [("task", task), *((f"task.mix[{i}]", s) for i, s in enumerate(task.mix))]:
        _check_source_config(where, t)
    if task.num_val < val_prompts and task.path is None and not task.mix:
        raise ConfigError(f"eval.num_prompts ({val_prompts}) exceeds task.num_val ({task.num_val})")


def _check_source_config(where: str, t: TaskConfig) -> None:
    """`config` is a mapping for reasoning_gym (which also needs `dataset`) and a name elsewhere."""
    if t.name == "reasoning_gym":
        if not t.dataset:
            raise ConfigError(f"{where}.dataset: name a reasoning-gym dataset for task reasoning_gym (e.g. leg_counting)")
        if t.config is not None and not isinstance(t.config, dict):
            raise ConfigError(f"{where}.config: for reasoning_gym, a mapping of the dataset's config fields, got {t.config!r}")
    elif isinstance(t.config, dict):
        raise ConfigError(f"{where}.config: a mapping is for task reasoning_gym; for hf it names the dataset's configuration")
    elif t.dataset is not None:
        raise ConfigError(f"{where}.dataset is for task reasoning_gym (task.name is {t.name!r})")
