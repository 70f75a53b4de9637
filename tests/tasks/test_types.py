"""The task types the families build: examples are values, the exact checker ignores surrounding whitespace."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.tasks.types import Example, TaskData, exact_checker


def test_an_example_is_an_immutable_value():
    ex = Example(id=3, prompt="1+1=", answer="2")
    assert ex == Example(3, "1+1=", "2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ex.answer = "3"  # type: ignore[misc]


def test_exact_checker_compares_stripped_text_only():
    assert exact_checker(" 52\n", "52") and not exact_checker("520", "52") and not exact_checker("5 2", "52")


def test_task_data_defaults_say_nothing_was_declared():
    t = TaskData(name="t", train=[], val=[], checker=exact_checker, stop=None)
    assert (t.alphabet, t.checker_name, t.difficulty, t.seed, t.chat_template, t.info) == ("", "", None, 0, False, {})


def test_a_verdict_is_one_of_the_known_kinds_and_only_pass_passes():
    from workbench.tasks.types import VERDICTS, Verdict

    assert VERDICTS == ("pass", "fail", "timeout", "error", "sandbox_error", "not_applicable", "env_error")
    assert [Verdict(v).passed for v in VERDICTS] == [True, False, False, False, False, False, False]
    with pytest.raises(ValueError):
        Verdict("ok")
