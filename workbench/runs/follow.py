"""Following a run from its folder alone, with no Ray connection: how a notebook watches a
`workbench run` started in a terminal (`Session.attach`).

The run's driver owns the run; the watcher only reads what the run writes anyway: metrics.jsonl
(read from where it last stopped, so a poll costs the new lines only), events.log, the heartbeat
and summary.json (runs.liveness.folder_status). Nothing the run does waits on a watcher, and a
watcher that goes away leaves nothing behind. The one thing a watcher may ask is a stop: it writes
`<run>/stop_request` (STOP_FILE, holding the reason), which `workbench run` polls and acts on after
the step in flight, with a checkpoint, as Ctrl-C would.

    run = FolderRun(out_dir, "my-run", max_steps=400, status=lambda: ("running", None))
    feed = FolderFeed(run, view)    # the feed a Session polls (the same calls as engine.run.feed.RunFeed)
    feed.poll(); feed.done(); error = feed.end()
    run.stop()                      # asks the driver to stop: writes STOP_FILE
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Optional

from workbench.errors import UserError
from workbench.runs.folder import read_summary
from workbench.runs.stop_request import StopWatch, request_stop
from workbench.runs.view import TERMINAL, RunView

STOP_FILE = "stop_request"  # <run>/stop_request: a watcher asks the run's driver to stop (its reason inside)
COMPUTE_KEYS = ("compute/device_hours", "compute/flops")


class _Lines:
    """metrics.jsonl read incrementally; a file cut shorter or replaced (a trainer restart rolls it
    back to its checkpoint) is read again from its start."""

    def __init__(self, path: Path):
        self.path, self.pos, self.inode = path, 0, None
        self.rows: list[dict[str, Any]] = []

    def read(self) -> tuple[list[dict[str, Any]], bool]:
        """(new rows, rewound): rewound when the file was cut or replaced, `rows` then holds it all again."""
        try:
            st = os.stat(self.path)
        except OSError:
            return [], False
        if self.inode is not None and (st.st_ino != self.inode or st.st_size < self.pos):
            self.pos, self.rows = 0, []
            rewound = True
        else:
            rewound = False
        self.inode = st.st_ino
        if st.st_size == self.pos:
            return [], rewound
        with open(self.path, "rb") as fh:
            fh.seek(self.pos)
            chunk = fh.read(st.st_size - self.pos)
        whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next poll
        self.pos += len(whole)
        new = []
        for line in whole.split(b"\n"):  # whole lines only; one a killed run tore is skipped, as read_jsonl does
            if line.strip():
                try:
                    new.append(json.loads(line))
                except ValueError:
                    continue
        self.rows.extend(new)
        return new, rewound


class FolderRun:
    """A run seen through its folder: status, rows and a stop request. Stands where a RunHandle
    stands for a Session attached to a run it cannot control through Ray."""

    run_ref = None  # this process did not start the run: its end is read from the folder

    def __init__(self, out_dir: str | Path, name: str, *, max_steps: Optional[int],
                 status: Callable[[], tuple[str, Optional[str]]]):
        self.out, self.name, self.max_steps = Path(out_dir), name, max_steps
        self._status = status
        self.lines = _Lines(self.out / "metrics.jsonl")

    def status(self) -> dict[str, Any]:
        """What a Coordinator's status() says, read from the folder (status, step, compute, events, error)."""
        status, why = self._status()
        rows = self.lines.rows
        st: dict[str, Any] = {"status": status, "step": max((int(r.get("step", 0)) for r in rows), default=0),
                              "max_steps": self.max_steps, "out_dir": str(self.out), "error": why,
                              "events": self._events(), "watch_only": True}
        for key in COMPUTE_KEYS:
            st[key] = next((r[key] for r in reversed(rows) if r.get(key) is not None), 0.0)
        return st

    def _events(self) -> list[str]:
        try:
            lines = (self.out / "events.log").read_text().splitlines()
        except OSError:
            return []
        return [line[20:] if line[:4].isdigit() else line for line in lines]  # drop "YYYY-MM-DD HH:MM:SS "

    def metrics(self, since: int = 0) -> list[dict[str, Any]]:
        self.lines.read()
        return self.lines.rows[since:]

    def stop(self) -> None:
        """Ask the run's driver to stop after the step in flight (with a checkpoint)."""
        request_stop(self.out / STOP_FILE, "stop asked from a notebook (Session.stop)")

    def pause(self) -> None:
        self._refuse("pause")

    def resume(self) -> None:
        self._refuse("resume")

    def _refuse(self, what: str) -> None:
        raise UserError(f"cannot {what} run '{self.name}': it is watched from its folder {self.out} (its driver, "
                        f"e.g. `workbench run`, holds the run); only stop() is possible from here")

    def kill(self) -> None:
        """Nothing to release: a watcher holds no part of the run (its driver ends it)."""


class FolderFeed:
    """Feeds `view` from the folder of `run` (a FolderRun); the run's driver reports its end, not this feed."""

    owns_end = False  # the driver writes the fit artifacts and closes the MLflow run

    def __init__(self, run: FolderRun, view: RunView):
        self.handle, self.view = run, view
        self.stop_watch = StopWatch()

    def check_stop(self) -> None:
        self.stop_watch.check(self.view.name, self.handle.stop)

    def poll(self) -> list[dict[str, Any]]:
        """Read the rows written since the last poll into the view, and the status; return the new rows."""
        self.check_stop()
        new, rewound = self.handle.lines.read()
        if rewound:  # rolled back to a checkpoint: the view takes the file as it is now
            self.view.load_rows(self.handle.lines.path)
        else:
            self.view.extend(new)
        self.view.state = self.handle.status()
        return new

    def done(self) -> bool:
        return self.handle.status().get("status") in TERMINAL

    def end(self) -> Optional[str]:
        """Once the run has ended: the last rows and its summary into the view; returns why it failed, or None."""
        self.poll()
        st = self.view.state
        summary = read_summary(self.handle.out, wait=2.0)
        error = (summary or {}).get("error") or (st.get("error") if st.get("status") == "failed" else None)
        self.view.end(summary or {"status": st.get("status"), "steps": st.get("step")}, error)
        return error
