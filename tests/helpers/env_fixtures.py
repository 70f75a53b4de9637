"""Environments for the engine's tests: a short tool environment (AddEnv) and ones that fail on purpose.

    task: {name: env, env: "env_fixtures:AddEnv", path: rows.jsonl}     # tests/helpers is on the actors' PYTHONPATH

Each faulty class fails in one place: the factory, reset, step, a tool (raises or hangs), get_reward.
"""

from __future__ import annotations

import time
from typing import Optional


class AddEnv:
    """Two tools: add, then submit the answer; the reward is whether the submitted answer is the row's."""

    def __init__(self) -> None:
        self.expected: Optional[int] = None
        self.submitted: Optional[int] = None

    def reset(self, answer: Optional[int] = None, **row) -> None:
        self.expected = None if answer is None else int(answer)
        self.submitted = None

    def add(self, a: int, b: int) -> int:
        """Add.

        Args:
            a: A number.
            b: A number.
        """
        return a + b

    def submit(self, answer: int) -> str:
        """Submit.

        Args:
            answer: The answer.
        """
        self.submitted = answer
        return "ok"

    def get_reward(self) -> float:
        return 1.0 if self.submitted is not None and self.submitted == self.expected else 0.0


def make_rows(n: int) -> list[dict]:
    """`n` rows "Add A and B." with their answer."""
    return [{"prompt": f"Add {10 + i} and {20 + 3 * i}.", "answer": 30 + 4 * i} for i in range(n)]


class FactoryRaises(AddEnv):
    def __init__(self) -> None:
        raise RuntimeError("no licence server")


class ResetRaises(AddEnv):
    def reset(self, answer: Optional[int] = None, **row) -> None:
        raise KeyError("missing column")


class ToolRaises(AddEnv):
    def add(self, a: int, b: int) -> int:
        """Add.

        Args:
            a: A number.
            b: A number.
        """
        raise ValueError("adder broke")


class ToolHangs(AddEnv):
    def add(self, a: int, b: int) -> int:
        """Add.

        Args:
            a: A number.
            b: A number.
        """
        time.sleep(30)
        return a + b


class RewardRaises(AddEnv):
    def get_reward(self) -> float:
        raise ZeroDivisionError("division by zero")


class StepRaises:
    """A turn-based environment whose step fails."""

    def reset(self, seed: Optional[int] = None, **row) -> str:
        return "Say a number."

    def step(self, reply: str):
        raise RuntimeError("the simulator crashed")


class NoReward:
    """A tool environment without get_reward (needs reward.functions)."""

    def reset(self, **row) -> None:
        return None

    def look(self, key: str) -> str:
        """Look a key up.

        Args:
            key: The key.
        """
        return key


class NoSeed(AddEnv):
    def reset(self, answer: Optional[int] = None) -> None:  # no **row, no seed: needs a dataset
        self.expected, self.submitted = answer, None


class SometimesRaises:
    """A guessing game (workbench.envs.guess) whose reset fails for every third target: a flaky simulator."""

    def __init__(self) -> None:
        from workbench.envs.guess import GuessNumberEnv

        self.game = GuessNumberEnv(max_guesses=2)

    def reset(self, target: Optional[int] = None, **row) -> str:
        if target is not None and int(target) % 3 == 0:
            raise ConnectionError("simulator unreachable")
        return self.game.reset(target=target, low=1, high=4)

    def step(self, reply: str):
        return self.game.step(reply)


class InitFailsLater(AddEnv):
    """Constructs once (the check before launch), then fails: a resource that ran out mid-run."""

    made = 0

    def __init__(self) -> None:
        InitFailsLater.made += 1
        if InitFailsLater.made > 1:
            raise RuntimeError("no licence left")
        super().__init__()
