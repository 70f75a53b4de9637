"""Countdown, as TinyZero popularised it: reach a target from given numbers with + - * /.

    task = make_countdown_task(difficulty=3, num_train=2000, num_val=200, seed=0)
    task.val[0].prompt    # "Using the numbers [12, 7, 3], create an equation that equals 33. ..."
    task.val[0].answer    # '{"target": 33, "numbers": [12, 7, 3]}'
    check_countdown("(12 - 7) * 3 + 18", '{"target": 33, ...}')   # False: 18 is not given

The rule is TinyZero's verifier's: the numbers written in the equation, sorted, equal the given
numbers, sorted, so every given number is used exactly once (no more, no fewer), and its value is
the target. `difficulty` is how many numbers are given (2 to 6); they are drawn from 1..99 and the
target is the value of a random expression over all of them (+ - * /, integer intermediate-free:
any exact value that comes out a positive integer up to 999), so every problem has a solution.

The verifier parses the equation with `ast` (mode "eval") and walks only BinOp nodes with the four
operators and integer Constant nodes written as plain digits, computing with exact fractions. Any
other node (a name, a call, an attribute, `**`, a unary minus, a float) fails the check, as does
a division by zero. Model text is never evaluated any other way (no eval, exec or compile).
The checker gets the answer the task's answer format found (answer_tag by default: TinyZero's
`<answer> ... </answer>`).
"""

from __future__ import annotations

import ast
import json
import random
from fractions import Fraction
from typing import Optional

from workbench.errors import UserError
from workbench.rl.answers import INSTRUCTIONS, written_answer
from workbench.tasks.synthetic import drawn_task
from workbench.tasks.types import Example, TaskData

MIN_NUMBERS, MAX_NUMBERS = 2, 6
MAX_NUMBER, MAX_TARGET = 99, 999
MAX_EQUATION_CHARS = 200  # longer text is no equation over six numbers: refused before parsing
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def equation_value(equation: str) -> tuple[Optional[Fraction], list[int]]:
    """(exact value, the integers written in it) of an equation of + - * / over integers; value
    None when the text is not such an equation or divides by zero. Parsed by `ast`, never run."""
    text = equation.strip()
    if not text or len(text) > MAX_EQUATION_CHARS:
        return None, []
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, []
    used: list[int] = []

    def walk(node: ast.AST) -> Optional[Fraction]:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if left is None or right is None:
                return None
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            return None if right == 0 else left / right
        if isinstance(node, ast.Constant) and type(node.value) is int:
            written = ast.get_source_segment(text, node) or ""
            if not written.isdigit():  # 0x1F, 1_000, 1e3: not a number as the game writes it
                return None
            used.append(node.value)
            return Fraction(node.value)
        return None  # names, calls, attributes, **, unary minus, floats, comparisons...

    try:
        value = walk(tree.body)
    except RecursionError:
        return None, []
    return value, used


def check_countdown(equation: str, answer: str) -> bool:
    """Right iff `equation` uses each of the answer's numbers exactly once and equals its target."""
    spec = json.loads(answer)
    value, used = equation_value(equation)
    return value is not None and sorted(used) == sorted(spec["numbers"]) and value == spec["target"]


def same_problem(ex: Example) -> tuple[tuple[int, ...], int]:
    """What makes two problems the same: the numbers in any order and the target (the prompts of
    [3, 7] -> 10 and [7, 3] -> 10 differ, but one must not be in train and the other in val)."""
    spec = json.loads(ex.answer)
    return tuple(sorted(spec["numbers"])), int(spec["target"])


def _random_equation(numbers: list[int], rng: random.Random) -> tuple[str, Fraction]:
    """A random fully parenthesised equation over all `numbers` (in a random order) and its value."""
    terms = [(str(n), Fraction(n)) for n in numbers]
    rng.shuffle(terms)
    while len(terms) > 1:
        i = rng.randrange(len(terms) - 1)
        (a, va), (b, vb) = terms[i], terms[i + 1]
        op = rng.choice("+-*/" if vb != 0 else "+-*")
        value = {"+": va + vb, "-": va - vb, "*": va * vb, "/": va / vb if vb else va}[op]
        terms[i : i + 2] = [(f"({a} {op} {b})", value)]
    text, value = terms[0]
    return (text[1:-1] if text.startswith("(") else text), value


def problem(difficulty: int, rng: random.Random) -> tuple[list[int], int, str]:
    """(numbers, target, one solution) of a solvable problem with `difficulty` numbers."""
    while True:
        numbers = [rng.randint(1, MAX_NUMBER) for _ in range(difficulty)]
        equation, value = _random_equation(numbers, rng)
        if value.denominator == 1 and 1 <= value <= MAX_TARGET:
            return numbers, int(value), equation


def make_countdown_task(difficulty: int, *, num_train: int, num_val: int, seed: int, answer_format: str = "answer_tag") -> TaskData:
    """A seeded i.i.d. train/val split of distinct Countdown problems with `difficulty` numbers each."""
    if not MIN_NUMBERS <= difficulty <= MAX_NUMBERS:
        raise UserError(f"task.difficulty must be in {MIN_NUMBERS}..{MAX_NUMBERS} for 'countdown' (how many numbers), got {difficulty}")
    if answer_format == "last_number":
        raise UserError("task.answer_format: countdown's answer is an equation, not a number; use answer_tag (TinyZero's), boxed or hash")
    rng = random.Random(f"countdown:{difficulty}:{seed}")

    def draw() -> Example:
        numbers, target, solution = problem(difficulty, rng)
        prompt = (f"Using the numbers {numbers}, create an equation that equals {target}. You can use basic arithmetic "
                  f"operations (+, -, *, /) and each number must be used exactly once. {INSTRUCTIONS[answer_format]}")  # fmt: skip
        return Example(id=0, prompt=prompt, answer=json.dumps({"target": target, "numbers": numbers}),
                       reference=written_answer(solution, answer_format), columns={"target": target, "nums": numbers})  # fmt: skip

    return drawn_task("countdown", draw, num_train=num_train, num_val=num_val, checker=check_countdown, checker_name="countdown",
                      difficulty=difficulty, seed=seed, answer_format=answer_format, problem=same_problem)  # fmt: skip
