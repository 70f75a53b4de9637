"""reasoning-gym's procedural datasets as tasks (`task.name: reasoning_gym`).

    task:
      name: reasoning_gym
      dataset: leg_counting            # any name reasoning_gym registers (about 100)
      config: {min_animals: 2, max_animals: 4}   # the dataset's own config fields
      num_train: 2000
      num_val: 200

    task = make_reasoning_gym_task(cfg)   # a TaskData; task.checker.check_example(completion, example)

Train and validation come from two seeds derived from `task.seed`; a validation question that is
also a training question is dropped and another drawn, so the two never overlap. Each prompt is
the dataset's question followed by the answer format's instruction (`task.answer_format`,
default `answer_tag`: reasoning-gym's own convention, `<answer>...</answer>`, read with its
`extract_answer`). The checker is the dataset's own `score_answer(answer, entry)`: graded 0-1, a
completion passes when it scores 1.0. Each example keeps the dataset row's `question` and
`metadata` as columns (reward functions receive them, as TRL passes a dataset's columns).

Safety: some datasets' scorers evaluate the answer as code (sympy's `parse_expr`, `eval`): that
would run model-written text in the workbench's process. Every scoring call runs under an audit
hook (`sys.addaudithook`) that blocks code execution in that thread; a dataset whose scorer tries
it is refused when the task loads (a probe scores an arithmetic expression), and a call that trips
the hook later is a `CheckerError` that stops the run. Those datasets can only be scored in
the sandbox, which does not carry reasoning-gym yet.
"""

from __future__ import annotations

import difflib
import hashlib
import sys
import threading
from dataclasses import dataclass
from typing import Any, Optional

from workbench.errors import UserError, one_line
from workbench.rl.answers import ANSWER_FORMATS, INSTRUCTIONS, find_answer
from workbench.tasks.types import Example, TaskData

DEFAULT_FORMAT = "answer_tag"
PROBES = ("1+1", "__import__('os').getpid()", "[1, 2]")  # answers a scorer that evaluates text would run
_MAX_DRAWS = 20  # rounds of extra validation draws before a too-small dataset is refused


class _Guard(threading.local):
    on: bool = False
    tripped: Optional[str] = None


_GUARD = _Guard()
_HOOKED = False
_HOOK_LOCK = threading.Lock()


def _audit(event: str, args: tuple) -> None:
    if event == "exec" and _GUARD.on:  # eval/exec of code while a scorer reads model text
        _GUARD.tripped = event
        raise RuntimeError("workbench: code execution is blocked while scoring model text")


def _install_hook() -> None:
    global _HOOKED
    with _HOOK_LOCK:
        if not _HOOKED:
            sys.addaudithook(_audit)  # process-wide and permanent; it acts only while _GUARD.on
            _HOOKED = True


def _registry() -> dict:
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise UserError("task.name reasoning_gym needs the reasoning-gym package (pip install reasoning-gym; make setup installs it)") from None
    return DATASETS


def dataset_names() -> list[str]:
    """Every dataset name reasoning-gym registers."""
    return sorted(_registry())


def _create(name: str, config: dict, seed: int, size: int) -> tuple[Any, list[dict]]:
    """The dataset and its rows: a config the dataset's own check lets through can still fail as the
    rows are drawn (simple_equations' operators_weights against its operators), so both are here."""
    from reasoning_gym.factory import create_dataset

    try:
        dataset = create_dataset(name, **{**config, "seed": seed, "size": size})
        return dataset, list(dataset)
    except (TypeError, ValueError, AssertionError, KeyError, IndexError) as e:
        raise UserError(f"task.config for reasoning_gym dataset {name!r}: {type(e).__name__}: {one_line(e) or 'invalid'}") from None


def _seeds(seed: int) -> tuple[int, int]:
    """Two unrelated seeds for train and validation, from task.seed."""
    h = hashlib.sha256(f"reasoning_gym:{seed}".encode()).digest()
    return int.from_bytes(h[:4], "little"), int.from_bytes(h[4:8], "little")


@dataclass
class ReasoningGymChecker:
    """The dataset's own `score_answer`, with the answer found in the completion the way `fmt` says."""

    dataset: Any
    name: str
    fmt: str

    @property
    def __name__(self) -> str:  # how checkers are named in errors and the run record
        return f"reasoning_gym:{self.name}"

    def extract(self, completion: str) -> Optional[str]:
        if self.fmt == "answer_tag":
            from reasoning_gym.utils import extract_answer

            return extract_answer(completion)
        return find_answer(completion, self.fmt)

    def score(self, completion: str, example: Example) -> float:
        """The graded score in [0, 1] of `completion` on `example` (its dataset row)."""
        entry = {"question": example.columns.get("question", example.prompt), "answer": example.answer,
                 "metadata": example.columns.get("metadata", {})}  # fmt: skip
        answer = self.extract(completion)
        _install_hook()
        _GUARD.on, _GUARD.tripped = True, None
        try:
            value = self.dataset.score_answer(answer, entry)
        finally:
            _GUARD.on = False
        if _GUARD.tripped:
            raise UserError(f"reasoning_gym dataset {self.name!r}: its scorer tried to run the answer as code (blocked); "
                            "model text runs only in the sandbox")  # fmt: skip
        return float(value)

    def check_example(self, completion: str, example: Example) -> bool:
        return self.score(completion, example) >= 1.0

    def __call__(self, completion: str, answer: str) -> bool:
        raise UserError(f"reasoning_gym dataset {self.name!r}: its checker needs the example's row (check_example), not the answer alone")


def _refuse_code_scorers(checker: ReasoningGymChecker, probe: Example) -> None:
    """Score a few expression-like answers under the guard: a scorer that evaluates them is refused."""
    for text in PROBES:
        try:
            checker.score(f"<answer>{text}</answer> {text}", probe)
        except UserError:
            raise UserError(
                f"task.dataset {checker.name!r}: its scorer evaluates the answer as code (eval / sympy), which the workbench runs "
                "only in the sandbox, and reasoning-gym's scorers do not run there yet; choose another dataset"
            ) from None
        except Exception:  # noqa: BLE001 - a scorer that raises on odd text is not a code runner
            continue


def _example(i: int, entry: dict, fmt: str, name: str) -> Example:
    prompt = f"{entry['question'].rstrip()}\n\n{INSTRUCTIONS[fmt]}"
    return Example(id=i, prompt=prompt, answer=str(entry["answer"]),
                   columns={"question": entry["question"], "metadata": entry.get("metadata", {}), "dataset": name})  # fmt: skip


def make_reasoning_gym_task(cfg: Any) -> TaskData:
    """The task `cfg` (a TaskConfig with name reasoning_gym) names: train and validation rows, the checker."""
    registry = _registry()
    name = getattr(cfg, "dataset", None)
    if not name:
        raise UserError(f"task.dataset: name a reasoning-gym dataset for task reasoning_gym (one of {len(registry)}, e.g. leg_counting)")
    if name not in registry:
        close = difflib.get_close_matches(name, list(registry), n=4, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"one of {len(registry)}: workbench.tasks.reasoning_gym.dataset_names()"
        raise UserError(f"task.dataset: unknown reasoning-gym dataset {name!r} ({hint})")
    fmt = getattr(cfg, "answer_format", None) or DEFAULT_FORMAT
    if fmt not in ANSWER_FORMATS:
        raise UserError(f"task.answer_format: unknown format {fmt!r} (one of {', '.join(ANSWER_FORMATS)})")
    config = dict(getattr(cfg, "config", None) or {})
    if not isinstance(getattr(cfg, "config", None) or {}, dict):
        raise UserError("task.config: for reasoning_gym, a mapping of the dataset's config fields")
    train_seed, val_seed = _seeds(cfg.seed)
    dataset, train_rows = _create(name, config, train_seed, cfg.num_train)  # its rows, and its score_answer for the checker
    train = [_example(i, e, fmt, name) for i, e in enumerate(train_rows)]
    seen = {e["question"] for e in train_rows}
    val: list[Example] = []
    for draw in range(_MAX_DRAWS):
        # reasoning-gym seeds row i with seed + i: each round starts past the rows the last one drew
        for e in _create(name, config, val_seed + draw * cfg.num_val, cfg.num_val)[1]:
            if e["question"] not in seen and len(val) < cfg.num_val:
                seen.add(e["question"])
                val.append(_example(cfg.num_train + len(val), e, fmt, name))
        if len(val) == cfg.num_val:
            break
    else:
        raise UserError(f"task.dataset {name!r}: only {len(val)} validation questions differ from the training ones; "
                        "lower task.num_val or task.num_train, or widen task.config")  # fmt: skip
    checker = ReasoningGymChecker(dataset, name, fmt)
    first = train_rows[0]
    for known in (str(first["answer"]), "0"):  # our own data, unguarded: the scorer's lazy imports happen here
        dataset.score_answer(known, first)
    _refuse_code_scorers(checker, train[0])
    return TaskData(name="reasoning_gym", train=train, val=val, checker=checker, stop=None, checker_name=f"reasoning_gym:{name}",
                    seed=cfg.seed, answer_format=fmt, info={"dataset": name, "config": config})  # fmt: skip
