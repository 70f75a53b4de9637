"""Countdown (TinyZero's rule: every given number exactly once): solvable problems, and a verifier
that parses with `ast` and never runs model text."""

from __future__ import annotations

import json

import pytest

from workbench.config import TaskConfig
from workbench.errors import UserError
from workbench.tasks.base import check_batch, load_task
from workbench.tasks.countdown import check_countdown, equation_value

SPEC = json.dumps({"target": 24, "numbers": [3, 5, 7, 1]})


@pytest.mark.parametrize("difficulty", [2, 3, 4, 6])
def test_every_generated_problem_is_solvable_and_its_solution_passes(difficulty):
    task = load_task(TaskConfig(name="countdown", difficulty=difficulty, num_train=150, num_val=30, seed=1))
    assert task.checker_name == "countdown@answer_tag" and task.answer_format == "answer_tag"
    examples = task.train + task.val
    assert len({ex.prompt for ex in examples}) == len(examples)  # distinct, so val is never trained on
    for ex in examples:
        spec = json.loads(ex.answer)
        assert len(spec["numbers"]) == difficulty and 1 <= spec["target"] <= 999
        assert f"equals {spec['target']}" in ex.prompt and "<answer>" in ex.prompt
        assert task.checker(f"<think>hm</think> {ex.reference}", ex.answer)  # its own known solution
    verdicts = check_batch(task, [ex.reference for ex in task.val], task.val)
    assert all(v.passed for v in verdicts)


@pytest.mark.parametrize(
    "equation, ok",
    [
        ("(7 - 3) * (5 + 1)", True),
        ("(7-3)*(5+1)", True),
        ("5 * 7 - 3 * 1 - 8", False),  # 8 is not given
        ("(7 - 3) * 5 + 1 + 3", False),  # 3 used twice
        ("(7 - 3) * 5 + 4", False),  # 1 unused, 4 not given
        ("(7 - 3) * (5 + 1) + 0", False),  # an extra number
        ("7 * 3 + 5 - 1", False),  # all numbers once, but 25
        ("24", False),
    ],
)
def test_the_verifier_wants_each_number_exactly_once_and_the_target(equation, ok):
    assert check_countdown(equation, SPEC) is ok


@pytest.mark.parametrize(
    "equation",
    [
        "__import__('os').system('touch /tmp/countdown_pwned')",  # a call
        "abs(7 - 3) * (5 + 1)",  # a call of a builtin
        "(7).real * 3 + 5 - 1",  # an attribute
        "x * 3 + 5 - 1",  # a name
        "7 ** 3 - 5 - 1",  # a power
        "9 ** 9 ** 9 ** 9",  # a huge exponent: refused, never computed
        "-(7 - 3) * (5 + 1) * -1",  # unary minus
        "(7.0 - 3) * (5 + 1)",  # a float
        "(0x7 - 3) * (5 + 1)",  # a number not written as the game writes it
        "(7 - 3) * (5 + 1) if 1 else 0",  # an expression of another kind
        "[7, 3, 5, 1]",
        "lambda: 24",
        "(7 - 3) * (5 + 1); 1",  # not one expression
        "(" * 500 + "1" + ")" * 500,  # too long to be an equation over six numbers
    ],
)
def test_disallowed_syntax_fails_and_nothing_runs(equation, tmp_path):
    value, _ = equation_value(equation)
    assert value is None and not check_countdown(equation, SPEC)
    assert not (tmp_path.parent / "countdown_pwned").exists()


def test_division_is_exact_and_by_zero_fails():
    assert equation_value("7 / 2")[0] * 2 == 7  # a fraction, not 3.5 in floating point
    spec = json.dumps({"target": 1, "numbers": [3, 3, 1]})
    assert check_countdown("3 / 3 * 1", spec)
    assert not check_countdown("1 / (3 - 3)", spec)  # division by zero is a wrong answer, not a crash


def test_an_answer_outside_the_tag_or_a_number_format_is_refused():
    task = load_task(TaskConfig(name="countdown", difficulty=3, num_train=10, num_val=5))
    ex = task.val[0]
    solution = ex.reference.removeprefix("<answer>").removesuffix("</answer>")
    assert not task.checker(solution, ex.answer)  # the TinyZero format: the answer must be in the tag
    boxed = load_task(TaskConfig(name="countdown", difficulty=3, num_train=10, num_val=5, answer_format="boxed"))
    bx = boxed.val[0]
    assert bx.reference.startswith("\\boxed{") and "\\boxed{}" in bx.prompt
    assert boxed.checker(f"so {bx.reference}", bx.answer) and not boxed.checker(f"<answer>{bx.reference[7:-1]}</answer>", bx.answer)
    with pytest.raises(UserError, match="countdown's answer is an equation"):
        load_task(TaskConfig(name="countdown", difficulty=3, num_train=10, num_val=5, answer_format="last_number"))
    with pytest.raises(UserError, match=r"task.difficulty must be in 2..6 for 'countdown'"):
        load_task(TaskConfig(name="countdown", difficulty=9, num_train=10, num_val=5))


def test_no_validation_problem_is_a_training_problem_with_its_numbers_reordered():
    # "[3, 7] -> 10" and "[7, 3] -> 10" are different prompts but the same problem: one in train
    # and one in val would score memorisation as generalisation (about 9% of val at difficulty 2)
    task = load_task(TaskConfig(name="countdown", difficulty=2, num_train=2000, num_val=200, seed=0))

    def problem(ex):
        spec = json.loads(ex.answer)
        return tuple(sorted(spec["numbers"])), spec["target"]

    train = {problem(ex) for ex in task.train}
    assert len(train) == len(task.train) and not [ex.prompt for ex in task.val if problem(ex) in train]
