"""Guess the number from "higher" / "lower": a turn-based environment (reset/step, as Gymnasium steps).

    task: {name: env, env: "workbench.envs.guess:GuessNumberEnv"}      # rows optional: see reset

`reset(**row)` picks the secret (the row's `target`, else a random one seeded by the row's `seed`)
and returns the rules; `step(reply)` reads the first whole number in the reply and answers
"Higher." or "Lower."; a right guess ends the episode with reward 1.0, and `max_guesses` wrong or
unreadable guesses end it with 0.0. Standard library only.

    rows = make_rows(200, seed=0)        # [{"prompt": "", "target": 13, "low": 1, "high": 20}, ...]
"""

from __future__ import annotations

import random
import re
from typing import Optional

NUMBER = re.compile(r"-?\d+")


class GuessNumberEnv:
    """The model guesses a secret whole number; each wrong guess is told "Higher." or "Lower."."""

    def __init__(self, max_guesses: int = 6) -> None:
        self.max_guesses = max_guesses
        self.low, self.high = 1, 20
        self.target = 0
        self.guesses = 0

    def reset(self, target: Optional[int] = None, low: int = 1, high: int = 20, seed: Optional[int] = None, **row) -> str:
        """Start a game: the secret is `target`, or drawn between `low` and `high` (seeded by `seed`)."""
        self.low, self.high = int(low), int(high)
        self.target = int(target) if target is not None else random.Random(seed).randint(self.low, self.high)
        self.guesses = 0
        return (f"Let's play a game. I am thinking of a whole number from {self.low} to {self.high}. "
                f"Guess it: reply with one number. After each wrong guess I say \"Higher.\" or \"Lower.\". "
                f"You have {self.max_guesses} guesses.")  # fmt: skip

    def step(self, reply: str) -> tuple[Optional[str], float, bool]:
        """Read one guess: (what the player is told next or None when the game is over, reward, done)."""
        self.guesses += 1
        match = NUMBER.search(reply)
        left = self.max_guesses - self.guesses
        if match is not None and int(match.group()) == self.target:
            return None, 1.0, True
        if left <= 0:
            return None, 0.0, True
        if match is None:
            return f"Reply with one whole number from {self.low} to {self.high}. {left} guesses left.", 0.0, False
        hint = "Higher." if int(match.group()) < self.target else "Lower."
        return f"{hint} {left} guesses left.", 0.0, False


def make_rows(n: int, seed: int = 0, low: int = 1, high: int = 20) -> list[dict]:
    """`n` games: an empty prompt (reset's rules are the user turn), a target, and the range."""
    rng = random.Random(seed)
    return [{"prompt": "", "target": rng.randint(low, high), "low": low, "high": high} for _ in range(n)]
