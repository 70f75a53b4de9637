"""The Ray reward pool on a real local cluster: verdicts come back in order from several actors,
submit() returns before the checks finish, a dead actor is replaced and its checks re-run (never
scored on the failure)."""

from __future__ import annotations

import pytest

from workbench.engine.sandbox_pool import RewardPool
from workbench.errors import UserError
from workbench.tasks.sandbox import CodeCheck, code_spec


def checks(n: int) -> list[CodeCheck]:
    out = []
    for i in range(n):
        spec = code_spec(entry_point="f", cases=[{"args": [i], "expected": i * 2}])
        body = "return x * 2" if i % 4 else "return x + 2"  # every 4th is wrong (but 2 + 2 == 2 * 2)
        out.append(CodeCheck(f"def f(x):\n    {body}\n", spec))
    return out


@pytest.mark.slow
def test_pool_checks_in_order_across_actors_and_survives_a_dead_actor(ray_cluster):
    pool = RewardPool.start(num_workers=2, cpus_per_worker=0.25)
    try:
        batch = checks(40)
        pending = pool.submit(batch)
        got = pending.get()
        assert [v.passed for v in got] == [i % 4 != 0 or i == 2 for i in range(40)]
        assert [v.passed for v in pool.run(batch[:3])] == [False, True, True]

        dead = pool.actors[0]
        ray_cluster.kill(dead)
        after = pool.run(batch[:4])  # the first shard was on the dead actor: re-run on a fresh one, not scored
        assert [v.passed for v in after] == [False, True, True, True] and pool.actors[0] is not dead
    finally:
        pool.shutdown()


def test_pool_arguments_are_checked(ray_cluster):
    with pytest.raises(UserError):
        RewardPool.start(num_workers=0, cpus_per_worker=1)
    with pytest.raises(UserError):
        RewardPool.start(num_workers=1, cpus_per_worker=-1)


@pytest.mark.slow
def test_a_pool_that_cannot_replace_a_dead_actor_stops_in_one_line_and_scores_nothing(ray_cluster, capfd):
    pool = RewardPool.start(num_workers=1, cpus_per_worker=0.25, down_timeout_s=3.0)
    try:
        pool.cpus_per_worker = 1000.0  # no node can host a replacement any more: the pool is down
        ray_cluster.kill(pool.actors[0])
        pending = pool.submit(checks(3))
        with pytest.raises(UserError, match="the reward pool is down: no sandbox actor started within 3 s") as e:
            pending.get()  # no verdict at all: nothing is scored, the run stops on this line
        assert "\n" not in str(e.value)
        assert "re-running its 3 checks on a fresh actor" in capfd.readouterr().err  # the step said why it waits
    finally:
        pool.shutdown()
