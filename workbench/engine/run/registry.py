"""The run registry: which run name lives in which run folder, so a notebook finds a run by name.

Every run's driver records its run when the Coordinator answers (`start_coordinator`): one small
JSON file per run folder under `<state dir>/runs/` (the project's `.workbench/`, or
$WORKBENCH_STATE_DIR; the same place the session cluster's address is recorded), holding the
run's name, folder, step target, whether its Coordinator is a detached named actor (a Session's run,
controlled through Ray) or lives on its driver's private Ray (`workbench run`: followed from its
folder), and the driver's host and pid. A run started again in the same folder replaces its entry.

    register(cfg, detached=False)        # the driver's side (handle.start_coordinator)
    entry = find_run("qwen0.5b-gsm8k")   # a name, or a run folder ("runs/gsm8k"); UserError if ambiguous
    entry.status()                       # ("running", None) / ("finished", None) / ("failed", why)
    known_runs()                         # every recorded run whose folder still exists, newest first

A name that two folders share, or that names nothing, is one line listing the runs that exist.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from workbench.config import RunConfig
from workbench.errors import UserError
from workbench.runs.folder import run_folder
from workbench.runs.liveness import SIGNS_OF_LIFE, folder_status


@dataclass(frozen=True)
class RunEntry:
    """One recorded run: where it lives and who drives it."""

    name: str
    out_dir: str
    detached: bool  # a Session's named, detached Coordinator (Ray control); else followed from the folder
    max_steps: Optional[int] = None
    host: str = ""
    pid: int = 0
    started_at: float = 0.0

    def driver_gone(self) -> bool:
        """True when the driving process is known to be gone (it ran on this host and its pid is dead).
        A detached run outlives its driver (a kernel restart), so only a private-Ray run's driver counts."""
        if self.detached or self.host != socket.gethostname() or self.pid <= 0:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, someone else's
            return False
        return False

    def status(self) -> tuple[str, Optional[str]]:
        """(status, why) from the run folder: running, or how it ended (runs.liveness.folder_status)."""
        return folder_status(self.out_dir, since=self.started_at or None, pid_gone=self.driver_gone())

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started_at)) if self.started_at else "?"
        return f"'{self.name}' in {self.out_dir} ({self.status()[0]}, started {when})"


def registry_dir() -> Path:
    """<state dir>/runs: the engine.cluster state dir, shared by the runs of this project (or $WORKBENCH_STATE_DIR)."""
    from workbench.engine.cluster.local import state_dir

    return state_dir() / "runs"


def _entry_path(out_dir: str | Path) -> Path:
    key = hashlib.sha1(str(Path(out_dir).resolve()).encode()).hexdigest()[:16]
    return registry_dir() / f"{key}.json"


def register(cfg: RunConfig, *, detached: bool) -> RunEntry:
    """Record the run of `cfg` (its folder exists: the Coordinator made it). Never fails a run: a
    registry that cannot be written only means the run is found by its folder, not its name."""
    out = Path(cfg.output_dir()).resolve()
    entry = RunEntry(name=cfg.name, out_dir=str(out), detached=detached, max_steps=int(cfg.train.max_steps),
                     host=socket.gethostname(), pid=os.getpid(), started_at=time.time())
    path = _entry_path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(entry)))
        tmp.replace(path)  # atomic: a reader sees the old entry or the new one
    except OSError:
        pass
    return entry


def _read(path: Path) -> Optional[RunEntry]:
    try:
        data = json.loads(path.read_text())
        return RunEntry(**{k: data[k] for k in RunEntry.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _has_run(out_dir: str | Path) -> bool:
    return any((Path(out_dir) / f).exists() for f in (*SIGNS_OF_LIFE, "checkpoints", "summary.json"))


def known_runs() -> list[RunEntry]:
    """Every recorded run whose folder still holds a run, newest first (entries of deleted folders are dropped)."""
    found = []
    for path in sorted(registry_dir().glob("*.json")) if registry_dir().is_dir() else []:
        entry = _read(path)
        if entry is None or not _has_run(entry.out_dir):
            path.unlink(missing_ok=True)  # a deleted run folder: its name is free again
            continue
        found.append(entry)
    return sorted(found, key=lambda e: -e.started_at)


def _listing(runs: list[RunEntry], limit: int = 6) -> str:
    if not runs:
        return "no run is recorded on this machine"
    more = f"; and {len(runs) - limit} more" if len(runs) > limit else ""
    return "runs recorded: " + "; ".join(e.describe() for e in runs[:limit]) + more


def find_run(target: str | Path) -> RunEntry:
    """The run named `target` (its config's name), or in the run folder `target` (a path, or
    <project>/runs/<target>). UserError, one line listing what exists, when it names no run or
    when two folders hold runs of that name."""
    if not isinstance(target, (str, Path)) or not str(target).strip():
        raise UserError(f"a run is named by its name or its run folder (a non-empty str or Path), got {target!r}")
    runs = known_runs()
    path = Path(target)
    if path.is_dir() and _has_run(path):  # a folder given as such wins over a name
        return _folder_entry(path.resolve(), runs)
    named = [e for e in runs if e.name == str(target)]
    if len(named) > 1:
        raise UserError(f"{len(named)} runs are named '{target}': " + "; ".join(e.describe() for e in named)
                        + ": attach by folder, e.g. Session.attach('" + named[0].out_dir + "')")
    if named:
        return named[0]
    try:  # <project>/runs/<target>: the default --out of `workbench run`
        folder = run_folder(target)
    except UserError:
        raise UserError(f"no run named '{target}' and no run folder {target}: {_listing(runs)}") from None
    return _folder_entry(folder, runs)


def _folder_entry(folder: Path, runs: list[RunEntry]) -> RunEntry:
    """The recorded entry of `folder`, else one built from its files (a run recorded elsewhere, or copied)."""
    for e in runs:
        if Path(e.out_dir) == folder:
            return e
    from workbench.runs.folder import saved_config

    try:
        cfg = saved_config(folder)
    except UserError:
        cfg = None
    return RunEntry(name=cfg.name if cfg is not None else folder.name, out_dir=str(folder), detached=False,
                    max_steps=int(cfg.train.max_steps) if cfg is not None else None)
