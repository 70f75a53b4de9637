"""The limits of one sandboxed check, and the check itself (a completion plus its test spec).

    Limits(cpu_seconds=2.0)          # defaults below; every check of a LocalSandbox gets the same limits
    CodeCheck(completion="```python\\ndef add(a, b): return a + b\\n```", spec=code_spec(...))

`spec` is the JSON text a code task keeps in `Example.answer` (built by `code_spec`,
workbench.tasks.sandbox.spec).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Per-check limits, set as rlimits in each check's own process (and inherited by what it starts).

    cpu_seconds decides a timeout (CPU time, so a busy machine does not turn right answers into
    timeouts); wall_seconds is only a backstop (a check that sleeps or is starved)."""

    cpu_seconds: float = 2.0
    wall_seconds: float = 20.0
    memory_bytes: int = 1 << 30  # address space
    processes: int = 32  # RLIMIT_NPROC, counted in the check's own user namespace
    open_files: int = 64
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE
    tmp_bytes: int = 16 << 20  # the check's private /tmp
    output_bytes: int = 1 << 20  # stdout + stderr together; more is an error verdict

    def __post_init__(self) -> None:
        from workbench.errors import UserError

        if not (self.cpu_seconds > 0 and self.wall_seconds >= self.cpu_seconds):
            raise UserError(f"sandbox limits: need 0 < cpu_seconds <= wall_seconds, got {self.cpu_seconds}, {self.wall_seconds}")
        for name in ("memory_bytes", "processes", "open_files", "file_bytes", "tmp_bytes", "output_bytes"):
            if int(getattr(self, name)) < 1:
                raise UserError(f"sandbox limits: {name} must be >= 1, got {getattr(self, name)}")

    def wire(self) -> dict:
        """The limits as the fork server reads them (workbench/tasks/sandbox/server.py)."""
        return {
            "cpu": float(self.cpu_seconds), "wall": float(self.wall_seconds), "mem": int(self.memory_bytes),
            "nproc": int(self.processes), "nofile": int(self.open_files), "fsize": int(self.file_bytes),
            "tmp_kb": max(1, int(self.tmp_bytes) // 1024), "out": int(self.output_bytes),
        }


@dataclass(frozen=True)
class CodeCheck:
    """One completion to check against one code spec (`Example.answer` of a code example)."""

    completion: str
    spec: str
