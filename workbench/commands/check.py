"""`workbench check`: score saved completions against a run config's task, with no run and no Ray.

    workbench check --config configs/mathcode.yaml --completions saved.jsonl [--json] [--set k=v ...]

Each line of the completions file is `{"example": ROW, "completion": "..."}` (optionally with
`"domain": NAME` in a task mix). It prints, per line, the example's domain (a single task's is
its task name), the verdict (pass, fail, timeout, error, sandbox_error, not_applicable), the reward
(+1 pass, -1 otherwise, none for a sandbox error: that is not a wrong answer) and the check's seconds;
`--json` prints one object a line with the keys example, domain, verdict, reward, seconds. Code
is checked in the sandbox (fail closed: where bubblewrap cannot run, a task with code refuses in
one line); math and exact tasks by their checker.

With `reward.functions` in the config, they are called on the whole file as a run calls them
(TRL's arguments; trainer_state at step 0): the reward is their weighted sum, the verdict the pass
function's (not_applicable where it gives None; several unmarked: the task's checker's), and each
line adds every function's name and value (none: not applicable); a first line names the
functions and a last line per function gives its mean and std over the values given. `--json`
adds the key values ({name: value or null}).

What ROW indexes (0-based):
- a JSONL file task (jsonl, code): the line of the file (row r is line r + 1; blank lines and
  repeated prompts are not examples); a Parquet file: its row; humaneval: the problem number
  (HumanEval/12 is row 12); an hf task: the row of `task.split`, then those of `task.val_split`
  (its row r is row len(split) + r); rows whose answer `task.answer_regex` misses are not examples.
- a synthetic family (addition, pyexpr, ...): the generated problems in order, train first
  (rows 0 .. num_train - 1), then validation; the same seed and counts give the same rows.
- a task mix: with "domain", the row in that domain's source as above; without it, the rows of the
  sources one after another in config order (source i's rows start where source i - 1's end:
  its largest row + 1).

The whole file is read and every row looked up before anything is checked: a broken line or a
row that does not exist is one line naming the file, the line and the fix, with nothing run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from workbench.errors import UserError
from workbench.tasks.types import Example, TaskData

# tasks read from a file: every row of the file is an example for `check` (not only a split's)
FILE_ROWS = ("jsonl", "parquet", "code", "humaneval", "hf")
ALL_ROWS = 10**9


def _row_of(name: str, ex: Example) -> int:
    """The 0-based file row (or generated position) of a loaded example: JSONL ids are line numbers."""
    return ex.id - 1 if name in ("jsonl", "code") else ex.id


def _source_rows(cfg: Any) -> tuple[TaskData, dict[int, Example]]:
    """A single source's task and its examples by row (every row of a file task)."""
    from workbench.tasks.base import load_task

    if cfg.name in FILE_ROWS:
        cfg = dataclasses.replace(cfg, num_train=ALL_ROWS)
    task = load_task(cfg)
    return task, {_row_of(cfg.name, ex): ex for ex in task.train + task.val}


def example_rows(task_cfg: Any) -> tuple[TaskData, dict[str, dict[int, Example]], dict[int, tuple[str, int]]]:
    """(task, {domain: {row: example}}, {global row: (domain, row)}) for a task config or a mix."""
    from workbench.tasks.base import load_task
    from workbench.tasks.mixture import domain_of, load_mixed_task

    if not task_cfg.mix:
        task, rows = _source_rows(task_cfg)
        return task, {"": rows}, {r: ("", r) for r in rows}
    by_domain: dict[str, dict[int, Example]] = {}
    flat: dict[int, tuple[str, int]] = {}
    offset = 0
    for i, src in enumerate(task_cfg.mix):
        d = domain_of(src)
        try:
            _, rows = _source_rows(src)
        except UserError as e:
            raise UserError(f"task.mix[{i}] (domain {d!r}): {e}") from None
        by_domain[d] = {r: dataclasses.replace(ex, domain=d) for r, ex in rows.items()}
        flat.update({offset + r: (d, r) for r in rows})
        offset += 1 + max(rows)
    return load_mixed_task(task_cfg, load_task), by_domain, flat


def read_completions(path: Path, by_domain: dict, flat: dict) -> list[tuple[int, str, Example, str]]:
    """[(row as written, domain, example, completion)] for every line, or one UserError naming the line."""
    from workbench.tasks.files import iter_jsonl

    if not path.is_file():
        raise UserError(f"--completions: no such file: {path}")
    out = []
    for _, where, obj in iter_jsonl(path):
        row = obj.get("example") if isinstance(obj, dict) else None
        if not isinstance(row, int) or isinstance(row, bool) or not isinstance(obj.get("completion"), str):
            raise UserError(f'{where}: each line is {{"example": ROW (an integer), "completion": "..."}} (got {json.dumps(obj)[:80]})')
        domain = obj.get("domain")
        if domain is not None:
            if domain not in by_domain or domain == "":
                names = ", ".join(d for d in by_domain if d) or "none: this task is not a mix"
                raise UserError(f"{where}: unknown domain {domain!r} (domains: {names})")
            d, local = domain, row
        else:
            d, local = flat.get(row, ("", None))
        if local not in by_domain.get(d, {}):
            span = f"rows 0..{max(flat)}" if flat else "no rows"
            raise UserError(
                f"{where}: example row {row} does not exist{f' in domain {d!r}' if domain else ''} ({span}; blank "
                "lines and repeated prompts are not examples): fix the row"
            )
        out.append((row, d, by_domain[d][local], obj["completion"]))
    if not out:
        raise UserError(f"{path}: no completions (the file is empty)")
    return out


def check_completions(task: TaskData, items: list[tuple[int, str, Example, str]], trainer_state: Any = None) -> list[dict[str, Any]]:
    """One result dict per item (keys: example, domain, verdict, reward, seconds; with
    `task.reward_functions`, values: {function name: value, None where not applicable}, and the
    reward is their weighted sum). `trainer_state`: what the functions get as TRL's."""
    from workbench.tasks.base import check_batch

    examples = [ex for _, _, ex, _ in items]
    texts = [c for _, _, _, c in items]
    if task.sandboxed and any(getattr(task.parts.get(ex.domain, task), "sandboxed", False) for ex in examples):
        from workbench.tasks.sandbox import LocalSandbox, require_sandbox

        require_sandbox()
        with LocalSandbox(workers=2) as sandbox:
            verdicts = check_batch(task, texts, examples, sandbox=sandbox, trainer_state=trainer_state)
    else:
        verdicts = check_batch(task, texts, examples, trainer_state=trainer_state)
    out = []
    for (row, d, _, _), v in zip(items, verdicts):
        r = {"example": row, "domain": d or task.name, "verdict": v.verdict,
             "reward": None if v.verdict == "sandbox_error" else v.reward if v.reward is not None else (1.0 if v.passed else -1.0),
             "seconds": round(v.seconds, 6)}  # fmt: skip
        if task.reward_functions:
            r["values"] = {f.name: _value((v.values or {}).get(f.name)) for f in task.reward_functions}
        out.append(r)
    return out


def _value(x: Any) -> Any:
    """A function's value as printed: None where it gave None (NaN in a verdict) or gave nothing (a sandbox error)."""
    return None if x is None or x != x else x


def functions_line(functions: list) -> str:
    """The first line with reward.functions: each one's name, weight and which decides pass / fail."""
    said = [f"{f.name} (weight {f.weight:g}{', decides pass / fail' if f.decides_pass else ''})" for f in functions]
    decider = "" if any(f.decides_pass for f in functions) else "; the task's checker decides pass / fail"
    return f"reward functions: {', '.join(said)}{decider}"


def summary_lines(functions: list, results: list[dict[str, Any]]) -> list[str]:
    """A line per function: its mean and std over the values it gave, and how many were None."""
    from workbench.rl.reward_functions import ValueStats

    out = []
    for f in functions:
        s = ValueStats.of([float("nan") if (x := r["values"][f.name]) is None else x for r in results if "values" in r])
        spread = f"mean {s.mean:+.4g} std {s.std:.4g} over {s.count}" if s.count else "no value"
        out.append(f"{f.name}: {spread}, none on {s.none}")
    return out


def _help_texts() -> tuple[str, str]:
    """`check --help`'s description (what it does, the file, what it prints) and epilog (an example,
    what ROW indexes, the up-front check): paragraphs of this module's docstring, found by their first words."""
    paras = __doc__.split("\n\n")
    line_format = next(p for p in paras if p.startswith("Each line of the completions file"))
    functions = next(p for p in paras if p.startswith("With `reward.functions`"))
    rows = next(p for p in paras if p.startswith("What ROW indexes"))
    upfront = next(p for p in paras if p.startswith("The whole file is read"))
    example = "example:\n  workbench check --config configs/mathcode.yaml --completions saved.jsonl --json"
    return "\n\n".join([paras[0], line_format, functions]), "\n\n".join([example, rows, upfront])


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    description, epilog = _help_texts()
    p = sub.add_parser(name, help="score saved completions against a task (no run, no Ray)", description=description,
                       epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a run config (its task section is used)")
    p.add_argument("--completions", required=True, help='JSONL: {"example": ROW, "completion": "..."} per line')
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    return p


def run(args: argparse.Namespace) -> int:
    from workbench.config import load_run_config
    from workbench.rl.reward_functions import RewardState, load_reward_functions

    cfg = load_run_config(args.config, args.set)
    if cfg.task.name == "env":  # episodes, not texts: there is no completion to score on its own
        raise UserError(f"workbench check scores saved completions, but task.env {cfg.task.env!r} scores whole episodes "
                        "(its tools' results and replies are part of them): try the environment with "
                        "`workbench run --config ... --set train.max_steps=1` and read `workbench samples`")  # fmt: skip
    task, by_domain, flat = example_rows(cfg.task)
    items = read_completions(Path(args.completions), by_domain, flat)
    task.reward_functions = load_reward_functions(cfg.reward.functions)  # [] without: the task's +1 / -1
    results = check_completions(task, items, RewardState(0, cfg.train.max_steps, 0.0))
    if task.reward_functions and not args.json:
        print(functions_line(task.reward_functions))
    for r in results:
        if args.json:
            print(json.dumps(r))
            continue
        reward = "none" if r["reward"] is None else f"{r['reward']:+g}"
        values = "".join(f"  {k} {'none' if x is None else f'{x:g}'}" for k, x in r.get("values", {}).items())
        print(f"example {r['example']:>6}  domain {r['domain']:<12} {r['verdict']:<14} reward {reward:<5} {r['seconds']:.4f}s{values}")
    if task.reward_functions and not args.json:
        print("\n".join(summary_lines(task.reward_functions, results)))
    sys.stdout.flush()
    return 0
