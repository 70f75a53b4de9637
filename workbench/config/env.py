"""`env:`: an environment's episodes (the budgets and rules of `task: {name: env, env: ...}`), and
the checks across it and the task: at config load those that import nothing of the user's
(`check_env_run`), before launch the factory itself (`check_env_factory`: the driver's preflight),
so that a bad factory is one line before Ray starts.

    env: {max_turns: 4, max_episode_tokens: 1024, timeout_s: 10, pass_threshold: 0}

The tokens of one turn are `generation.max_new_tokens`; the prompt's column is `task.prompt_key`.
workbench/tasks/env/ runs the episodes (EnvSettings is what they read).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Literal

from workbench.configtools import ConfigError
from workbench.errors import UserError, one_line


@dataclass
class EnvConfig:
    """The run config's `env:` section (used when task.name is env)."""

    max_turns: int = 4
    """Assistant turns per episode at most (each up to generation.max_new_tokens tokens)."""
    max_episode_tokens: int = 2048
    """The whole episode's context at most: prompt (the tools' schema included), sampled turns and environment messages."""
    timeout_s: float = 10.0
    """A call into the environment (the factory, reset, step, a tool, get_reward) that takes longer is abandoned and its group dropped."""
    pass_threshold: float = 0.0
    """An episode passes (val/pass_rate) when the environment's reward is above this."""
    tool_exceptions: Literal["reply", "drop"] = "reply"
    """A tool that raises: reply (its error goes back to the model as the tool's result, as in TRL) or drop (the episode's group is dropped and counted)."""


def validate_env(env: EnvConfig) -> None:
    """`env:` budgets are whole numbers >= 1 and the timeout positive (tool_exceptions' two values: configtools)."""
    for key in ("max_turns", "max_episode_tokens"):
        v = getattr(env, key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"env.{key} must be a whole number >= 1, got {v!r}")
    if not env.timeout_s > 0:
        raise ConfigError(f"env.timeout_s must be > 0 seconds, got {env.timeout_s!r}")


def env_settings(env: EnvConfig, max_new_tokens: int, prompt_key: str, system_prompt: str = "") -> Any:
    """The episodes' `tasks.env.EnvSettings` from `env:`, generation.max_new_tokens, task.prompt_key and task.system_prompt."""
    from workbench.tasks.env import EnvSettings

    return EnvSettings(max_turns=env.max_turns, max_new_tokens=max_new_tokens, max_episode_tokens=env.max_episode_tokens,
                       timeout_s=env.timeout_s, pass_threshold=env.pass_threshold, tool_exceptions=env.tool_exceptions,
                       prompt_key=prompt_key, system_prompt=system_prompt or "")  # fmt: skip


def check_env_run(cfg: Any) -> None:
    """Across sections, for task.name env, nothing of the user's imported (a finished run's config is read
    where its environment may not be): the factory named, no mix, the episode's budget holds a turn,
    and length control is off (its budgets are one completion's, not a turn's). `task.env` with
    another task is refused. The factory itself is checked before launch (`check_env_factory`)."""
    task, env = cfg.task, cfg.env
    if task.name != "env":
        if getattr(task, "env", None):
            raise ConfigError(f"task.env is for task.name env (task.name is {task.name!r})")
        return
    if task.mix:
        raise ConfigError("task.mix: an environment task cannot be mixed yet; train it as task.name env on its own")
    if not task.env:
        raise ConfigError("task.env: name the environment factory, e.g. task.env: workbench.envs.calculator:CalculatorEnv")
    if cfg.generation.max_new_tokens >= env.max_episode_tokens:
        raise ConfigError(f"env.max_episode_tokens ({env.max_episode_tokens}) must exceed generation.max_new_tokens "
                          f"({cfg.generation.max_new_tokens}): it holds the prompt and every turn")  # fmt: skip
    if cfg.recipe.length_control.type != "none":
        raise ConfigError(f"recipe.length_control.type: {cfg.recipe.length_control.type} is not applied to an environment's "
                          "episodes (its budgets are one completion's); an episode's budgets are env.max_turns, "
                          "generation.max_new_tokens per turn and env.max_episode_tokens: set length_control: {type: none}")  # fmt: skip


def check_env_factory(cfg: Any) -> None:
    """Before launch (the driver's preflight, before Ray starts; `Session` and `workbench run` alike), for
    task.name env: the factory imports, is well formed and constructs (one instance, as TRL probes one),
    the episode has a reward (get_reward, reset/step's rewards or reward.functions), and a factory
    without a dataset takes reset's `seed`. Each problem is one line (ConfigError)."""
    task = cfg.task
    if task.name != "env":
        return
    from workbench.tasks.env import load_env_factory

    try:
        factory = load_env_factory(task.env)
    except UserError as e:
        raise ConfigError(str(e)) from None
    try:  # a factory that cannot construct is one line now, not every episode's fault
        factory.new()
    except Exception as e:  # noqa: BLE001 - the user's code runs
        raise ConfigError(f"task.env: {task.env!r}: constructing {factory.name}() raised {type(e).__name__}: {one_line(e)}") from None
    if factory.kind == "tools" and not factory.has_reward and not cfg.reward.functions:
        raise ConfigError(f"task.env: {factory.name} has no get_reward() and reward.functions is empty: "
                          "an episode needs a reward (define get_reward, or list reward functions)")  # fmt: skip
    if not task.path and not _takes(factory.cls.reset, "seed"):
        raise ConfigError(f"task.path: {factory.name}.reset takes no `seed`, so without a dataset every episode "
                          "would be the same; give task.path (rows for reset(**row)) or let reset take seed")  # fmt: skip


def _takes(fn: Any, name: str) -> bool:
    """Whether `fn` accepts the keyword `name` (by name or through **kwargs)."""
    params = inspect.signature(fn).parameters.values()
    return any(p.name == name or p.kind == p.VAR_KEYWORD for p in params)
