"""The trainer group on Ray (CPU, gloo): 2 FSDP2 workers train exactly like 1, save and load
sharded checkpoints, and a dead worker surfaces as TrainerDied."""

from __future__ import annotations

import os
import signal

import pytest
import ray
import torch

from tests.engine.train.helpers import batches
from workbench.engine.train.trainer import Trainer
from workbench.engine.train.group import TrainerDied, TrainerGroup, get_all
from workbench.engine.run.actors import trainer_parts


@pytest.fixture
def two(tiny_config):
    # micro-batch 5: uneven rows per rank and per micro-batch (12 rows -> 6 per rank -> 5 + 1).
    # adam_eps 1e-8: with 1e-15 AdamW turns the rounding noise of a ~0 gradient (the order of
    # the sums differs between 1 and 2 ranks) into a full lr-sized step of either sign.
    return lambda **kw: tiny_config(
        {"resources.trainer_workers": 2, "train.micro_batch_size": 5, "train.adam_eps": 1e-8, **kw}, for_actors=True
    )


def test_two_gloo_workers_match_one_worker(ray_cluster, two):
    cfg2 = two()
    steps = batches(cfg2, 2)
    one = Trainer(**trainer_parts(cfg2))  # in-process, one worker (the trainer_workers field only matters to the group)
    one.world_size = 1
    one.share_prompts = False  # as the sharded workers run (test_trainer.py says why)
    group = TrainerGroup(trainer_parts(cfg2), cfg2.resources, name=cfg2.name)
    try:
        for step, groups in enumerate(steps):
            result, w1 = one.train_step(groups, step)
            s1 = result.stats
            call = group.train(groups, step)
            got, w2 = ray.get([call.result, call.weights])
            s2 = got.stats
            assert got.version == result.version == step + 1 and got.skipped is None
            assert s2["train/skipped"] == 0.0 and s1["train/skipped"] == 0.0
            assert abs(s1["train/loss"] - s2["train/loss"]) < 1e-5, (s1["train/loss"], s2["train/loss"])
            assert abs(s1["train/grad_norm"] - s2["train/grad_norm"]) < 1e-5
            assert s2["train/sequences_trained"] == s1["train/sequences_trained"] == 12
            assert s2["time/weight_gather"] >= 0.0
            t1, t2 = w1.tensors(), w2.tensors()
            assert t1.keys() == t2.keys()
            for k in t1:
                torch.testing.assert_close(t2[k], t1[k], atol=1e-5, rtol=0, msg=k)
        assert any(not torch.equal(v, Trainer(**trainer_parts(cfg2)).model.state_dict()[k]) for k, v in w2.tensors().items())
    finally:
        group.kill()


def test_two_workers_resume_from_a_sharded_checkpoint(ray_cluster, two, tmp_path):
    cfg = two()
    steps = batches(cfg, 3)
    group = TrainerGroup(trainer_parts(cfg), cfg.resources, name=cfg.name)
    try:
        for step in range(2):
            ray.get(group.train(steps[step], step).result)
        group.save(str(tmp_path / "ck"))
        assert (tmp_path / "ck" / "trainer_dcp").is_dir() and (tmp_path / "ck" / "trainer_meta.pt").exists()
        expected = ray.get(group.train(steps[2], 2).weights).tensors()
        group.restart()  # fresh workers, initial weights
        assert group.load(str(tmp_path / "ck")) == 2
        got = ray.get(group.train(steps[2], 2).weights).tensors()
        for k in expected:  # weights AND AdamW states came back: the third step is the same
            torch.testing.assert_close(got[k], expected[k], atol=1e-6, rtol=0, msg=k)
    finally:
        group.kill()


def test_a_dead_worker_is_reported_not_waited_for(ray_cluster, two):
    cfg = two()
    group = TrainerGroup(trainer_parts(cfg), cfg.resources, name=cfg.name)
    try:
        pids = group.pids()
        assert len(set(pids)) == 2
        os.kill(pids[1], signal.SIGKILL)
        with pytest.raises(TrainerDied):
            get_all([a.ping.remote() for a in group.actors])
    finally:
        group.kill()


@ray.remote(num_cpus=0, max_restarts=0)
class _Rank:
    """A stand-in rank: fails the way a collective does, dies, or answers."""

    def collective_fails(self) -> None:
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:46215")

    def dies_after(self, seconds: float) -> None:
        import time

        time.sleep(seconds)
        os._exit(1)

    def answers_after(self, seconds: float) -> int:
        import time

        time.sleep(seconds)
        return 1


def test_a_survivors_collective_error_seen_before_the_death_is_still_a_dead_worker(ray_cluster):
    """CI saw this race: the survivor's gloo error came back before Ray reported the killed rank,
    and the run failed instead of restarting the trainer group."""
    survivor, victim = _Rank.remote(), _Rank.remote()
    refs = [survivor.collective_fails.remote(), victim.dies_after.remote(1.0)]
    with pytest.raises(TrainerDied, match="peer's collective"):
        get_all(refs)


def test_a_ranks_own_error_is_not_taken_for_a_death(ray_cluster):
    failing, fine = _Rank.remote(), _Rank.remote()
    refs = [failing.collective_fails.remote(), fine.answers_after.remote(0.5)]
    with pytest.raises(ray.exceptions.RayTaskError, match="Connection closed by peer"):
        get_all(refs)
