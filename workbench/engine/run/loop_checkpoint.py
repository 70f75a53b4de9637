"""The run loop's checkpoint: the state it holds beside the trainer's, restoring it, saving it.

A checkpoint (every `checkpoint.every_steps` steps and at the end; `runs/checkpoint.CheckpointStore`
lays out the folder) holds the trainer state and this loop's: step, chunk counter, sampler,
counters, the prompts drawn but not yet trained (replayed first after a resume) and the config.
`start` is the loop's state when the run began: where a trainer restart goes back to when no
checkpoint exists yet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from workbench.config import RunConfig
from workbench.configtools import to_dict
from workbench.engine.run import accounting
from workbench.engine.run.prompt_supply import PromptSupply
from workbench.runs.checkpoint import CheckpointStore


@dataclass
class Restored:
    """Where a restored loop stands: its step and its counters (the prompt supply is loaded in place)."""

    step: int
    counters: accounting.Counters


class LoopCheckpoint:
    """The loop's side of a run folder's checkpoints."""

    def __init__(self, cfg: RunConfig, out: Path, prompts: PromptSupply):
        self.cfg = cfg
        self.prompts = prompts
        self.store = CheckpointStore(out / "checkpoints", keep=cfg.checkpoint.keep)
        self.start: Optional[dict[str, Any]] = None  # set by mark_start

    def state(self, step: int, counters: accounting.Counters, pending: Optional[list[int]] = None) -> dict[str, Any]:
        """The loop state a checkpoint holds; `pending` (default: the replay) are the prompts drawn, not yet trained."""
        supply = self.prompts.state(list(self.prompts.replay) if pending is None else pending)
        return {
            "step": step,
            "chunk_counter": supply["chunk_counter"],
            "sampler": supply["sampler"],
            "counters": counters.to_dict(),
            "replay": supply["replay"],
            "config": to_dict(self.cfg),
        }

    def mark_start(self, step: int, counters: accounting.Counters) -> None:
        """Keep the state now as `start` (a copy: the sampler moves on)."""
        self.start = json.loads(json.dumps(self.state(step, counters), default=float))

    def latest(self) -> Optional[dict[str, Any]]:
        """The latest committed checkpoint's loop state, or None."""
        return self.store.latest_state()

    def latest_step(self) -> Optional[int]:
        return self.store.latest_step()

    def restore(self, state: dict[str, Any]) -> Restored:
        """Load the prompt supply from `state`; return the step and counters it holds."""
        self.prompts.load(state)
        return Restored(step=int(state["step"]), counters=accounting.Counters(**state["counters"]))

    def trainer_path(self, step: int) -> str:
        """Where the trainer state of the checkpoint at `step` lives."""
        return str(self.store.path_for(step))

    def save(self, workers: Any, step: int, counters: accounting.Counters, pending: list[int]) -> None:
        """The trainer's state, then the loop's: a checkpoint counts once both are written (commit)."""
        path = self.store.begin(step)
        workers.save_trainer(path)
        self.store.commit(step, self.state(step, counters, pending))
