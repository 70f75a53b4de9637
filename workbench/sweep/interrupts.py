"""Stopping a sweep's points: Ctrl-C and SIGTERM turned into one KeyboardInterrupt, the running
points' papermill processes interrupted then killed, and the Ray clusters a point left behind
stopped (runner.py calls these; its docstring tells the whole story).

    with sigterm_as_interrupt(): ...          # SIGTERM takes Ctrl-C's path while inside
    interrupt_points(ctx)                      # SIGINT, INTERRUPT_GRACE seconds, then kill
    stop_point_clusters(ray_state)             # after a point's process has ended
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import Any

INTERRUPT_GRACE = 15.0  # seconds a point's papermill has to shut its kernel down after SIGINT


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While inside: SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does (once;
    a SIGTERM during the clean-up that follows is ignored). The previous handler is restored."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    fired = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        if not fired.is_set():
            fired.set()
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupt_points(ctx: dict[str, Any]) -> None:
    """The sweep was interrupted: SIGINT each running point's papermill (it shuts its kernel down),
    and after INTERRUPT_GRACE seconds kill what is left of the points still running. Each point's
    thread then stops its clusters and records it (runner._run_point); points not started yet do not start."""
    with ctx["lock"]:
        ctx["interrupted"].set()
        running = dict(ctx["procs"])
    for proc, _ in running.values():
        proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + INTERRUPT_GRACE
    while time.monotonic() < deadline:
        with ctx["lock"]:
            if not ctx["procs"]:
                return
        time.sleep(0.2)
    with ctx["lock"]:
        left = [state for _, state in ctx["procs"].values()]
    for state in left:
        kill_point_processes(state)


def kill_point_processes(ray_state: Path) -> None:
    """Kill every process started with the point's WORKBENCH_STATE_DIR: its papermill, its kernel
    (which, orphaned or killed, cannot stop its own cluster) and any `ray start` in flight."""
    from workbench.engine import cluster

    cluster.terminate(cluster.pids_with_env(cluster.STATE_DIR_ENV, str(ray_state)), timeout=5.0)


def stop_point_clusters(ray_state: Path) -> None:
    """Stop every Ray cluster the point's process recorded in its state folder and left running."""
    from workbench.engine import cluster

    started = ray_state / "started"
    if not started.is_file():
        return
    for address in started.read_text().split():
        if cluster.cluster_pids(address):
            cluster.stop(address)
    (ray_state / "ray_address").unlink(missing_ok=True)  # nothing recorded there runs any more
