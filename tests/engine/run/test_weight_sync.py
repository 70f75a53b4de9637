"""WeightSync (no Ray): the push policy per off-policy algorithm, resync and forced reload; and the
generator's weight slot honouring a forced reload to an older version."""

from __future__ import annotations

import pytest

from workbench.engine.run.weight_sync import WeightSync


class Recorded(WeightSync):
    """WeightSync whose transport records each send instead of calling Ray actors."""

    def __init__(self, algorithm: str, generators: int = 2):
        super().__init__(list(range(generators)), algorithm)
        self.sent: list[tuple] = []

    def _send(self, generators, weights, version, *, force, wait):
        self.sent.append((tuple(generators), weights, version, force, wait))


@pytest.mark.parametrize("algorithm, waits", [("pipeline", False), ("sync", True)])
def test_pipeline_and_sync_push_after_every_step(algorithm, waits):
    s = Recorded(algorithm)
    for i in range(1, 4):
        assert s.trained(f"w{i}", i, round_done=False)
    assert [(v, w, wait) for _, w, v, _, wait in s.sent] == [(1, "w1", waits), (2, "w2", waits), (3, "w3", waits)]
    assert (s.version, s.pushed_version, s.latest) == (3, 3, "w3")


def test_ppo_off_policy_pushes_only_when_its_round_is_trained():
    s = Recorded("ppo-off-policy")
    assert not s.trained("w1", 1, round_done=False) and not s.trained("w2", 2, round_done=False)
    assert s.sent == [] and (s.version, s.pushed_version) == (2, 0)
    assert s.trained("w3", 3, round_done=True)
    assert s.sent == [((0, 1), "w3", 3, False, True)]  # the round's last weights, waited for


def test_a_skipped_update_keeps_the_version_and_pushes_nothing_new():
    s = Recorded("pipeline")
    s.trained("w1", 1, round_done=True)
    assert not s.trained(None, 1, round_done=True)
    assert (s.version, s.latest, len(s.sent)) == (1, "w1", 1)


def test_a_restarted_generator_gets_the_weights_last_pushed_not_newer_unpushed_ones():
    s = Recorded("ppo-off-policy")
    s.resync(0)
    assert s.sent == []  # nothing pushed yet: it already holds the initial weights
    s.trained("w1", 1, round_done=True)
    s.trained("w2", 2, round_done=False)  # trained, not yet pushed (mid-round)
    s.resync(1)
    assert s.sent[-1] == ((1,), "w1", 1, False, False)


def test_reload_forces_every_generator_back_to_the_checkpoint_version():
    s = Recorded("pipeline")
    for i in range(1, 6):
        s.trained(f"w{i}", i, round_done=False)
    s.reload("ckpt4", 4)
    assert s.sent[-1] == ((0, 1), "ckpt4", 4, True, True)
    assert (s.version, s.pushed_version, s.latest) == (4, 4, "ckpt4")
    s.trained("w5b", 5, round_done=False)  # the step after the checkpoint again: version 5, not 7
    assert s.sent[-1][1:3] == ("w5b", 5)


def test_a_version_the_run_does_not_expect_is_an_error_not_a_silent_drift():
    s = Recorded("pipeline")
    s.trained("w1", 1, round_done=False)
    with pytest.raises(RuntimeError, match="reports policy version 3 after this step, but the run's weights are at version 1"):
        s.trained("w2", 3, round_done=False)
    with pytest.raises(RuntimeError, match="expected 1"):
        s.trained(None, 2, round_done=False)  # a skipped update keeps the version


def test_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="unknown off-policy algorithm 'async'"):
        WeightSync([], "async")


def test_generator_takes_a_forced_older_version_and_keeps_it_forced_under_newer_pushes(tiny_config):
    from workbench.engine.rollout.torch_backend import Generator
    from workbench.engine.train.trainer import Trainer
    from workbench.engine.run.actors import generator_parts, trainer_parts

    cfg = tiny_config(for_actors=True)
    gen, weights = Generator(**generator_parts(cfg)), Trainer(**trainer_parts(cfg)).get_weights()
    gen.set_weights(weights, 9)
    assert gen._apply_pending() == 9
    gen.set_weights(weights, 3)  # an older version, not forced: ignored
    assert gen._apply_pending() == 9
    gen.set_weights(weights, 4, force=True)  # a trainer restarted from its step-4 checkpoint
    gen.set_weights(weights, 5)  # the next step's push arrives before the slot is taken
    assert gen._apply_pending() == 5  # still taken, though older than 9
    gen.set_weights(weights, 2, force=True)
    assert gen._apply_pending() == 2
    chunk = gen.generate(0, [0, 1], 2, seed=0)
    assert {v for g in chunk.groups for c in g.completions for v in c.versions} == {2}
