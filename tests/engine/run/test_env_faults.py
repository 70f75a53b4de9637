"""The run's view of an environment's faults: the first said once; every episode failing in 3 chunks in a
row stops the run with that error; a chunk with one good episode resets the count."""

from __future__ import annotations

import pytest

from workbench.engine.rollout.episodes import EnvStats
from workbench.engine.run.env_faults import ALL_FAILED_CHUNKS, EnvFaults
from workbench.errors import UserError


def stats(episodes: int, errors: int, first: str = "reset raised KeyError: 'x'") -> EnvStats:
    return EnvStats(episodes=episodes, errors=errors, first_error=first if errors else "")


def test_the_first_fault_is_said_once_and_a_broken_environment_stops_the_run():
    said: list[str] = []
    faults = EnvFaults(said.append)
    faults.saw(None)  # a chunk of a task without an environment
    for _ in range(ALL_FAILED_CHUNKS - 1):
        faults.saw(stats(8, 8))
    faults.saw(stats(8, 7))  # one episode went through: flaky, not broken
    for _ in range(ALL_FAILED_CHUNKS - 1):
        faults.saw(stats(8, 8))
    assert len(said) == 1 and "reset raised KeyError" in said[0]
    with pytest.raises(UserError, match=r"failed in every episode of 3 chunks in a row.*reset raised KeyError"):
        faults.saw(stats(8, 8))
