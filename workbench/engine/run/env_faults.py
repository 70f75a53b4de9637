"""An environment's faults as the run sees them (task.name env): the coordinator hands it each chunk's
EnvStats (engine/rollout/episodes.py).

    faults = EnvFaults(log.event)
    faults.saw(chunk.env)     # the first fault said once in events.log; UserError when every episode keeps failing

A fault drops its episode's group and the run goes on (env/errors counts them). An environment that
failed in every episode of `ALL_FAILED_CHUNKS` chunks in a row is broken, not flaky: nothing would
ever train, so the run stops with its first error, one line, instead of generating until its deadline.
"""

from __future__ import annotations

from typing import Any, Callable

from workbench.errors import UserError

ALL_FAILED_CHUNKS = 3


class EnvFaults:
    """The run's view of its environment's faults; see the module docstring."""

    def __init__(self, event: Callable[[str], None]) -> None:
        self.event = event
        self.said = False
        self.all_failed = 0  # chunks in a row whose every episode failed

    def saw(self, env: Any) -> None:
        if env is None:
            return
        if env.first_error and not self.said:
            self.said = True
            self.event(f"environment error (its episode's group is dropped; env/errors counts them): {env.first_error}")
        self.all_failed = self.all_failed + 1 if env.episodes and env.errors == env.episodes else 0
        if self.all_failed >= ALL_FAILED_CHUNKS:
            raise UserError(f"the environment failed in every episode of {self.all_failed} chunks in a row, so nothing "
                            f"can train; its first error: {env.first_error}")  # fmt: skip
