"""Real datasets from local JSONL / Parquet files, and the math-answer checker.

    cfg = TaskConfig(name="jsonl", path="data/gsm8k.jsonl", prompt_key="question", answer_key="answer")
    task = load_task(cfg)                   # checker "auto" -> math_checker for files
    math_checker("The answer is $\\frac{1}{2}$", "0.5")   # -> True

Each JSONL line (blank lines skipped) or Parquet row is one example; `prompt_key` must hold a
string or, as TRL's conversational datasets hold it, a list of {"role", "content"} messages
(workbench.tasks.chat; with task.chat_template only), `answer_key` a string or a number; the row's
other columns are kept for reward functions. Problems are reported as `UserError`s naming the
file and the line (JSONL, 1-based) or row (Parquet, 0-based); the example id is that same
line / row number, so a checker error can be traced back to the file. Repeated prompts are
kept once (first occurrence), then the rows are shuffled by the seed and cut into val
(`num_val` rows) and train (up to `num_train` of the rest).

`math_checker` relies on math-verify (no home-made LaTeX equivalence). math-verify's timeouts
use SIGALRM, which only works in the main thread; off the main thread (Ray threaded actors,
a thread pool) we turn them off and bound the work instead by checking only the last
`MAX_MATH_CHARS` characters of a completion.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional, TypeVar

from workbench.errors import UserError
from workbench.tasks.chat import messages_text, parse_messages
from workbench.tasks.types import Example, TaskData

T = TypeVar("T")
MAX_MATH_CHARS = 2000  # answers sit at the end of a completion; longer text is not parsed
MATH_TIMEOUT_S = 5  # per parse / comparison, main thread only


# ---------------------------------------------------------------------------- loading


def _answer_text(value: Any, where: str, key: str) -> str:
    if isinstance(value, bool) or value is None:
        raise UserError(f"{where}: {key!r} must be a string or a number, got {value!r}")
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    # numpy scalars from Parquet
    if hasattr(value, "item") and isinstance(value.item(), (int, float)) and not isinstance(value.item(), bool):
        return str(value.item())
    raise UserError(f"{where}: {key!r} must be a string or a number, got {type(value).__name__}")


class Row(NamedTuple):
    """One example as read from a file or dataset (see `record`)."""

    id: int
    prompt: str  # the prompt's text; for a conversation its "role: content" lines (tasks/chat.py)
    answer: str
    messages: tuple = ()  # a conversational prompt's ((role, content), ...)
    where: str = ""  # "file:line" / "file: row n", for a refusal that names the row
    columns: dict = {}  # the row's other columns (reward functions get them)


def plain_value(value: Any) -> Any:
    """A Parquet / Arrow value as plain Python (numpy arrays and scalars to lists and numbers)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_value(v) for v in value]
    return value


def record(row: Any, where: str, prompt_key: str, answer_key: str, row_id: int = 0) -> Row:
    """One row's example: its prompt a non-empty string or a list of {role, content} messages (TRL's
    conversational format), its answer a string or a number; anything else is one UserError naming the row."""
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in (prompt_key, answer_key):
        if key not in row:
            keys = ", ".join(map(repr, list(row)[:10]))
            raise UserError(f"{where}: missing key {key!r} (keys here: {keys}); set task.prompt_key / task.answer_key")
    prompt, messages = row[prompt_key], ()
    if not isinstance(prompt, str):
        messages = parse_messages(prompt, where, prompt_key)
        prompt = messages_text(messages)
    if not prompt:
        raise UserError(f"{where}: {prompt_key!r} must be a non-empty string or message list, got {prompt!r:.80}")
    columns = {k: plain_value(v) for k, v in row.items() if k != prompt_key}
    return Row(row_id, prompt, _answer_text(row[answer_key], where, answer_key), messages, where, columns)


def iter_jsonl(path: Path) -> Iterator[tuple[int, str, Any]]:
    """(line number, "file:line", parsed value) per non-blank line; a malformed line is one UserError."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield lineno, where, json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{where}: malformed JSON ({e.msg} at column {e.colno})") from None


def read_jsonl(path: Path, prompt_key: str, answer_key: str) -> list[Row]:
    """The rows of a JSONL file, their ids the line numbers."""
    return [record(obj, where, prompt_key, answer_key, lineno) for lineno, where, obj in iter_jsonl(path)]


def read_parquet(path: Path, prompt_key: str, answer_key: str) -> list[Row]:
    """The rows of a Parquet file, their ids the row numbers."""
    import pandas as pd

    try:
        df = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises many types for a bad file
        raise UserError(f"{path}: cannot read as Parquet ({type(e).__name__}: {e})") from None
    missing = [k for k in (prompt_key, answer_key) if k not in df.columns]
    if missing:
        cols = ", ".join(map(repr, list(df.columns)[:20]))
        raise UserError(f"{path}: missing column(s) {', '.join(map(repr, missing))} (columns: {cols}); set task.prompt_key / task.answer_key")
    return [record(row, f"{path}: row {i}", prompt_key, answer_key, i) for i, row in enumerate(df.to_dict("records"))]


def dedupe(items: Iterable[T], key: Callable[[T], str]) -> list[T]:
    """`items` with repeats (the same `key`) left out, first occurrence kept, in order."""
    seen: set[str] = set()
    out = []
    for item in items:
        if (k := key(item)) not in seen:
            seen.add(k)
            out.append(item)
    return out


def split_rows(cfg: Any, rows: list[T], val_rows: Optional[list[T]], *, key: Callable[[T], str], label: str,
               source: str, what: str = "prompts") -> tuple[list[T], list[T]]:  # fmt: skip
    """(the rest, val) of a task's rows: repeats (by `key`) kept once, shuffled by `cfg.seed` (seeded by
    `label`), then `cfg.num_val` rows for val (from `val_rows` when given, else from `rows`); training
    takes up to `cfg.num_train` of the rest (a row in val is never trained on)."""
    rows = dedupe(rows, key)
    rng = random.Random(f"{label}:{cfg.seed}")
    if val_rows is not None:
        val_rows = dedupe(val_rows, key)
        rng.shuffle(val_rows)
        held = val_rows[: cfg.num_val]
        in_val = {key(r) for r in held}
        rows = [r for r in rows if key(r) not in in_val]
    if not rows or (val_rows is None and len(rows) <= cfg.num_val):
        raise UserError(
            f"{source}: {len(rows)} distinct {what}, but task.num_val={cfg.num_val} leaves none for training; "
            "lower task.num_val"
        )
    rng.shuffle(rows)
    if val_rows is None:
        held, rows = rows[: cfg.num_val], rows[cfg.num_val :]
    return rows, held


def load_file_task(cfg) -> TaskData:
    """A TaskData from `cfg.path` read as `cfg.name` ('jsonl' or 'parquet')."""
    if not cfg.path:
        raise UserError(f"task.path is required for task.name={cfg.name!r}")
    path = Path(cfg.path).expanduser()
    if not path.is_file():
        raise UserError(f"task.path: no such file: {path}")
    reader = read_jsonl if cfg.name == "jsonl" else read_parquet
    rows = reader(path, cfg.prompt_key, cfg.answer_key)
    if not rows:
        raise UserError(f"{path}: no examples (the file is empty)")
    return task_from_rows(cfg, rows, source=str(path))


def task_from_rows(cfg, rows: list[Row], *, source: str, val_rows: list[Row] | None = None) -> TaskData:
    """A TaskData from rows: repeated prompts kept once, shuffled by `cfg.seed`,
    then `cfg.num_val` rows for val (from `val_rows` when given, else from `rows`) and up to
    `cfg.num_train` of the rest for train (a prompt in val is never trained on). The math checker.
    A conversational prompt needs `task.chat_template: true` (refused naming its row otherwise)."""
    if not getattr(cfg, "chat_template", False):
        for r in [*rows, *(val_rows or [])]:
            if r.messages:
                raise UserError(f"{r.where}: the prompt is a message list, which only the chat template can encode; "
                                "set task.chat_template: true")  # fmt: skip
    rows, held = split_rows(cfg, rows, val_rows, key=lambda r: r.prompt, label="file", source=source)
    val = [Example(id=r.id, prompt=r.prompt, answer=r.answer, messages=r.messages, columns=r.columns) for r in held]
    train = [Example(id=r.id, prompt=r.prompt, answer=r.answer, messages=r.messages, columns=r.columns) for r in rows[: cfg.num_train]]
    alphabet = "".join(sorted({c for ex in train + val for c in ex.prompt + ex.answer}))
    return TaskData(
        name=cfg.name,
        train=train,
        val=val,
        checker=math_checker,
        stop=None,
        alphabet=alphabet,
        checker_name="math",
        difficulty=None,
        seed=cfg.seed,
        info={"source": source, "rows": len(rows) + len(held)},
    )


# ---------------------------------------------------------------------------- math checker


class _DropTimeoutWarning(logging.Filter):
    """math-verify warns once that timeouts are off; off the main thread that is deliberate."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutWarning())


def _timeout() -> int | None:
    # SIGALRM can only be installed from the main thread of the main interpreter.
    return MATH_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=65536)
def _parse_gold_cached(answer: str) -> tuple:
    from math_verify import parse

    # A bare gold answer ("0.5", "\frac{1}{2}") is read as LaTeX math; one already delimited
    # or boxed is parsed as written. Parsing is pure, so caching across threads is safe.
    text = answer if ("$" in answer or "\\boxed" in answer) else f"${answer}$"
    return tuple(parse(text, parsing_timeout=_timeout()))


def math_checker(completion: str, answer: str) -> bool:
    """True iff math-verify finds the completion's final answer equal to `answer`.

    A completion equal to the answer (whitespace stripped) is right even if it is not math.
    """
    from math_verify import parse, verify

    answer = answer.strip()
    if completion.strip() == answer:  # identical text is right whatever math-verify makes of it
        return True
    gold = list(_parse_gold_cached(answer))
    if not gold:
        return False
    to = _timeout()
    pred = parse(completion[-MAX_MATH_CHARS:], parsing_timeout=to)
    if not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=to))
