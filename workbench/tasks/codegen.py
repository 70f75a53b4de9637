"""A synthetic code family the builtin char-level model can learn on a CPU: `pyexpr`.

    task = make_code_task("pyexpr", difficulty=1, num_train=1000, num_val=200, seed=0)
    task.train[0].prompt      # "f(3)=7;f(5)=9;f(x)="
    task.train[0].reference   # "x+4"     (what the builtin model's warm-up is trained on)
    task.train[0].answer      # the code spec (JSON): f(x) called on the shown and hidden inputs

The model writes a one-line Python expression of `x` that maps the shown inputs to the shown
outputs. The expression becomes `def f(x):\\n    return <completion>` (the spec's `prefix`) and runs
in the sandbox like any model-written code (workbench.tasks.sandbox): function-call cases on
the 2 shown inputs plus 3 hidden ones, outputs compared in the parent. So any expression that
computes the function passes (`x+4`, `4+x`, `x+2+2`); one that only fits the shown pairs fails.

Difficulty: the hidden function is `x<op>c` with c in 1..9, and
    1: op in + and -, inputs 0..9 (1,620 problems): one subtraction of a shown pair gives the
       sign and c, the level the builtin model learns steadily on a CPU (configs/mathcode.yaml);
    2: op in +, - and *, inputs 0..9 (2,430 problems): the model must also tell a sum from a product;
    3: op in +, - and *, inputs 0..99 (267,300 problems).
Problems are distinct (function, shown inputs) pairs, drawn from a seed and cut into train / val
like the synthetic families (same seed -> same split).
"""

from __future__ import annotations

import random

from workbench.errors import UserError
from workbench.tasks.synthetic import distinct_indices
from workbench.tasks.types import Example, TaskData

OPS = ("+", "-", "*")
CONSTANTS = range(1, 10)
# difficulty -> (number of OPS used, input digits)
LEVELS = {1: (2, 1), 2: (3, 1), 3: (3, 2)}
SHOWN, HIDDEN = 2, 3
PREFIX = "def f(x):\n    return "
ALPHABET = "0123456789x+-*f()=;"
TASKS = ("pyexpr",)


def _apply(op: str, c: int, x: int) -> int:
    return x + c if op == "+" else x - c if op == "-" else x * c


def _problem(index: int, d: int) -> tuple[str, int, int, int]:
    """(op, c, x1, x2) of problem `index` at difficulty d: x1 != x2, both inputs of d's width."""
    n = 10 ** LEVELS[d][1]
    rest, pair = divmod(index, n * (n - 1))
    x1, j = divmod(pair, n - 1)
    x2 = j + (j >= x1)  # skip x1
    op_i, c_i = divmod(rest, len(CONSTANTS))
    return OPS[op_i], CONSTANTS[c_i], x1, x2


def _space(d: int) -> int:
    ops, digits = LEVELS[d]
    n = 10**digits
    return ops * len(CONSTANTS) * n * (n - 1)


def _example(i: int, index: int, d: int, rng: random.Random) -> Example:
    from workbench.tasks.sandbox import code_spec

    op, c, x1, x2 = _problem(index, d)
    others = [x for x in range(10 ** LEVELS[d][1]) if x not in (x1, x2)]
    xs = [x1, x2] + rng.sample(others, min(HIDDEN, len(others)))
    prompt = f"f({x1})={_apply(op, c, x1)};f({x2})={_apply(op, c, x2)};f(x)="
    spec = code_spec(entry_point="f", cases=[{"args": [x], "expected": _apply(op, c, x)} for x in xs], prefix=PREFIX)
    return Example(id=i, prompt=prompt, answer=spec, reference=f"x{op}{c}")


def make_code_task(name: str, difficulty: int, *, num_train: int, num_val: int, seed: int) -> TaskData:
    """A seeded i.i.d. train/val split of distinct `pyexpr` problems (checked in the sandbox)."""
    if name not in TASKS:
        raise UserError(f"task.name: unknown code family {name!r} (known: {', '.join(TASKS)})")
    if difficulty not in LEVELS:
        raise UserError(f"task.difficulty must be in 1..{len(LEVELS)} for {name!r}, got {difficulty}")
    space, n = _space(difficulty), num_train + num_val
    if n > space:
        raise UserError(
            f"task {name!r} at difficulty {difficulty} has only {space} distinct problems, but "
            f"task.num_train + task.num_val = {n}; raise task.difficulty or lower the counts"
        )
    rng = random.Random(f"{name}:{difficulty}:{seed}")
    examples = [_example(i, idx, difficulty, rng) for i, idx in enumerate(distinct_indices(space, n, rng))]
    return TaskData(
        name=name,
        train=examples[:num_train],
        val=examples[num_train:],
        checker=_no_local_checker,
        stop=None,
        alphabet=ALPHABET,
        checker_name="code",
        difficulty=difficulty,
        seed=seed,
        info={"source": "synthetic-code", "space": space},
        sandboxed=True,
    )


def _no_local_checker(completion: str, answer: str) -> bool:
    """Code is checked in the sandbox (base.check_batch), never by a checker in this process."""
    raise UserError("a code example reached a local checker; code is only checked in the sandbox (base.check_batch)")
