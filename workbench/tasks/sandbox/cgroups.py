"""Whole-check limits: the cgroups our process makes for one sandbox worker (cgroup v1 memory, pids, cpuacct).

    cg, note = worker_cgroups(limits)      # (WorkerCgroups, "") or (None, why not)
    argv = worker_argv(limits.wire(), extra=cg.bwrap_args())   # bound at /cg/<controller> in the worker
    cg.close()                             # after the worker has exited

A check runs as `nobody` inside bubblewrap and cannot make cgroups, so we make one per worker
(root only: its `cgroup.procs` is given to nobody so the fork server can put its zygote in it;
every check's processes are the zygote's clones, so they are in it too). Limits: memory (all the
check's processes together; swap too where the host accounts it), processes (`pids.max`, the
zygote counted), and the CPU time of all of them, which the fork server reads from `cpuacct.usage`
and kills the check past its limit (server.py). Checks run one at a time per worker, so the
cgroup holds one check at a time.

Where the host has no cgroup v1 hierarchy for these controllers, or we are not root, there are no
whole-check limits: the per-process rlimits stay (Limits), and `LIMITS_NOTE` says which are in
force. (A v2-only host gets the per-process limits: not built yet, see docs/concepts/sandbox.md.)
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from workbench.tasks.sandbox.limits import Limits

CONTROLLERS = ("memory", "pids", "cpuacct")
NOBODY = 65534


def _v1_mounts() -> dict[str, tuple[str, str]]:
    """{controller: (mount point, root of the mount)} of the cgroup v1 hierarchies mounted here."""
    out: dict[str, tuple[str, str]] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        for option in tail[2].split(","):
            if option in CONTROLLERS:
                out.setdefault(option, (fields[4], fields[3]))
    return out


def _own_paths() -> dict[str, str]:
    """{controller: this process's cgroup path} from /proc/self/cgroup (v1 lines)."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(","):
            out[name] = path
    return out


@dataclass
class WorkerCgroups:
    """One worker's cgroup per controller (absolute paths)."""

    dirs: dict[str, Path]

    def bwrap_args(self) -> list[str]:
        return [arg for c, d in self.dirs.items() for arg in ("--bind", str(d), f"/cg/{c}")]

    def close(self) -> None:
        """Remove the cgroups (their processes are gone with the worker; a moment for the last ones)."""
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _write(path: Path, value: int) -> None:
    path.write_text(str(value))


def worker_cgroups(limits: Limits) -> tuple[WorkerCgroups | None, str]:
    """(a worker's cgroups with `limits` set, "") where the host allows them, else (None, why not)."""
    if os.geteuid() != 0:
        return None, "not root, so no cgroups of our own"
    mounts, own = _v1_mounts(), _own_paths()
    missing = [c for c in CONTROLLERS if c not in mounts or c not in own]
    if missing:
        return None, f"no cgroup v1 {', '.join(missing)} controller mounted here"
    name = f"wb-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    made = WorkerCgroups({})
    try:
        for c in CONTROLLERS:
            point, root = mounts[c]
            rel = own[c][len(root):] if root != "/" and own[c].startswith(root) else own[c]
            d = Path(point) / rel.lstrip("/") / name
            d.mkdir()
            made.dirs[c] = d
            os.chown(d / "cgroup.procs", NOBODY, NOBODY)  # the fork server (nobody) puts its zygote in
        mem = made.dirs["memory"]
        _write(mem / "memory.limit_in_bytes", limits.memory_bytes)
        if (mem / "memory.memsw.limit_in_bytes").exists():
            _write(mem / "memory.memsw.limit_in_bytes", limits.memory_bytes)
        _write(made.dirs["pids"] / "pids.max", limits.processes + 1)  # + the zygote
    except OSError as e:
        made.close()
        return None, f"cannot make cgroups here ({e})"
    return made, ""


def limits_note(why_not: str) -> str:
    """One line: which limits are in force for a worker."""
    if not why_not:
        return "whole-check limits in force (cgroup v1: memory, processes and CPU time of all a check's processes together)"
    return f"per-process limits only ({why_not}): CPU seconds and address space bound each process, not the check"
