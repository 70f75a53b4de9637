"""Arithmetic word problems at graded difficulty: each level generates distinct problems whose
answers verify, and harder levels take more steps."""

from __future__ import annotations

import re

import pytest

from workbench.config import TaskConfig
from workbench.errors import UserError
from workbench.tasks.base import check_batch, load_task
from workbench.tasks.word_problems import LEVELS


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_verifies_its_own_answers_and_refuses_wrong_ones(level):
    task = load_task(TaskConfig(name="word_problems", difficulty=level, num_train=300, num_val=40, seed=3))
    assert task.checker_name == "exact@last_number"
    examples = task.train + task.val
    assert len({ex.prompt for ex in examples}) == len(examples)
    for ex in examples:
        assert int(ex.answer) >= 0 and ex.prompt.endswith("End your reply with the answer as a number.")
    ex = task.val[0]
    assert task.checker(f"Step by step... so the answer is {ex.answer}.", ex.answer)
    assert not task.checker(f"the answer is {int(ex.answer) + 1}", ex.answer)
    assert not task.checker("I do not know.", ex.answer)
    right = check_batch(task, [f"It is {e.answer}" for e in task.val], task.val)
    assert all(v.passed for v in right)


def test_harder_levels_use_more_numbers():
    def numbers(level):
        task = load_task(TaskConfig(name="word_problems", difficulty=level, num_train=100, num_val=10))
        return sum(len(re.findall(r"\d+", ex.prompt)) for ex in task.train) / len(task.train)

    counts = [numbers(level) for level in LEVELS]
    assert counts[0] < counts[2] < counts[4]


def test_another_answer_format_is_asked_for_and_checked():
    task = load_task(TaskConfig(name="word_problems", difficulty=2, num_train=20, num_val=5, answer_format="hash"))
    ex = task.val[0]
    assert "'#### '" in ex.prompt and ex.reference == f"#### {ex.answer}"
    assert task.checker(f"work\n#### {ex.answer}", ex.answer) and not task.checker(f"it is {ex.answer}", ex.answer)


def test_a_level_out_of_range_is_one_line():
    with pytest.raises(UserError, match=r"task.difficulty must be in 1..5 for 'word_problems', got 6"):
        load_task(TaskConfig(name="word_problems", difficulty=6, num_train=10, num_val=5))
