"""The old import path of the sandbox pool, kept so `from workbench.engine.reward import RewardPool`
still works: the pool of sandboxed code-check actors lives in `workbench.engine.sandbox_pool`."""

from workbench.engine.sandbox_pool import PendingVerdicts, RewardPool

__all__ = ["PendingVerdicts", "RewardPool"]
