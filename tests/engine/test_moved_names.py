"""Names moved by issue 35 stay importable from their old paths, and are the same objects."""

from __future__ import annotations


def test_sandbox_pool_old_path() -> None:
    from workbench.engine import reward, sandbox_pool

    assert reward.RewardPool is sandbox_pool.RewardPool
    assert reward.PendingVerdicts is sandbox_pool.PendingVerdicts


def test_policy_forward_old_path() -> None:
    from workbench.engine.model.policy import PolicyForward
    from workbench.engine.train import fsdp

    assert fsdp.PolicyForward is PolicyForward


def test_reward_and_step_preparation_old_paths() -> None:
    from workbench import rl
    from workbench.engine.rollout import scoring
    from workbench.rl import reward, step

    assert scoring.reward_for is reward.reward_for is rl.reward_for
    assert step.plan_step is step.prepare_step
