"""A generator's restart is two lines of the event log however many resubmissions fail meanwhile."""

from __future__ import annotations

from workbench.engine.run.restarts import GeneratorRestarts


class ActorUnavailableError(Exception):
    pass


def test_a_restart_is_one_line_when_it_dies_and_one_when_it_is_back():
    said: list[str] = []
    now = [100.0]
    restarts = GeneratorRestarts(said.append, clock=lambda: now[0])
    restarts.returned(0)  # a healthy generator's chunks say nothing
    for i in range(40):  # two chunks resubmitted every half second while Ray restarts the actor
        restarts.failed(0, 11 + i % 2, ActorUnavailableError())
        now[0] += 0.5
    restarts.failed(1, 7, ActorUnavailableError())  # another rank's death is its own line
    restarts.returned(0)
    restarts.returned(0)
    assert said == ["generator 0 died (ActorUnavailableError); regenerating chunk 11",
                    "generator 1 died (ActorUnavailableError); regenerating chunk 7",
                    "generator 0 back after 20 s: 2 chunk(s) regenerated, 40 failed call(s) while it restarted"]  # fmt: skip
    restarts.failed(0, 12, ActorUnavailableError())  # a second death later: said again
    assert said[-1] == "generator 0 died (ActorUnavailableError); regenerating chunk 12"
