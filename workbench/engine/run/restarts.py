"""A generator actor's restart said twice in the event log: when it died, and when it is back.

While Ray restarts a dead generator, every chunk resubmitted to it fails at once
(ActorUnavailableError) and is resubmitted again: dozens of failures a restart. The log keeps the
first (which chunk, which error) and, on the first chunk the actor returns, one line with how long
it was gone, how many chunks it redid and how many resubmissions failed meanwhile.

    restarts = GeneratorRestarts(log.event)
    restarts.failed(rank, chunk_id, error)     # every failed chunk; one event per death
    restarts.returned(rank)                     # every chunk the rank returns; one event per comeback
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Restart:
    since: float
    chunks: set[int] = field(default_factory=set)
    failures: int = 0


class GeneratorRestarts:
    """The generators being restarted, by rank; events through `say`."""

    def __init__(self, say: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.say, self.clock = say, clock
        self.pending: dict[int, Restart] = {}

    def failed(self, rank: int, chunk_id: int, error: BaseException) -> None:
        restart = self.pending.get(rank)
        if restart is None:
            restart = self.pending[rank] = Restart(self.clock())
            self.say(f"generator {rank} died ({type(error).__name__}); regenerating chunk {chunk_id}")
        restart.chunks.add(chunk_id)
        restart.failures += 1

    def returned(self, rank: int) -> None:
        restart = self.pending.pop(rank, None)
        if restart is not None:
            self.say(f"generator {rank} back after {self.clock() - restart.since:.0f} s: {len(restart.chunks)} chunk(s) "
                     f"regenerated, {restart.failures} failed call(s) while it restarted")  # fmt: skip
