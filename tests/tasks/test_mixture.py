"""Task mixtures: `task.mix` in the config, the mixed TaskData, and `check_batch` by domain."""

from __future__ import annotations

import pytest

from workbench.config import ConfigError, load_run_config
from workbench.errors import UserError
from workbench.tasks.base import CheckerError, check_batch, load_task, verdict_counts
from workbench.tasks.sandbox import LocalSandbox

MATH = {"name": "addition", "difficulty": 1, "domain": "math", "num_train": 60, "num_val": 10}
CODE = {"name": "pyexpr", "difficulty": 1, "domain": "code", "num_train": 40, "num_val": 10}


def mix_cfg(*sources, **over):
    return load_run_config(None, {"task.mix": list(sources), "eval.num_prompts": 10, **over})


def test_mixed_task_keeps_each_source_with_its_domain_and_validation_set():
    task = load_task(mix_cfg(MATH, {**CODE, "weight": 3}).task)
    assert list(task.parts) == ["math", "code"]
    assert task.weights == {"math": 0.25, "code": 0.75}
    assert task.sandboxed and not task.parts["math"].sandboxed and task.parts["code"].sandboxed
    assert [ex.domain for ex in task.val] == ["math"] * 10 + ["code"] * 10
    assert sorted(ex.domain for ex in task.train) == ["code"] * 40 + ["math"] * 60
    # ids are unique and name the source: offset (the earlier source's id span) + own id
    ids = [ex.id for ex in task.train + task.val]
    assert len(set(ids)) == len(ids)
    alone = load_task(load_run_config(None, {"task": {k: v for k, v in CODE.items() if k != "domain"}, "eval.num_prompts": 10}).task)
    assert {ex.id - 70: ex.prompt for ex in task.val if ex.domain == "code"} == {ex.id: ex.prompt for ex in alone.val}
    # the training list is interleaved: any prefix holds both domains (the builtin warm-up probes a prefix)
    assert {ex.domain for ex in task.train[:6]} == {"math", "code"}


def test_domain_defaults_to_the_task_name_and_a_single_task_is_unchanged():
    task = load_task(mix_cfg({**MATH, "domain": ""}, CODE).task)
    assert list(task.parts) == ["addition", "code"]
    single = load_task(load_run_config(None, {"task": {"name": "addition", "difficulty": 1, "num_train": 60, "num_val": 10},
                                              "eval.num_prompts": 10}).task)
    assert single.parts == {} and {ex.domain for ex in single.train + single.val} == {""}


@pytest.mark.parametrize(
    "sources, needle",
    [
        ([MATH, {**CODE, "weight": 0}], "task.mix[1].weight must be > 0"),
        ([MATH, {**CODE, "weight": -1}], "task.mix[1].weight must be > 0"),
        ([MATH, {**CODE, "domain": "math"}], "task.mix[1].domain 'math' is used twice"),
        ([MATH, {**CODE, "domain": "a b"}], "task.mix[1].domain 'a b'"),
        ([MATH, {**CODE, "mix": [MATH]}], "cannot itself be a mix"),
    ],
)
def test_bad_mixes_are_refused_in_one_line_by_the_config(sources, needle):
    with pytest.raises(ConfigError) as e:
        mix_cfg(*sources)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_an_unknown_source_names_its_place_in_the_mix():
    with pytest.raises(UserError) as e:
        load_task(mix_cfg(MATH, {"name": "nosuch", "domain": "x"}).task)
    assert str(e.value).startswith("task.mix[1] (domain 'x'): task.name: unknown task 'nosuch'") and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="unknown config key 'task.mix.0.wieght'|wieght"):
        mix_cfg({**MATH, "wieght": 1})


def test_check_batch_uses_each_domains_checker_and_the_sandbox_for_code():
    task = load_task(mix_cfg(MATH, CODE).task)
    math_ex = task.val[0]
    code_ex = next(ex for ex in task.val if ex.domain == "code")
    with LocalSandbox(workers=1) as sb:
        verdicts = check_batch(
            task,
            [math_ex.answer, "nope", code_ex.reference, code_ex.reference, "x", "import os; os._exit(0)"],
            [math_ex, math_ex, code_ex, code_ex, code_ex, code_ex],
            sandbox=sb,
        )
    assert [v.verdict for v in verdicts] == ["pass", "fail", "pass", "pass", "fail", "error"]
    assert verdict_counts(verdicts) == {"pass": 3, "fail": 2, "timeout": 0, "error": 1, "sandbox_error": 0, "not_applicable": 0, "env_error": 0}


def test_code_without_a_sandbox_fails_closed_and_math_needs_none():
    task = load_task(mix_cfg(MATH, CODE).task)
    code_ex = next(ex for ex in task.val if ex.domain == "code")
    with pytest.raises(UserError, match="no sandbox"):
        check_batch(task, [code_ex.reference], [code_ex])
    assert check_batch(task, [task.val[0].answer], [task.val[0]])[0].passed


def test_a_checker_that_raises_stays_a_checker_error(monkeypatch):
    task = load_task(mix_cfg(MATH, CODE).task)

    def broken(completion, answer):
        raise ValueError("boom")

    monkeypatch.setattr(task.parts["math"], "checker", broken)
    with pytest.raises(CheckerError, match="boom"):
        check_batch(task, ["1"], [task.val[0]])


class CountingSandbox:
    """A real LocalSandbox that counts the checks it was sent."""

    def __init__(self, sb):
        self.sb, self.sent = sb, 0

    def run(self, checks):
        self.sent += len(checks)
        return self.sb.run(checks)


def test_identical_code_completions_are_checked_once():
    task = load_task(mix_cfg(MATH, CODE).task)
    code_ex = next(ex for ex in task.val if ex.domain == "code")
    with LocalSandbox(workers=1) as sb:
        counting = CountingSandbox(sb)
        verdicts = check_batch(task, [code_ex.reference] * 5 + ["x"] * 3, [code_ex] * 8, sandbox=counting)
    assert counting.sent == 2
    assert [v.verdict for v in verdicts] == ["pass"] * 5 + ["fail"] * 3
