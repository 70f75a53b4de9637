"""Is a run still alive? Its heartbeat, and marking dead runs as such in MLflow.

A run's coordinator touches `OUT/heartbeat` every `HEARTBEAT_S` seconds from a thread of its own
(paused runs and long steps keep beating). A driver or coordinator that dies stops the beat, and
nothing else would ever end its MLflow run: it would stay RUNNING for good. So whatever looks at
runs next (`workbench cluster status`, `Session.attach`, `workbench sweep`, `workbench compare`)
calls `mark_dead_runs`, which ends every RUNNING run whose folder shows no sign of life for
`STALE_S` seconds:

    beat = Heartbeat(out_dir); beat.start(); ...; beat.stop()      # the coordinator's side
    ended = mark_dead_runs(tracking_uri, experiments=["workbench"])  # [{run_id, name, status, reason}]
    tell_dead_runs(tracking_uri)          # the same, with one line on stderr per run it ended

The status comes from the folder: a `summary.json` written after the last beat says how the run
ended (finished -> FINISHED, stopped -> KILLED, failed -> FAILED); otherwise the run died
(FAILED, with tag `workbench.died` saying since when). A run whose folder this machine cannot see
(a cluster elsewhere) is left alone: no verdict without evidence.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Optional

HEARTBEAT_FILE = "heartbeat"
HEARTBEAT_S = 10.0
STALE_S = 120.0  # 12 missed beats: a loaded machine delays a thread by seconds, not minutes
SIGNS_OF_LIFE = (HEARTBEAT_FILE, "metrics.jsonl", "events.log", "config.json")
ENDED_AS = {"finished": "FINISHED", "stopped": "KILLED", "failed": "FAILED"}


class Heartbeat:
    """Touches OUT/heartbeat every `every` seconds until `stop()`."""

    def __init__(self, out_dir: str | Path, every: float = HEARTBEAT_S):
        self.path = Path(out_dir) / HEARTBEAT_FILE
        self.every = every
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def beat(self) -> None:
        try:
            self.path.write_text(f"{time.time():.3f}\n")
        except OSError:
            pass  # a full disk must not stop training; the run then only looks stale

    def start(self) -> "Heartbeat":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.beat()
        self._thread = threading.Thread(target=self._run, name="workbench-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.every + 1)


def last_sign_of_life(out_dir: str | Path) -> Optional[float]:
    """The newest modification time of the files a live run keeps touching; None if none exists."""
    times = [p.stat().st_mtime for name in SIGNS_OF_LIFE if (p := Path(out_dir) / name).exists()]
    return max(times) if times else None


def ended_status(out_dir: str | Path, last: Optional[float], since: Optional[float] = None) -> Optional[str]:
    """How the run in `out_dir` ended ("finished", "stopped", "failed") when its summary.json was written
    after its last beat `last` (and at or after `since`: an older run's summary in a reused folder is
    not this run's end); None while it has not ended."""
    summary = Path(out_dir) / "summary.json"
    try:
        written = summary.stat().st_mtime
    except OSError:
        return None
    if (last is not None and written < last - HEARTBEAT_S - 1) or (since is not None and written < since):
        return None
    try:
        status = str(json.loads(summary.read_text()).get("status", ""))
    except (OSError, ValueError):  # being written (the engine writes it atomically; a copy may not)
        return None
    return status if status in ENDED_AS else None


def folder_status(out_dir: str | Path, since: Optional[float] = None, pid_gone: bool = False,
                  now: Optional[float] = None) -> tuple[str, Optional[str]]:
    """(status, why) of the run in `out_dir`, from its files alone (a watcher needs no Ray):
    how it ended (summary.json), else "running" while it shows signs of life, else "failed" with why.
    `since`: when the run was started (a reused folder's old summary is ignored); `pid_gone`: its
    driver process is known to be gone (same machine), so no need to wait STALE_S for the verdict."""
    now = time.time() if now is None else now
    last = last_sign_of_life(out_dir)
    ended = ended_status(out_dir, last, since)
    if ended is not None:
        return ended, None
    if pid_gone:
        return "failed", "its driver process is gone and it wrote no summary.json: it died"
    if now - (last if last is not None else (since or now)) < STALE_S:
        return "running", None
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last)) if last is not None else "its start"
    return "failed", f"no sign of life since {when}: its driver or coordinator died"


def verdict(out_dir: str | Path, started_at: float, now: Optional[float] = None) -> Optional[tuple[str, str]]:
    """(MLflow status, reason) for a run that is over although its MLflow run says RUNNING;
    None while it is alive or when this machine cannot see its folder."""
    out = Path(out_dir)
    now = time.time() if now is None else now
    if not out.is_dir():
        return None
    last = last_sign_of_life(out)
    if now - (last if last is not None else started_at) < STALE_S:
        return None
    status = ended_status(out, last)
    if status is not None:
        return ENDED_AS[status], f"ended '{status}' (summary.json) but its MLflow run was never closed"
    if last is None:
        return "FAILED", f"never started: no file in {out} since the MLflow run was created"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last))
    return "FAILED", f"no sign of life since {since}: its driver or coordinator died"


def mark_dead_runs(tracking_uri: Optional[str] = None, experiments: Optional[Iterable[str]] = None,
                   now: Optional[float] = None) -> list[dict[str, Any]]:
    """End every RUNNING workbench run (in `experiments`, or all) whose folder says it is over.
    Returns what was ended; never raises for a store it cannot read (a look, not a duty)."""
    from workbench.tracking.run_tracking import OUT_DIR_TAG
    from workbench.tracking.store import client, resolve_tracking_uri, retry_locked

    try:
        c = client(resolve_tracking_uri(tracking_uri))
        if experiments is None:
            exp_ids = [e.experiment_id for e in retry_locked(c.search_experiments)]
        else:
            exp_ids = [e.experiment_id for name in experiments if (e := retry_locked(c.get_experiment_by_name, name))]
        if not exp_ids:
            return []
        runs = retry_locked(c.search_runs, exp_ids, filter_string="attributes.status = 'RUNNING'", max_results=5000)
    except Exception:  # noqa: BLE001 - an unreachable or empty store has no dead runs to mark
        return []
    ended = []
    for run in runs:
        out_dir = run.data.tags.get(OUT_DIR_TAG)
        if not out_dir:
            continue
        found = verdict(out_dir, run.info.start_time / 1000.0, now)
        if found is None:
            continue
        status, reason = found
        try:
            retry_locked(c.set_tag, run.info.run_id, "workbench.died" if status == "FAILED" else "workbench.closed_late", reason)
            retry_locked(c.set_terminated, run.info.run_id, status=status)
        except Exception:  # noqa: BLE001 - another process may be ending it right now
            continue
        ended.append({"run_id": run.info.run_id, "name": run.info.run_name, "status": status, "reason": reason})
    return ended


def tell_dead_runs(tracking_uri: Optional[str] = None, experiments: Optional[Iterable[str]] = None) -> list[dict[str, Any]]:
    """`mark_dead_runs`, with one line on stderr per run it ended (what callers show the user)."""
    import sys

    ended = mark_dead_runs(tracking_uri, experiments)
    for e in ended:
        print(f"MLflow run {e['name']} ({e['run_id'][:8]}) marked {e['status']}: {e['reason']}", file=sys.stderr)
    return ended
