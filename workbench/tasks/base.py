"""Loading a verifiable task, and running its checker: the one entry point `load_task`.

    task = load_task(TaskConfig(name="addition", difficulty=2, seed=0))
    ex = task.val[0]                      # Example(id=..., prompt="07+45=", answer="52")
    ok = safe_check(task.checker, "52", ex.answer, example_id=ex.id)   # -> True

A task is a fixed, seeded i.i.d. split of prompts into `train` and `val` (no prompt in both)
plus a checker `(completion, answer) -> bool` (the types: `workbench.tasks.types`). Built-in
synthetic families live in `workbench.tasks.synthetic`; JSONL / Parquet files in
`workbench.tasks.files`; this module sits above them and dispatches by `cfg.name`. The checker only
says right or wrong; the reward (+1 / -1) is the engine's business.

Checkers never eval model output. A checker that raises is wrapped by `safe_check` into a
`CheckerError` naming the example, so the engine can surface it as one clear line.
"""

from __future__ import annotations

from workbench.errors import UserError
from workbench.tasks.types import Checker, TaskData, exact_checker


class CheckerError(UserError):
    """A checker raised on some example; the message names the example and the cause."""


def safe_check(checker: Checker, completion: str, answer: str, *, example_id: int | None = None) -> bool:
    """Run `checker` and turn any exception into a `CheckerError` naming the example."""
    try:
        return bool(checker(completion, answer))
    except Exception as e:  # noqa: BLE001 - every checker failure must surface the same way
        where = f"example {example_id}" if example_id is not None else "an example"
        name = getattr(checker, "__name__", type(checker).__name__)
        raise CheckerError(
            f"checker {name!r} failed on {where} (answer {answer[:80]!r}, completion {completion[:80]!r}): "
            f"{type(e).__name__}: {e}"
        ) from e


FILE_TASKS = ("jsonl", "parquet")


def get_checker(name: str, *, default: str) -> tuple[str, Checker]:
    """('exact'|'math', checker) for a config value; 'auto' picks `default`."""
    chosen = default if name == "auto" else name
    if chosen == "exact":
        return "exact", exact_checker
    if chosen == "math":
        from workbench.tasks.files import math_checker

        return "math", math_checker
    if ":" in chosen:
        return chosen, import_checker(chosen)
    raise UserError(f"task.checker: unknown checker {name!r} (choose auto, exact, math or module:function)")


def import_checker(spec: str) -> Checker:
    """A user's own verifier, named 'package.module:function' (it must be importable on every worker)."""
    import importlib

    module_name, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise UserError(f"task.checker: cannot import {spec!r}: {e}") from None
    if not callable(fn):
        raise UserError(f"task.checker: {spec!r} is not callable")
    return fn


def load_task(cfg) -> TaskData:
    """Build the task named by `cfg.name` (a `workbench.config.TaskConfig`)."""
    from workbench.tasks import files, synthetic

    if cfg.num_train < 1 or cfg.num_val < 1:
        raise UserError(f"task.num_train ({cfg.num_train}) and task.num_val ({cfg.num_val}) must be >= 1")
    if cfg.name in FILE_TASKS:
        task = files.load_file_task(cfg)
        default_checker = "math"
    elif cfg.name in synthetic.TASKS:
        task = synthetic.make_task(cfg.name, cfg.difficulty, num_train=cfg.num_train, num_val=cfg.num_val, seed=cfg.seed)
        default_checker = "exact"
    else:
        known = ", ".join(sorted(synthetic.TASKS) + list(FILE_TASKS))
        raise UserError(f"task.name: unknown task {cfg.name!r} (known: {known})")
    task.checker_name, task.checker = get_checker(cfg.checker, default=default_checker)
    task.chat_template = bool(getattr(cfg, "chat_template", False))
    return task
