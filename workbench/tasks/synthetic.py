"""Built-in synthetic verifiable tasks, generated from a seed, with a tunable difficulty.

    task = make_task("addition", difficulty=2, num_train=2000, num_val=200, seed=0)
    task.train[0]   # Example(id=0, prompt="07+45=", answer="52")

Families (prompts are fixed-width per difficulty, so every prompt of a task has the same
number of characters: no padding differences between warm-up and RL):

    addition        difficulty = digits per operand   "07+45="   -> "52"
    multiplication  difficulty = digits per operand   "07*45="   -> "315"
    reverse         difficulty = string length        "rev:abcd=" -> "dcba"
    sort            difficulty = string length        "sort:dbca=" -> "abcd"

Operands are zero-padded in the prompt; answers are written plainly (no leading zeros) and the
completion the model should produce is the answer followed by EOS. Train and val are one i.i.d.
sample of distinct problems (no prompt appears twice), cut in two; same seed -> same split.
"""

from __future__ import annotations

import dataclasses
import random
import string
from dataclasses import dataclass
from typing import Callable, Hashable, Optional

from workbench.errors import UserError
from workbench.tasks.types import Checker, Example, TaskData, exact_checker

LETTERS = string.ascii_lowercase
MAX_DIFFICULTY = 30


@dataclass(frozen=True)
class Family:
    alphabet: str
    space: Callable[[int], int]  # difficulty -> number of distinct problems
    problem: Callable[[int, int], tuple[str, str]]  # (index, difficulty) -> (prompt, answer)


def _operands(index: int, d: int) -> tuple[int, int]:
    return divmod(index, 10**d)


def _addition(index: int, d: int) -> tuple[str, str]:
    a, b = _operands(index, d)
    return f"{a:0{d}d}+{b:0{d}d}=", str(a + b)


def _multiplication(index: int, d: int) -> tuple[str, str]:
    a, b = _operands(index, d)
    return f"{a:0{d}d}*{b:0{d}d}=", str(a * b)


def _letters(index: int, n: int) -> str:
    """The index-th string of n lowercase letters (base-26 digits)."""
    out = []
    for _ in range(n):
        index, r = divmod(index, 26)
        out.append(LETTERS[r])
    return "".join(out)


def _reverse(index: int, n: int) -> tuple[str, str]:
    s = _letters(index, n)
    return f"rev:{s}=", s[::-1]


def _sort(index: int, n: int) -> tuple[str, str]:
    s = _letters(index, n)
    return f"sort:{s}=", "".join(sorted(s))


TASKS: dict[str, Family] = {
    "addition": Family("0123456789+=", lambda d: 10 ** (2 * d), _addition),
    "multiplication": Family("0123456789*=", lambda d: 10 ** (2 * d), _multiplication),
    "reverse": Family(LETTERS + "rev:=", lambda n: 26**n, _reverse),
    "sort": Family(LETTERS + "sort:=", lambda n: 26**n, _sort),
}


def distinct_indices(space: int, n: int, rng: random.Random) -> list[int]:
    """n distinct problem indices drawn uniformly from range(space), in draw order."""
    if space <= 4 * n:
        return rng.sample(range(space), n)
    # Huge spaces: rejection sampling (range() of a huge int cannot be sampled directly).
    seen: set[int] = set()
    out: list[int] = []
    while len(out) < n:
        i = rng.randrange(space)
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


def drawn_task(
    name: str, draw: Callable[[], Example], *, num_train: int, num_val: int, checker: Checker, checker_name: str,
    difficulty: int, seed: int, answer_format: str, problem: Optional[Callable[[Example], Hashable]] = None,
) -> TaskData:  # fmt: skip
    """A task of `num_train` + `num_val` examples with distinct prompts from `draw()` (the chat
    families: countdown, word_problems), ids in draw order; a UserError when the draws keep repeating.
    `problem`: what makes two examples the same problem when their prompts differ (None: the prompt)."""
    examples = _distinct(num_train + num_val, draw, f"task {name!r} at difficulty {difficulty}", problem)
    return TaskData(
        name=name, train=examples[:num_train], val=examples[num_train:], checker=checker, stop=None,
        alphabet="".join(sorted({c for ex in examples for c in ex.prompt + ex.reference})),
        checker_name=checker_name, difficulty=difficulty, seed=seed, answer_format=answer_format,
        info={"source": "synthetic", "family": name},
    )  # fmt: skip


def _distinct(n: int, draw: Callable[[], Example], what: str, problem: Optional[Callable[[Example], Hashable]] = None) -> list[Example]:
    out: list[Example] = []
    seen: set[Hashable] = set()
    for _ in range(20 * n + 1000):
        if len(out) == n:
            return out
        ex = draw()
        key = problem(ex) if problem is not None else ex.prompt
        if key not in seen:
            seen.add(key)
            out.append(dataclasses.replace(ex, id=len(out)))
    if len(out) < n:
        raise UserError(f"{what}: could not draw {n} distinct problems; lower task.num_train / task.num_val")
    return out


def make_task(name: str, difficulty: int, *, num_train: int, num_val: int, seed: int) -> TaskData:
    """A seeded i.i.d. train/val split of distinct problems of one family."""
    if name not in TASKS:
        raise UserError(f"task.name: unknown synthetic task {name!r} (known: {', '.join(sorted(TASKS))})")
    if not 1 <= difficulty <= MAX_DIFFICULTY:
        raise UserError(f"task.difficulty must be in 1..{MAX_DIFFICULTY} for {name!r}, got {difficulty}")
    fam = TASKS[name]
    space = fam.space(difficulty)
    n = num_train + num_val
    if n > space:
        raise UserError(
            f"task {name!r} at difficulty {difficulty} has only {space} distinct problems, but "
            f"task.num_train + task.num_val = {n}; raise task.difficulty or lower the counts"
        )
    # The seed and the task identity both pick the sample, so tasks differ even at one seed.
    rng = random.Random(f"{name}:{difficulty}:{seed}")
    examples = []
    for i, idx in enumerate(distinct_indices(space, n, rng)):
        prompt, answer = fam.problem(idx, difficulty)
        examples.append(Example(id=i, prompt=prompt, answer=answer))
    return TaskData(
        name=name,
        train=examples[:num_train],
        val=examples[num_train:],
        checker=exact_checker,
        stop=None,
        alphabet=fam.alphabet,
        checker_name="exact",
        difficulty=difficulty,
        seed=seed,
        info={"source": "synthetic", "space": space},
    )
