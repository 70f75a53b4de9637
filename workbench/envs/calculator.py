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

A model never trained on tool calls (SmolLM2-135M-Instruct almost never writes a `<tool_call>` from
the schema alone) gets `few_shot=True`: each prompt is then a message list (TRL's conversational
format) that opens with two worked episodes as earlier turns, an `add` and a `multiply`, each
followed by its `<tool_response>` and the `submit` call, before the question:

    write_jsonl("calc-fewshot.jsonl", 2000, seed=0, few_shot=True)
    # python -m workbench.envs.calculator calc-fewshot.jsonl 2000 0 --few-shot
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
# the worked episodes of few_shot=True: (question, tool, a, b), with results unlike each other
SHOTS = (
    ("Tom has 23 cards and gets 45 more. How many cards does he have now?", "add", 23, 45),
    ("A bag holds 16 marbles. How many marbles are in 4 bags?", "multiply", 16, 4),
)


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


def _call(name: str, **arguments: int) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _response(content: object) -> str:
    return f"<tool_response>\n{content}\n</tool_response>"


def few_shot_messages() -> list[dict]:
    """The worked episodes that lead a few_shot prompt: per shot, the question, the tool call, its
    result, the submit call, its result and a closing sentence (the Hermes format the parser reads;
    results come back as user turns, as for a template without a tool role)."""
    messages: list[dict] = []
    for question, tool, a, b in SHOTS:
        result = a + b if tool == "add" else a * b
        messages += [
            {"role": "user", "content": question + INSTRUCTION},
            {"role": "assistant", "content": _call(tool, a=a, b=b)},
            {"role": "user", "content": _response(result)},
            {"role": "assistant", "content": _call("submit", answer=result)},
            {"role": "user", "content": _response("Answer submitted.")},
            {"role": "assistant", "content": f"The answer is {result}."},
        ]
    return messages


def make_rows(n: int, seed: int = 0, kinds: tuple[str, ...] = ("sum", "times"), few_shot: bool = False) -> list[dict]:
    """`n` word problems, alternating `kinds`: "sum" (two two-digit numbers) and "times" (a two-digit
    number times a digit from 2 to 9). Columns: prompt, answer, kind. `few_shot`: the prompt is a
    message list, few_shot_messages() then the question as the last user turn."""
    shots = few_shot_messages() if few_shot else []
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
        prompt: str | list[dict] = text + INSTRUCTION
        if few_shot:
            prompt = [dict(m) for m in shots] + [{"role": "user", "content": prompt}]
        rows.append({"prompt": prompt, "answer": answer, "kind": kind})
    return rows


def write_jsonl(path: str | Path, n: int, seed: int = 0, few_shot: bool = False) -> Path:
    """make_rows(n, seed, few_shot=few_shot) as a JSONL file (one row a line), for `task.path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in make_rows(n, seed, few_shot=few_shot)))
    return path


if __name__ == "__main__":  # python -m workbench.envs.calculator OUT.jsonl [N] [SEED] [--few-shot]
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if set(flags) - {"--few-shot"}:
        sys.exit(f"unknown option {sorted(set(flags) - {'--few-shot'})[0]} (the one option is --few-shot)")
    n, seed = int(args[1]) if len(args) > 1 else 500, int(args[2]) if len(args) > 2 else 0
    print(write_jsonl(args[0], n, seed, few_shot="--few-shot" in flags))
