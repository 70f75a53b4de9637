"""The run's time accounting (engine/run/accounting.py): the trainer clock hears the loop's events
and keeps the trainer's wall time and its waits for rollouts, pauses excluded, across a resume."""

from __future__ import annotations

import pytest

from workbench.engine.run import accounting as acc


@pytest.fixture
def now(monkeypatch):
    t = {"now": 100.0}
    monkeypatch.setattr(acc.time, "monotonic", lambda: t["now"])
    return t


def test_trainer_clock_counts_wall_time_and_waits_but_not_pauses(now):
    c = acc.Counters(trainer_wall_seconds=50.0)  # a resumed run: 50 s of trainer wall time before
    clock = acc.TrainerClock()
    assert clock.step_sent(c, queue_was_empty=True) == 0.0  # the first step starts the clock: no wait yet
    now["now"] = 103.0
    clock.step_done(c, queue_empty=True)  # the trainer idles from here
    assert c.trainer_wall_seconds == 53.0
    now["now"] = 105.0
    assert clock.step_sent(c, queue_was_empty=True) == 2.0  # it waited 2 s for this batch
    now["now"] = 106.0
    assert clock.step_sent(c, queue_was_empty=False) == 0.0  # queued behind a running step: no wait
    now["now"] = 108.0
    clock.step_done(c, queue_empty=False)
    clock.paused(10.0)  # a 10 s pause...
    now["now"] = 120.0
    clock.step_done(c, queue_empty=True)
    assert c.trainer_wall_seconds == 50.0 + 20.0 - 10.0  # ...is not trainer time
    now["now"] = 121.0
    clock.paused(5.0)
    now["now"] = 127.0
    assert clock.step_sent(c, queue_was_empty=True) == 2.0  # nor waiting
    assert c.trainer_wait_seconds == 4.0
