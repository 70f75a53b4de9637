"""Atomic, step-numbered checkpoints: `checkpoints/step_000050/{trainer.pt,state.json}`.

A checkpoint is written into a temporary folder and renamed into place only when complete,
then `LATEST` is replaced; a run killed at any moment leaves the previous checkpoint intact.
The oldest checkpoints beyond `keep` are removed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Optional


class CheckpointStore:
    def __init__(self, root: str | Path, keep: int = 2):
        self.root = Path(root)
        self.keep = max(1, keep)

    def path_for(self, step: int) -> Path:
        return self.root / f"step_{step:06d}"

    def begin(self, step: int) -> Path:
        tmp = self.root / f".tmp_step_{step:06d}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        return tmp

    def commit(self, step: int, state: dict[str, Any]) -> Path:
        tmp = self.root / f".tmp_step_{step:06d}"
        (tmp / "state.json").write_text(json.dumps(state, indent=1, default=float))
        final = self.path_for(step)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        latest_tmp = self.root / "LATEST.tmp"
        latest_tmp.write_text(final.name)
        latest_tmp.replace(self.root / "LATEST")
        self._prune()
        return final

    def steps(self) -> list[int]:
        if not self.root.exists():
            return []
        return sorted(int(p.name[5:]) for p in self.root.glob("step_*") if (p / "state.json").exists())

    def latest_step(self) -> Optional[int]:
        latest = self.root / "LATEST"
        if latest.exists():
            name = latest.read_text().strip()
            if (self.root / name / "state.json").exists():
                return int(name[5:])
        steps = self.steps()
        return steps[-1] if steps else None

    def latest_state(self) -> Optional[dict[str, Any]]:
        step = self.latest_step()
        if step is None:
            return None
        return json.loads((self.path_for(step) / "state.json").read_text())

    def _prune(self) -> None:
        for step in self.steps()[: -self.keep]:
            shutil.rmtree(self.path_for(step), ignore_errors=True)
