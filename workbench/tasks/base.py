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

Scoring in batches (the engine and `workbench check`): `check_batch(task, completions, examples,
sandbox)` gives one `Verdict` per completion; each example goes to its own domain's checker (a
task mix, workbench.tasks.mixture), code examples to `sandbox.run` / `sandbox.submit` (a
LocalSandbox or the engine's RewardPool), refused without one (fail closed).
`submit_checks(...)` starts the code checks at once and `.get()` gathers them later. With
`reward.functions` (`task.reward_functions`, workbench.rl.reward_functions) the batch is then scored by them:
the verdict carries the weighted reward and each function's value, and the pass function (the
only one, or the one with `pass: true`; none of several: the task's checker) decides the verdict:
`not_applicable` where it gave None.
`task.answer_format` wraps the checker (`FormattedChecker`): it sees the answer the format finds.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from workbench.configtools import import_spec
from workbench.errors import UserError, one_line
from workbench.tasks.types import VERDICTS, Checker, Example, TaskData, Verdict, exact_checker


class CheckerError(UserError):
    """A checker raised on some example; the message names the example and the cause."""


def safe_check(checker: Checker, completion: str, answer: str, *, example_id: int | None = None,
               example: Optional[Example] = None) -> bool:  # fmt: skip
    """Run `checker` and turn any exception into a `CheckerError` naming the example. A checker that
    reads the whole row (`check_example`, e.g. reasoning-gym's scorers) gets `example`."""
    try:
        if example is not None and hasattr(checker, "check_example"):
            return bool(checker.check_example(completion, example))
        return bool(checker(completion, answer))
    except Exception as e:  # noqa: BLE001 - every checker failure must surface the same way
        where = f"example {example_id}" if example_id is not None else "an example"
        name = getattr(checker, "__name__", type(checker).__name__)
        raise CheckerError(
            f"checker {name!r} failed on {where} (answer {answer[:80]!r}, completion {completion[:80]!r}): "
            f"{type(e).__name__}: {one_line(e)}"
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
    """A user's own verifier, named 'package.module:function' (it must be importable on every worker);
    imported as `reward.functions` are (configtools.import_spec): a failure is one line."""
    return import_spec(spec, "task.checker")


def load_task(cfg) -> TaskData:
    """Build the task named by `cfg.name` (a `workbench.config.TaskConfig`)."""
    from workbench.tasks import code, codegen, files, hf, synthetic

    if getattr(cfg, "mix", None):
        from workbench.tasks.mixture import load_mixed_task

        return load_mixed_task(cfg, load_task)
    if cfg.num_train < 1 or cfg.num_val < 1:
        raise UserError(f"task.num_train ({cfg.num_train}) and task.num_val ({cfg.num_val}) must be >= 1")
    if cfg.name in FILE_TASKS:
        task = files.load_file_task(cfg)
        default_checker = "math"
    elif cfg.name == "hf":  # datasets.load_dataset: a hub id, a local folder or file (tasks/hf.py)
        task = hf.load_hf_task(cfg)
        default_checker = "math"
    elif cfg.name in synthetic.TASKS:
        task = synthetic.make_task(cfg.name, cfg.difficulty, num_train=cfg.num_train, num_val=cfg.num_val, seed=cfg.seed)
        default_checker = "exact"
    elif cfg.name == "env":  # an environment: its episodes are scored, not texts (tasks/env/task.py)
        from workbench.tasks.env.task import load_env_task

        return load_env_task(cfg)
    elif cfg.name == "reasoning_gym":  # reasoning-gym's datasets, scored by their own score_answer (tasks/reasoning_gym.py)
        from workbench.tasks.reasoning_gym import make_reasoning_gym_task

        task = make_reasoning_gym_task(cfg)
        task.chat_template = bool(getattr(cfg, "chat_template", False))
        task.system_prompt = getattr(cfg, "system_prompt", None) or ""
        return task
    elif cfg.name in CHAT_FAMILIES:  # countdown, word_problems: they write their answer format into the prompt
        task = _chat_family(cfg)
        default_checker = "exact"
    elif (cfg.name in codegen.TASKS or cfg.name in code.CODE_TASKS) and getattr(cfg, "answer_format", None):
        raise UserError(f"task.answer_format does not apply to the code task {cfg.name!r}: the sandbox checks the whole completion")
    elif cfg.name in codegen.TASKS:  # code: checked in the sandbox (check_batch), never by a local checker
        task = codegen.make_code_task(cfg.name, cfg.difficulty, num_train=cfg.num_train, num_val=cfg.num_val, seed=cfg.seed)
        task.chat_template = bool(getattr(cfg, "chat_template", False))
        return task
    elif cfg.name in code.CODE_TASKS:  # a code JSONL file or HumanEval: sandboxed like the family above
        task = code.load_code_task(cfg)
        task.chat_template = bool(getattr(cfg, "chat_template", False))
        return task
    else:
        known = ", ".join(sorted(synthetic.TASKS) + list(CHAT_FAMILIES) + list(FILE_TASKS) + ["hf", "reasoning_gym", "env"] + list(codegen.TASKS) + list(code.CODE_TASKS))
        raise UserError(f"task.name: unknown task {cfg.name!r} (known: {known})")
    if not (cfg.checker == "auto" and cfg.name in CHAT_FAMILIES):  # else the family's own (countdown's equation check)
        task.checker_name, task.checker = get_checker(cfg.checker, default=default_checker)
    task.answer_format = getattr(cfg, "answer_format", None) or task.answer_format
    if task.answer_format:  # the checker sees the answer the format finds, not the whole completion
        task.checker = FormattedChecker(task.checker, task.answer_format)
        task.checker_name = f"{task.checker_name}@{task.answer_format}"
    task.chat_template = bool(getattr(cfg, "chat_template", False))
    task.system_prompt = getattr(cfg, "system_prompt", None) or ""
    return task


CHAT_FAMILIES = ("countdown", "word_problems")


def _chat_family(cfg) -> TaskData:
    """A synthetic family written for chat models (tasks/countdown.py, tasks/word_problems.py)."""
    from workbench.tasks.countdown import make_countdown_task
    from workbench.tasks.word_problems import make_word_task

    make = make_countdown_task if cfg.name == "countdown" else make_word_task
    kw = {"answer_format": cfg.answer_format} if getattr(cfg, "answer_format", None) else {}
    return make(cfg.difficulty, num_train=cfg.num_train, num_val=cfg.num_val, seed=cfg.seed, **kw)


class FormattedChecker:
    """A checker applied to the answer `task.answer_format` finds in a completion (no answer: wrong)."""

    def __init__(self, checker: Checker, fmt: str):
        self.checker, self.fmt = checker, fmt
        self.__name__ = f"{getattr(checker, '__name__', type(checker).__name__)}@{fmt}"

    def __call__(self, completion: str, answer: str) -> bool:
        from workbench.rl.answers import find_answer

        found = find_answer(completion, self.fmt)
        return found is not None and bool(self.checker(found, answer))


class PendingChecks:
    """Verdicts on their way (`submit_checks`): sandboxed checks already submitted to the pool,
    the others run by `get()` in this process while the pool works."""

    def __init__(self, task: TaskData, completions: list[str], examples: list[Example], sandbox: Any,
                 completion_ids: Optional[list] = None, trainer_state: Any = None, task_verdict: bool = False):  # fmt: skip
        from workbench.tasks.mixture import part_for

        self._task, self._completions, self._examples = task, completions, examples
        self._completion_ids, self._trainer_state = completion_ids, trainer_state
        self._task_verdict = task_verdict
        self._remote = [i for i, ex in enumerate(examples) if part_for(task, ex).sandboxed]
        self._pending = None
        self._sandbox = sandbox
        if self._remote:
            if sandbox is None:
                raise UserError(
                    f"task {task.name!r} has code examples but no sandbox to check them in; code is "
                    "never run outside the sandbox (pass sandbox=LocalSandbox() or a RewardPool)"
                )
            from workbench.tasks.sandbox import CodeCheck

            # identical (completion, spec) pairs (a group often samples the same answer) run once
            self._unique = list(dict.fromkeys((completions[i], examples[i].answer) for i in self._remote))
            checks = [CodeCheck(c, spec) for c, spec in self._unique]
            # a pool runs them while we go on (decoding, local checks); a local sandbox at get()
            self._pending = sandbox.submit(checks) if hasattr(sandbox, "submit") else checks

    def get(self) -> list[Verdict]:
        from workbench.tasks.mixture import part_for

        out: list[Verdict | None] = [None] * len(self._examples)
        remote = set(self._remote)
        for i, (text, ex) in enumerate(zip(self._completions, self._examples)):
            if i in remote:
                continue
            t0 = time.perf_counter()
            ok = safe_check(part_for(self._task, ex).checker, text, ex.answer, example_id=ex.id, example=ex)
            out[i] = Verdict("pass" if ok else "fail", seconds=time.perf_counter() - t0)
        if self._remote:
            p = self._pending
            verdicts = p.get() if hasattr(p, "get") else self._sandbox.run(p)
            if len(verdicts) != len(self._unique):
                raise UserError(f"the sandbox returned {len(verdicts)} verdicts for {len(self._unique)} checks")
            by_key = dict(zip(self._unique, verdicts))
            for i in self._remote:
                out[i] = by_key[(self._completions[i], self._examples[i].answer)]
        if self._task.reward_functions:
            return self._rescored(out)  # type: ignore[arg-type]
        return out  # type: ignore[return-value]

    def _rescored(self, verdicts: list[Verdict]) -> list[Verdict]:
        """The verdicts as `reward.functions` see them: each sample's reward their weighted sum, and
        passed when the pass function's value is > 0, not_applicable when it gave None. Without a
        pass function (several, none marked), or with `task_verdict` (reward.validate_with: task),
        the task's checker's verdict stays. A sandbox error stays one (its group is dropped)."""
        from workbench.rl.reward_functions import score_batch
        from workbench.tasks.chat import reward_inputs
        from workbench.tasks.mixture import part_for

        exs = self._examples
        prompts, completions, columns = reward_inputs([part_for(self._task, ex) for ex in exs], exs, self._completions)
        columns["task_passed"] = [v.passed for v in verdicts]
        scores = score_batch(self._task.reward_functions, prompts, completions, columns, [ex.id for ex in exs],
                             completion_ids=self._completion_ids, trainer_state=self._trainer_state)  # fmt: skip
        decided = None if self._task_verdict else scores.passed
        out = []
        for i, (v, reward) in enumerate(zip(verdicts, scores.rewards)):
            if v.verdict == "sandbox_error":
                out.append(v)
                continue
            if decided is None:  # the task's checker decides
                name = v.verdict
            elif decided[i] is None:  # the pass function gave None: it does not apply to this sample
                name = "not_applicable"
            else:  # a task verdict that was not a pass keeps its name (timeout, error) when the function fails it too
                name = "pass" if decided[i] else ("fail" if v.passed else v.verdict)
            values = {fn: vs[i] for fn, vs in scores.values.items()}
            out.append(Verdict(name, seconds=v.seconds, detail=v.detail, reward=reward, values=values))
        return out


def submit_checks(
    task: TaskData, completions: list[str], examples: list[Example], sandbox: Any = None, *,
    completion_ids: Optional[list] = None, trainer_state: Any = None, task_verdict: bool = False,
) -> PendingChecks:  # fmt: skip
    """Start checking `completions` against `examples` (same length); `.get()` gives the verdicts.
    `completion_ids` (token ids) and `trainer_state` (rl.reward_functions.RewardState) go to `reward.functions`;
    `task_verdict`: the task's own checker decides pass / fail even with them (validation under
    reward.validate_with: task)."""
    if len(completions) != len(examples):
        raise ValueError(f"check_batch: {len(completions)} completions for {len(examples)} examples")
    return PendingChecks(task, list(completions), list(examples), sandbox, completion_ids, trainer_state, task_verdict)


def check_batch(task: TaskData, completions: list[str], examples: list[Example], sandbox: Any = None, **context: Any) -> list[Verdict]:
    """One Verdict per completion. Examples of a non-sandboxed task (or mix source) go through their
    own checker here (pass / fail; a checker that raises stops with a CheckerError); sandboxed (code)
    examples through `sandbox.run` / `sandbox.submit` (a `LocalSandbox` or a `RewardPool`), and with
    no sandbox they are refused (fail closed: model-written code never runs unsandboxed). With
    `task.reward_functions` (reward.functions) the pass function decides pass / fail (None:
    not_applicable) and each verdict carries the weighted reward (workbench.rl.reward_functions; a
    bad return is a RewardFunctionError)."""
    return submit_checks(task, completions, examples, sandbox, **context).get()


def verdict_counts(verdicts: list[Verdict]) -> dict[str, int]:
    """{verdict: count} over every verdict name (zeros included)."""
    counts = dict.fromkeys(VERDICTS, 0)
    for v in verdicts:
        counts[v.verdict] += 1
    return counts


# More sandbox errors than this share of a batch's checks: the sandbox is broken, not unlucky.
SANDBOX_ERROR_LIMIT = 0.5


def refuse_broken_sandbox(verdicts: list[Verdict], where: str) -> None:
    """A UserError when more than `SANDBOX_ERROR_LIMIT` of `verdicts` are sandbox errors: a run
    must not go on dropping (or, worse, scoring as wrong) answers it could not check."""
    bad = [v for v in verdicts if v.verdict == "sandbox_error"]
    if verdicts and len(bad) > SANDBOX_ERROR_LIMIT * len(verdicts):
        raise UserError(
            f"the sandbox failed on {len(bad)} of {len(verdicts)} code checks of {where} "
            f"({bad[0].detail or 'no detail'}); check that bubblewrap works here (python -c "
            "'from workbench.tasks.sandbox import require_sandbox; require_sandbox()')"
        )
