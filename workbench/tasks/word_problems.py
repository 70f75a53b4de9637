"""Arithmetic word problems at graded difficulty (`task.name: word_problems`, `task.difficulty` 1-5).

    task = make_word_task(difficulty=2, num_train=2000, num_val=200, seed=0)
    task.val[0].prompt   # "Mia buys 7 boxes with 6 marbles in each. How many marbles does Mia get? End your ..."
    task.val[0].answer   # "42"

    1  one step, + or -, numbers up to 20
    2  one step, + or - up to 100, or a two-digit number times a digit
    3  two steps (a product and a sum, or a sum and a difference)
    4  three steps ending in an exact division (sharing equally)
    5  a purchase of two kinds of goods and the change from a bill

Every answer is a non-negative integer, checked exactly after the task's answer format found it in
the completion (last_number by default: the last number in the reply). Names, items and numbers
are drawn from the seed; train and val are distinct prompts of one i.i.d. sample.
"""

from __future__ import annotations

import random
from typing import Callable

from workbench.errors import UserError
from workbench.rl.answers import INSTRUCTIONS, written_answer
from workbench.tasks.synthetic import drawn_task
from workbench.tasks.types import Example, TaskData, exact_checker

LEVELS = (1, 2, 3, 4, 5)
NAMES = ("Mia", "Noah", "Ava", "Liam", "Zoe", "Omar", "Lena", "Ravi", "Sara", "Tom", "Yuki", "Ines")
ITEMS = ("apples", "marbles", "stickers", "books", "pencils", "cards", "shells", "coins", "stamps", "cookies")
GOODS = (("notebooks", "pens"), ("apples", "pears"), ("tickets", "drinks"), ("shirts", "hats"), ("cakes", "candles"))


def _level1(r: random.Random, name: str, item: str) -> tuple[str, int]:
    a, b = r.randint(1, 20), r.randint(1, 20)
    if r.random() < 0.5:
        return f"{name} has {a} {item}. {name} gets {b} more. How many {item} does {name} have now?", a + b
    a, b = max(a, b), min(a, b)
    return f"{name} has {a} {item} and gives {b} away. How many {item} does {name} have left?", a - b


def _level2(r: random.Random, name: str, item: str) -> tuple[str, int]:
    kind = r.randrange(3)
    if kind == 0:
        a, b = r.randint(10, 99), r.randint(10, 99)
        return f"{name} has {a} {item} and finds {b} more. How many {item} does {name} have now?", a + b
    if kind == 1:
        a, b = sorted((r.randint(10, 99), r.randint(10, 99)), reverse=True)
        return f"{name} had {a} {item} and used {b} of them. How many {item} are left?", a - b
    a, b = r.randint(2, 9), r.randint(10, 99)
    return f"{name} buys {a} boxes with {b} {item} in each. How many {item} does {name} get?", a * b


def _level3(r: random.Random, name: str, item: str) -> tuple[str, int]:
    a, b, c = r.randint(5, 60), r.randint(2, 9), r.randint(2, 12)
    if r.random() < 0.5:
        return (f"{name} has {a} {item}. Then {name} buys {b} packs of {c} {item} each. "
                f"How many {item} does {name} have now?", a + b * c)  # fmt: skip
    give = r.randint(1, a)
    return (f"{name} has {a} {item}, gives {give} to a friend and then finds {b * c} more. "
            f"How many {item} does {name} have now?", a - give + b * c)  # fmt: skip


def _level4(r: random.Random, name: str, item: str) -> tuple[str, int]:
    friends, each = r.randint(2, 9), r.randint(2, 15)
    b, c = r.randint(2, 6), r.randint(2, 10)
    had = friends * each - b * c
    if had < 1:  # keep what was there already positive: draw the packs' size again, smaller
        b, c = 1, r.randint(1, friends * each - 1)
        had = friends * each - b * c
    return (f"{name} has {had} {item} and buys {b} packs with {c} {item} in each. {name} then shares all the "
            f"{item} equally among {friends} friends. How many {item} does each friend get?", each)  # fmt: skip


def _level5(r: random.Random, name: str, item: str) -> tuple[str, int]:
    first, second = r.choice(GOODS)
    a, p, b, q = r.randint(2, 9), r.randint(2, 25), r.randint(2, 9), r.randint(2, 25)
    cost = a * p + b * q
    bill = next(x for x in (20, 50, 100, 200, 500) if x > cost)
    return (f"{name} buys {a} {first} at {p} dollars each and {b} {second} at {q} dollars each, and pays with a "
            f"{bill}-dollar bill. How many dollars of change does {name} get?", bill - cost)  # fmt: skip


MAKERS: dict[int, Callable[[random.Random, str, str], tuple[str, int]]] = {
    1: _level1, 2: _level2, 3: _level3, 4: _level4, 5: _level5,
}  # fmt: skip


def make_word_task(difficulty: int, *, num_train: int, num_val: int, seed: int, answer_format: str = "last_number") -> TaskData:
    """A seeded i.i.d. train/val split of distinct word problems of level `difficulty`."""
    if difficulty not in MAKERS:
        raise UserError(f"task.difficulty must be in 1..{len(LEVELS)} for 'word_problems', got {difficulty}")
    rng = random.Random(f"word_problems:{difficulty}:{seed}")

    def draw() -> Example:
        text, value = MAKERS[difficulty](rng, rng.choice(NAMES), rng.choice(ITEMS))
        return Example(id=0, prompt=f"{text} {INSTRUCTIONS[answer_format]}", answer=str(value),
                       reference=written_answer(str(value), answer_format))  # fmt: skip

    return drawn_task("word_problems", draw, num_train=num_train, num_val=num_val, checker=exact_checker, checker_name="exact",
                      difficulty=difficulty, seed=seed, answer_format=answer_format)  # fmt: skip
