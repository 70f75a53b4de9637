"""The stop-request protocol of sweeps: both sides of it (a sweep asking a point's run to stop).

    env = {**os.environ, **stop_env(stop_file)}   # the sweep: the point's process learns its file
    request_stop(stop_file, "stopped by forecast after 9 evaluations, at step 32: ...")   # the sweep asks
    watch = StopWatch(); watch.check("my-run", handle.stop)   # the run's side (workbench.Session, each poll)

The sweep gives each point's papermill process a file path in $WORKBENCH_STOP_REQUEST
(`STOP_REQUEST_ENV`); the file does not exist until the sweep wants the run stopped, and then
holds the reason. `workbench.Session` checks it (a `StopWatch`) each time it polls its run and,
once, stops the run after the step in flight (with a checkpoint) and prints the reason.
It lives in runs/, below both sides, so the session reads it without importing the sweep
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional

STOP_REQUEST_ENV = "WORKBENCH_STOP_REQUEST"  # path of a file whose appearance asks the run to stop


def stop_env(path: str | Path) -> dict[str, str]:
    """The environment entry that tells a point's process where its stop request would appear."""
    return {STOP_REQUEST_ENV: str(path)}


def request_stop(path: str | Path, reason: str) -> None:
    """Ask the run watching `path` to stop, for `reason` (one line)."""
    Path(path).write_text(reason.strip() + "\n")


def stop_requested() -> Optional[str]:
    """The reason ("" when the file is empty or unreadable) once the file named by
    $WORKBENCH_STOP_REQUEST exists; None while there is no request (or no such variable)."""
    path = os.environ.get(STOP_REQUEST_ENV)
    if not path or not os.path.exists(path):
        return None
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


class StopWatch:
    """The run's side of the protocol: `check` acts on the first request only."""

    def __init__(self) -> None:
        self.reason: Optional[str] = None  # set once a request was seen

    def check(self, name: str, stop: Callable[[], Any]) -> bool:
        """On a new stop request: print it, call `stop()` (errors ignored: the run may have ended)
        and return True."""
        if self.reason is not None or (reason := stop_requested()) is None:
            return False
        self.reason = reason
        print(f"workbench: stop requested for run '{name}'" + (f": {reason}" if reason else ""), flush=True)
        try:
            stop()
        except Exception:  # noqa: BLE001 - the run has ended already
            pass
        return True
