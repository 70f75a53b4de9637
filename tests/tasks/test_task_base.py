"""Checkers and their error wrapping; checker selection."""

from __future__ import annotations

import pytest

from workbench.config import TaskConfig
from workbench.errors import UserError
from workbench.tasks.base import CheckerError, exact_checker, get_checker, load_task, safe_check


def test_exact_checker_strips_whitespace_only():
    assert exact_checker(" 52\n", "52")
    assert not exact_checker("052", "52")
    assert not exact_checker("5 2", "52")
    assert not exact_checker("", "52")


def test_safe_check_wraps_checker_errors_with_example_id():
    def broken(completion: str, answer: str) -> bool:
        raise RuntimeError("boom")

    with pytest.raises(CheckerError, match=r"example 17.*RuntimeError: boom") as info:
        safe_check(broken, "x", "y", example_id=17)
    assert isinstance(info.value, UserError)
    assert safe_check(exact_checker, "1", "1", example_id=0) is True


def test_a_checker_error_of_several_lines_is_one_line():
    def verbose(completion: str, answer: str) -> bool:
        raise ValueError("could not parse:\n  \\frac{1}{\n  ^ here")

    with pytest.raises(CheckerError) as info:
        safe_check(verbose, "a\nb", "y", example_id=3)
    msg = str(info.value)
    assert "\n" not in msg and "ValueError: could not parse: \\frac{1}{ ^ here" in msg and "example 3" in msg


def test_checker_choice():
    assert get_checker("auto", default="exact")[0] == "exact"
    assert get_checker("auto", default="math")[0] == "math"
    assert get_checker("math", default="exact")[0] == "math"
    with pytest.raises(UserError, match="unknown checker"):
        get_checker("fuzzy", default="exact")
    task = load_task(TaskConfig(name="addition", checker="math", num_train=10, num_val=5))
    assert task.checker_name == "math" and task.checker("The sum is 12", "12")


def test_counts_must_be_positive():
    with pytest.raises(UserError, match="num_val"):
        load_task(TaskConfig(name="addition", num_val=0))


def test_a_checker_is_imported_as_reward_functions_are_one_line_whatever_fails(tmp_path, monkeypatch):
    """task.checker and reward.functions share one importer (configtools.import_spec): dotted
    attributes, and any failure of the user's module (not only ImportError) is one line."""
    from workbench.rl.reward_functions import load_reward_functions

    (tmp_path / "judge_needs_a_key.py").write_text("raise RuntimeError('no API key\\n  set JUDGE_KEY')\n")
    (tmp_path / "judges_here.py").write_text("class Judge:\n    @staticmethod\n    def score(c, a):\n        return c == a\n\n\nNOT = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    name, fn = get_checker("judges_here:Judge.score", default="exact")
    assert name == "judges_here:Judge.score" and fn("1", "1") and not fn("1", "2")
    for spec, said in [("judge_needs_a_key:f", "task.checker: cannot import 'judge_needs_a_key:f': RuntimeError: no API key set JUDGE_KEY"),
                       ("judges_here:NOT", "task.checker: 'judges_here:NOT' is not callable"),
                       ("judges_here:nope", "task.checker: cannot import 'judges_here:nope': AttributeError")]:  # fmt: skip
        with pytest.raises(UserError) as e:
            get_checker(spec, default="exact")
        assert str(e.value).startswith(said) and "\n" not in str(e.value)
    with pytest.raises(UserError, match=r"^reward.functions: cannot import 'judge_needs_a_key:f': RuntimeError: no API key"):
        load_reward_functions([{"fn": "judge_needs_a_key:f"}])
