"""workbench.engine: runs RL on Ray. The door: launch, attach, run_to_end, RunHandle, RunFailed.

    from workbench.engine import launch, run_to_end
    summary = run_to_end(cfg, resume=False)

Rooms (each package's docstring says more):
- `run/`       the run loop (coordinator), weight sync (versions, push policy), metrics rows /
               events / summary, actors, the Coordinator actor and RunHandle, preflight,
               launch, accounting, `workbench run`
- `rollout/`   generators and the evaluator: backend-neutral worker, torch backend, vLLM backend
- `train/`     the trainer, the trainer group (N workers), FSDP
- `model/`     model loading, the builtin tiny GPT and its SFT warm-up, HF folders, sampling, devices
- `cluster/`   the one owner of how a Ray cluster is found or started; `workbench cluster`
- `batch.py`   the rollout -> train contract; `weights.py` how weights travel; `failures.py` how an
               actor's error reaches the user (one line; noise and traceback in the run folder)
"""

from __future__ import annotations

import importlib
from typing import Any

# Loaded on first use, so importing a leaf module (a Ray worker importing engine.model, vLLM's
# worker importing the extension) does not import the whole run machinery.
_DOOR = {
    "RunFailed": "workbench.engine.run.coordinator",
    "RunHandle": "workbench.engine.run.handle",
    "attach": "workbench.engine.run.handle",
    "launch": "workbench.engine.run.launch",
    "run_to_end": "workbench.engine.run.launch",
}
__all__ = sorted(_DOOR)


def __getattr__(name: str) -> Any:
    if name not in _DOOR:
        raise AttributeError(f"module 'workbench.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(_DOOR[name]), name)
