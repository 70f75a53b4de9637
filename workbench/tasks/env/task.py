"""`task: {name: env, env: "package.module:Factory", path: ...}`: an environment's prompts as a task.

    task = load_env_task(TaskConfig(name="env", env="workbench.envs.calculator:CalculatorEnv", path="calc.jsonl"))
    task.env                      # the checked EnvFactory (factory.py)
    task.train[0].columns         # the row as reset(**row) gets it (prompt_key included), as TRL passes it

Rows come as the jsonl and hf tasks read them (`hf.load_splits`: a JSONL, Parquet or CSV file, a
saved folder, a hub id), but nothing is required of them: the prompt (`task.prompt_key`, text or
TRL's message list) may be absent or empty (reset's text is then the user turn) and there is no
answer column to find; the environment scores the episode. Without `task.path`, the factory makes
its own prompts: each row is {"seed": s}, s drawn from task.seed (train seeds after the validation
ones, never shared), and reset must take `seed` (checked before launch, config/env.py). Rows are deduplicated, shuffled by
task.seed and split into val and train like a file task's.

There is no text checker: the worker scores episodes (tasks/env/scoring.py); `checker` refuses a call.
"""

from __future__ import annotations

import json
from typing import Any

from workbench.errors import UserError
from workbench.tasks.files import plain_value, split_rows
from workbench.tasks.types import Example, TaskData


def load_env_task(cfg: Any) -> TaskData:
    """The TaskData of an environment task (see the module docstring); `task.env` is its factory."""
    from workbench.tasks.env.factory import load_env_factory

    env = load_env_factory(cfg.env)
    if cfg.path:
        from workbench.tasks.hf import load_splits, split_of

        splits = load_splits(cfg)
        rows = _rows(split_of(splits, cfg.split, "task.split", cfg.path), cfg, 0)
        val_rows = _rows(split_of(splits, cfg.val_split, "task.val_split", cfg.path), cfg, len(rows)) if cfg.val_split else None
        source = str(cfg.path)
    else:  # the factory makes its own prompts from a seed
        base = cfg.seed * 1_000_003
        val_rows = [(i, {"seed": base + i}) for i in range(cfg.num_val)]
        rows = [(cfg.num_val + i, {"seed": base + cfg.num_val + i}) for i in range(cfg.num_train)]
        source = f"{env.name} (seeds)"

    rest, val = split_rows(cfg, rows, val_rows, key=_key, label="env", source=f"task.path: {source}", what="rows")
    train = rest[: cfg.num_train]
    task = TaskData(name="env", train=[_example(i, r, cfg) for i, r in train], val=[_example(i, r, cfg) for i, r in val],
                    checker=_no_checker, stop=None, checker_name=f"env:{env.name}", seed=cfg.seed,
                    info={"source": source, "env": env.spec, "env_kind": env.kind, "tools": list(env.tool_names)})  # fmt: skip
    task.env = env
    task.chat_template = True  # an episode is a conversation: always the chat template
    task.system_prompt = getattr(cfg, "system_prompt", None) or ""
    return task


def _rows(ds: Any, cfg: Any, offset: int) -> list[tuple[int, dict]]:
    """(row id, the row as a plain dict) of a split."""
    if not len(ds):
        raise UserError(f"task.path: {cfg.path!r} has no rows")
    return [(offset + i, {k: plain_value(v) for k, v in row.items()}) for i, row in enumerate(ds)]


def _key(pair: tuple[int, dict]) -> str:
    """A row's identity (rows repeat only whole: environments' prompts may all be empty)."""
    return json.dumps(pair[1], sort_keys=True, default=str)


def _example(i: int, row: dict, cfg: Any) -> Example:
    """The row as an Example: `columns` is the whole row (reset(**row) gets every column, the prompt's too)."""
    from workbench.tasks.chat import messages_text, parse_messages

    prompt = row.get(cfg.prompt_key)
    messages: tuple = ()
    if isinstance(prompt, list):
        messages = parse_messages(prompt, f"{cfg.path} row {i}", cfg.prompt_key)
        text = messages_text(messages)
    else:
        text = "" if prompt is None else str(prompt)
    answer = row.get(cfg.answer_key)
    return Example(id=i, prompt=text, answer="" if answer is None else str(answer), messages=messages, columns=dict(row))


def _no_checker(completion: str, answer: str) -> bool:
    raise UserError("an environment task has no text checker: its episodes are scored by the environment")


def env_row(ex: Example) -> dict:
    """The row reset(**row) gets for an example of an environment task."""
    return dict(ex.columns)
