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


def test_a_trained_token_costs_6n_in_full_fine_tuning_and_4n_plus_2t_with_adapters():
    """The compute axis counts what the backward computes: weight gradients only for the trainable
    parameters (a LoRA run's adapters), activation gradients through every weight."""
    full, lora = acc.Counters(), acc.Counters()
    acc.add_trained(full, tokens=10, samples=2, n_params=1000)
    acc.add_trained(lora, tokens=10, samples=2, n_params=1000, n_trainable=10)
    assert full.flops == 6 * 1000 * 10
    assert lora.flops == (4 * 1000 + 2 * 10) * 10
    acc.add_generated(lora, tokens=5, n_params=1000)
    assert lora.flops == (4 * 1000 + 2 * 10) * 10 + 2 * 1000 * 5 and lora.tokens_trained == 10


def test_the_trainer_reports_its_trainable_parameters_for_the_compute_axis(tiny_config):
    from workbench.engine.run.actors import trainer_parts
    from workbench.engine.train.trainer import Trainer

    full = Trainer(**trainer_parts(tiny_config(for_actors=True))).info()
    lora = Trainer(**trainer_parts(tiny_config({"model.lora.rank": 2}, name="lora", for_actors=True))).info()
    assert full["trainable_params"] == full["num_params"]
    assert 0 < lora["trainable_params"] < lora["num_params"] / 10  # the adapters alone
