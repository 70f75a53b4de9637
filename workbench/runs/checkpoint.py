"""Atomic, step-numbered checkpoints: `checkpoints/step_000050/{trainer_dcp/,trainer_meta.pt,state.json}`.

A checkpoint is written into a temporary folder and renamed into place only when complete,
then `LATEST` is replaced; a run killed at any moment leaves the previous checkpoint intact.
The oldest checkpoints beyond `keep` are removed.

The coordinator writes the folders and every trainer worker writes its shards into them, each
on its own node, so the run folder must be one folder on every node. `shared_token(out_dir)`
and `require_shared(out_dir, views)` are the one rule for that, checked when trainers start:

    with shared_token(out_dir) as (path, token):                 # in the coordinator
        views = [worker.sees(str(path), token) for each worker]  # reads_token(path, token) there
    require_shared(out_dir, views)                               # a UserError naming the node
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
from pathlib import Path
from typing import Any, Iterator, Optional

from workbench.errors import UserError

SHARED_CHECK_PREFIX = ".shared-check-"
# The trainer's state in a checkpoint folder: TRAINER_DCP/, a torch.distributed.checkpoint folder of
# {"model": the policy's state dict, "optim": AdamW's} written by every worker (engine/train/fsdp.py),
# and trainer_meta.pt. The policy module holds the Hugging Face model as `.model`, so a weight's key
# under "model" is POLICY_PREFIX + its Hugging Face name (what runs/export.py reads).
TRAINER_DCP = "trainer_dcp"
POLICY_PREFIX = "model."


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


@contextlib.contextmanager
def shared_token(out_dir: str | Path) -> Iterator[tuple[Path, str]]:
    """A file with a random token in `out_dir` while the block runs (removed after)."""
    token = secrets.token_hex(16)
    path = Path(out_dir) / f"{SHARED_CHECK_PREFIX}{token}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token)
    try:
        yield path, token
    finally:
        path.unlink(missing_ok=True)


def reads_token(path: str | Path, token: str) -> bool:
    """Whether this process reads `token` at `path` (run on each worker's node)."""
    try:
        return Path(path).read_text() == token
    except OSError:
        return False


def require_shared(out_dir: str | Path, views: list[dict[str, Any]]) -> None:
    """A UserError naming the first worker (`{"node_ip", "seen"}`) that did not read the token."""
    for view in views:
        if not view["seen"]:
            raise UserError(
                f"out_dir {out_dir} is not shared with the trainer worker on node {view['node_ip']}: "
                "put out_dir on storage every node mounts (NFS, a cluster filesystem), since the "
                "coordinator and every trainer worker write the checkpoints into it"
            )
