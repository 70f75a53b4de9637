"""A calculator for two-digit arithmetic word problems, written as a TRL `environment_factory` class.

    task: {name: env, env: "workbench.envs.calculator:CalculatorEnv", path: calc.jsonl}
    GRPOTrainer(..., environment_factory=CalculatorEnv)          # the same class, in TRL

Its public methods are the model's tools (type hints and Google-style docstrings are their schema);
`submit` records the final answer and `get_reward()` is 1.0 when it is the row's `answer`. Only the
standard library is used: the class runs unchanged in TRL.

The prompts: two-digit sums and a two-digit number times a digit, which SmolLM2-135M-Instruct gets
right 0% and 4% of the time without a tool:

    rows = make_rows(500, seed=0)                      # [{"prompt": "...", "answer": 85, "kind": "sum"}, ...]
    write_jsonl("calc.jsonl", 500, seed=0)             # or: python -m workbench.envs.calculator calc.jsonl 500
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Optional

SUM_TEMPLATES = (
    "Ann has {a} apples and buys {b} more. How many apples does she have now?",
    "A shelf holds {a} books and another holds {b}. How many books are on the two shelves?",
    "A train carries {a} people and {b} more get on. How many people are on the train?",
)
TIMES_TEMPLATES = (
    "A box holds {a} pencils. How many pencils are in {b} boxes?",
    "Each bus seats {a} children. How many children fit in {b} buses?",
    "A page has {a} words. How many words are on {b} pages?",
)
INSTRUCTION = " Use the calculator tools, then call submit with the answer."


class CalculatorEnv:
    """Integer arithmetic tools and an answer box; the reward is whether the submitted answer is right."""

    def __init__(self) -> None:
        self.expected: Optional[int] = None
        self.submitted: Optional[int] = None

    def reset(self, answer: int | str | None = None, **row) -> None:
        """Start an episode for one row: its `answer` column is the expected result (the question
        is the row's prompt, so nothing is added to it)."""
        self.expected = int(answer) if answer is not None else None
        self.submitted = None
        return None

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        return a + b

    def subtract(self, a: int, b: int) -> int:
        """Subtract the second integer from the first.

        Args:
            a: The integer to subtract from.
            b: The integer to subtract.
        """
        return a - b

    def multiply(self, a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: The first factor.
            b: The second factor.
        """
        return a * b

    def submit(self, answer: int) -> str:
        """Submit the final answer to the question. Call it once, last.

        Args:
            answer: The final answer, an integer.
        """
        self.submitted = answer
        return "Answer submitted."

    def get_reward(self) -> float:
        """1.0 when the submitted answer is the expected one, else 0.0."""
        return 1.0 if self.expected is not None and self.submitted == self.expected else 0.0


def make_rows(n: int, seed: int = 0, kinds: tuple[str, ...] = ("sum", "times")) -> list[dict]:
    """`n` word problems, alternating `kinds`: "sum" (two two-digit numbers) and "times" (a two-digit
    number times a digit from 2 to 9). Columns: prompt, answer, kind."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        if kind == "sum":
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            text, answer = rng.choice(SUM_TEMPLATES).format(a=a, b=b), a + b
        elif kind == "times":
            a, b = rng.randint(10, 99), rng.randint(2, 9)
            text, answer = rng.choice(TIMES_TEMPLATES).format(a=a, b=b), a * b
        else:
            raise ValueError(f"kind must be 'sum' or 'times', got {kind!r}")
        rows.append({"prompt": text + INSTRUCTION, "answer": answer, "kind": kind})
    return rows


def write_jsonl(path: str | Path, n: int, seed: int = 0) -> Path:
    """make_rows(n, seed) as a JSONL file (one row a line), for `task.path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in make_rows(n, seed)))
    return path


if __name__ == "__main__":  # python -m workbench.envs.calculator OUT.jsonl [N] [SEED]
    args = sys.argv[1:]
    print(write_jsonl(args[0], int(args[1]) if len(args) > 1 else 500, int(args[2]) if len(args) > 2 else 0))
