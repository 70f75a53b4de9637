"""Chat prompts: conversations as TRL's conversational datasets hold them, the system prompt, and
the TRL-shaped inputs of reward functions.

    messages = parse_messages([{"role": "user", "content": "2+2?"}], "data.jsonl:3", "prompt")
    chat_prompt(task, ex)     # what the tokenizer's chat template gets: [{"role": ..., "content": ...}, ...]
    prompts, completions, columns = reward_inputs(task, examples, texts)   # workbench.rl.reward_functions.score_batch

A prompt is a string, or (`task.chat_template: true` only) a list of {"role", "content"}
messages: roles system, user or assistant, contents strings, and the last message the user's
turn. `task.system_prompt` is put before each prompt as the system turn, unless the
conversation opens with a system turn of its own (the row's own wins). Without the chat template
there is no turn to put it in: config load refuses `system_prompt` then (workbench.config).
"""

from __future__ import annotations

from typing import Any

from workbench.configtools import ConfigError
from workbench.errors import UserError
from workbench.tasks.types import Example, TaskData

ROLES = ("system", "user", "assistant")


def check_system_prompt(task_cfg: Any) -> None:
    """A system prompt needs the chat template (a `workbench.config.TaskConfig`, its mix sources
    too): without it there is no system turn to put it in. ConfigError at config load."""
    for where, t in [("task", task_cfg), *((f"task.mix[{i}]", s) for i, s in enumerate(task_cfg.mix))]:
        if t.system_prompt and not (t.chat_template or task_cfg.chat_template or t.name == "env"):  # an episode is a chat
            raise ConfigError(f"{where}.system_prompt is set but {where}.chat_template is false: the system prompt is a chat turn; "
                              "set task.chat_template: true (or put the text in the prompts)")  # fmt: skip


def parse_messages(value: Any, where: str, key: str) -> tuple:
    """((role, content), ...) of a conversational prompt; a malformed one is one UserError naming `where`."""
    if hasattr(value, "tolist") and not isinstance(value, (str, list)):
        value = value.tolist()  # Parquet / Arrow give numpy arrays of dicts
    if not isinstance(value, (list, tuple)) or not value:
        raise UserError(f"{where}: {key!r} must be a non-empty string or a non-empty list of {{role, content}} messages")
    out = []
    for j, m in enumerate(value):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise UserError(f"{where}: {key!r} message {j} must be a mapping with 'role' and 'content', got {m!r:.80}")
        role, content = m["role"], m["content"]
        if role not in ROLES:
            raise UserError(f"{where}: {key!r} message {j} has role {role!r} (one of {', '.join(ROLES)})")
        if not isinstance(content, str):
            raise UserError(f"{where}: {key!r} message {j} ({role}) has content {content!r:.60}, not a string")
        out.append((role, content))
    if out[-1][0] != "user":
        raise UserError(f"{where}: {key!r} ends with a {out[-1][0]} message; a prompt's last message is the user's turn")
    return tuple(out)


def messages_text(messages: tuple) -> str:
    """A conversation as text, one "role: content" block per message (the prompt's key and alphabet)."""
    return "\n".join(f"{role}: {content}" for role, content in messages)


def chat_prompt(task: TaskData, ex: Example) -> list[dict[str, str]]:
    """The messages the chat template encodes for `ex` (`task`: the part that owns it, in a mix)."""
    turns = [{"role": r, "content": c} for r, c in ex.messages] or [{"role": "user", "content": ex.prompt}]
    if task.system_prompt and turns[0]["role"] != "system":
        turns.insert(0, {"role": "system", "content": task.system_prompt})
    return turns


def prompt_input(task: TaskData, ex: Example) -> Any:
    """What the generators encode: the chat messages with the chat template, else the prompt text."""
    return chat_prompt(task, ex) if task.chat_template else ex.prompt


def reward_inputs(parts: list[TaskData], examples: list[Example], texts: list[str]) -> tuple[list, list, dict[str, list]]:
    """(prompts, completions, columns) for reward functions, as TRL's GRPOTrainer passes them:
    conversational (message lists) where the example's task uses the chat template, else strings;
    the examples' columns one list each (a key missing from some example: None there), then
    `answer`, `answer_format` (absent from the dataset's own columns) and `task_passed` (set by the caller)."""
    prompts, completions = [], []
    for part, ex, text in zip(parts, examples, texts):
        if part.chat_template:
            prompts.append(chat_prompt(part, ex))
            completions.append([{"role": "assistant", "content": text}])
        else:
            prompts.append(ex.prompt)
            completions.append(text)
    keys = list(dict.fromkeys(k for ex in examples for k in ex.columns))
    columns = {k: [ex.columns.get(k) for ex in examples] for k in keys}
    columns.setdefault("answer", [ex.answer for ex in examples])
    columns.setdefault("answer_format", [part.answer_format for part in parts])
    return prompts, completions, columns
