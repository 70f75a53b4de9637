"""workbench.engine.sandbox_pool: the Ray reward pool that runs sandboxed code checks beside decoding.

    pool = RewardPool.start(num_workers=2, cpus_per_worker=1.0)
    verdicts = pool.run(checks)              # or: pending = pool.submit(checks); ...; pending.get()
    pool.shutdown()

    pool  RewardPool (Ray actors, each hosting a workbench.tasks.sandbox.LocalSandbox), PendingVerdicts
"""

from workbench.engine.sandbox_pool.pool import PendingVerdicts, RewardPool

__all__ = ["PendingVerdicts", "RewardPool"]
