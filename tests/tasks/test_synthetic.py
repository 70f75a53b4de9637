"""Synthetic tasks: fixed-width prompts, correct answers, seeded disjoint splits, difficulty."""

from __future__ import annotations

import pytest

from workbench.config import TaskConfig
from workbench.errors import UserError
from workbench.tasks.base import load_task
from workbench.tasks.synthetic import TASKS, make_task


def _check_answer(name: str, prompt: str, answer: str) -> None:
    if name == "addition":
        a, b = prompt.rstrip("=").split("+")
        assert answer == str(int(a) + int(b))
    elif name == "multiplication":
        a, b = prompt.rstrip("=").split("*")
        assert answer == str(int(a) * int(b))
    elif name == "reverse":
        assert prompt.startswith("rev:") and answer == prompt[4:-1][::-1]
    elif name == "sort":
        assert prompt.startswith("sort:") and answer == "".join(sorted(prompt[5:-1]))
    else:  # a new family must get a check here
        raise AssertionError(f"no answer check for {name}")


@pytest.mark.parametrize("name", sorted(TASKS))
def test_answers_are_right_and_prompts_fixed_width(name):
    task = make_task(name, 3, num_train=300, num_val=50, seed=1)
    examples = task.train + task.val
    assert len(task.train) == 300 and len(task.val) == 50
    assert len({len(ex.prompt) for ex in examples}) == 1  # same width: no padding differences
    for ex in examples:
        _check_answer(name, ex.prompt, ex.answer)
        assert set(ex.prompt + ex.answer) <= set(task.alphabet)
    assert task.checker("  " + examples[0].answer + "\n", examples[0].answer)


def test_addition_operands_are_zero_padded():
    task = make_task("addition", 2, num_train=2000, num_val=200, seed=0)
    prompts = [ex.prompt for ex in task.train]
    assert all(len(p) == 6 and p[2] == "+" and p[5] == "=" for p in prompts)
    assert any(p.startswith("0") for p in prompts)  # small operands keep their leading zero


@pytest.mark.parametrize("name", sorted(TASKS))
def test_split_is_seeded_disjoint_and_ids_unique(name):
    a = make_task(name, 3, num_train=500, num_val=100, seed=7)
    b = make_task(name, 3, num_train=500, num_val=100, seed=7)
    c = make_task(name, 3, num_train=500, num_val=100, seed=8)
    assert a.train == b.train and a.val == b.val
    assert a.train != c.train
    train_prompts = {ex.prompt for ex in a.train}
    assert len(train_prompts) == len(a.train)  # no duplicate within train
    assert not train_prompts & {ex.prompt for ex in a.val}
    ids = [ex.id for ex in a.train + a.val]
    assert len(set(ids)) == len(ids)


def test_difficulty_changes_the_problem():
    easy = make_task("addition", 2, num_train=100, num_val=10, seed=0)
    hard = make_task("addition", 4, num_train=100, num_val=10, seed=0)
    assert len(easy.train[0].prompt) == 6 and len(hard.train[0].prompt) == 10
    assert max(int(ex.answer) for ex in hard.train) > 198
    rev = make_task("reverse", 6, num_train=100, num_val=10, seed=0)
    assert all(len(ex.answer) == 6 for ex in rev.train)


def test_too_small_problem_space_is_a_user_error():
    with pytest.raises(UserError, match="only 100 distinct problems"):
        make_task("addition", 1, num_train=100, num_val=10, seed=0)
    # Exactly the whole space is allowed (and then train + val cover it).
    t = make_task("addition", 1, num_train=90, num_val=10, seed=0)
    assert len({ex.prompt for ex in t.train + t.val}) == 100


def test_large_difficulty_samples_without_enumerating():
    t = make_task("multiplication", 20, num_train=50, num_val=5, seed=0)
    ex = t.train[0]
    a, b = ex.prompt.rstrip("=").split("*")
    assert len(a) == len(b) == 20 and ex.answer == str(int(a) * int(b))


def test_bad_difficulty_and_unknown_task():
    with pytest.raises(UserError, match="difficulty"):
        make_task("addition", 0, num_train=10, num_val=1, seed=0)
    with pytest.raises(UserError, match="unknown task 'subtraction'"):
        load_task(TaskConfig(name="subtraction"))


def test_load_task_uses_config_and_exact_checker_by_default():
    task = load_task(TaskConfig(name="sort", difficulty=4, num_train=64, num_val=8, seed=3))
    assert task.name == "sort" and task.checker_name == "exact" and task.difficulty == 4
    assert len(task.train) == 64 and len(task.val) == 8
    ex = task.val[0]
    assert task.checker(ex.answer, ex.answer) and not task.checker(ex.answer + "x", ex.answer)
