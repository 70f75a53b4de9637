"""A live run's feed, for the driver that watches it (`workbench.Session`): the rows and status
polled from the run's actor into its RunView, a sweep's stop request acted on (a `StopWatch`,
workbench.runs.stop_request), and the run's end taken once (its summary, or its failure's line).

    feed = RunFeed(handle, view)    # handle: launch()'s RunHandle, or attach()'s
    feed.poll(); feed.done(); error = feed.end()
"""

from __future__ import annotations

from typing import Any, Optional

from workbench.engine.failures import RunFailed
from workbench.runs.folder import read_summary
from workbench.runs.stop_request import StopWatch
from workbench.runs.view import TERMINAL, RunView


class RunFeed:
    """Feeds `view` from the run behind `handle` (a RunHandle)."""

    owns_end = True  # the Session reports the run's end (fit artifacts, MLflow); a folder watcher does not (runs/follow.py)

    def __init__(self, handle: Any, view: RunView):
        self.handle, self.view = handle, view
        self.seen = 0  # rows already taken from the actor (its list restarts at a resume)
        self.stop_watch = StopWatch()  # a sweep's stop request

    def check_stop(self) -> None:
        """Stop the run once, after the step in flight, if a sweep asked for it."""
        self.stop_watch.check(self.view.name, self.handle.stop)

    def done(self) -> bool:
        """Has the run ended? A feed whose process did not submit run() (attached) asks the actor."""
        if self.handle.run_ref is not None:
            return self.handle.done()
        try:
            self.view.state = self.handle.status()
        except Exception:  # noqa: BLE001 - the actor is gone: the run is over
            return True
        return self.view.state.get("status") in TERMINAL

    def poll(self) -> list[dict[str, Any]]:
        """Fetch new metric rows and the status from the run's actor into the view; return the new rows."""
        self.check_stop()
        try:
            new = self.handle.metrics(self.seen)
            self.view.state = self.handle.status()
        except Exception:  # noqa: BLE001 - actor gone (run ended or died): end() reports it
            return []
        self.seen += len(new)
        self.view.extend(new)
        return new

    def end(self) -> Optional[str]:
        """Once the run has ended: the last rows, and its summary (or failure) into the view; returns
        why it failed, or None. The actor is left alive (the caller kills it once it is done)."""
        self.poll()
        st, summary, error = self.view.state, None, None
        if self.handle.run_ref is not None:
            try:
                summary = self.handle.wait()
            except RunFailed as e:
                error = str(e)
        elif st.get("status") == "failed":  # attached: this process did not submit run()
            error = st.get("error") or "the run failed"
        else:
            summary = read_summary(self.view.out_dir, wait=10.0) or {"status": st.get("status"), "steps": st.get("step")}
        self.view.end(summary, error)
        return error
