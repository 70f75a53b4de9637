"""`workbench.Session`: one RL run driven from a notebook (start, watch, fit, forecast, stop).

    import workbench
    s = workbench.Session()                                  # configs/quickstart.yaml (the CPU default)
    s = workbench.Session("configs/my.yaml", recipe="qwen-dapo", overrides={"train.lr": 1e-4})
    print(s.plan(gpus_per_node=8, gpu_memory_gb=80))         # will it fit? (workbench plan)
    s.start(max_steps=200)          # creates the MLflow run, launches the engine on Ray, returns once the engine is up, not when the run ends
    s.dashboard()                   # live widget: points, refitted sigmoid, band, progress, train metrics
    s.wait()                        # blocks (refreshing dashboards); raises RunFailed on failure
    s.curve, s.fit(), s.forecast(budget=1.0), s.chart()      # the run's RunView (workbench.runs.view): read-only
    s.export("policies/mine")       # a checkpoint's policy as a Hugging Face folder (the run leaves <run>/policy)
    s.samples(step=10, passed=False, domain="code", contains="def ")   # kept completions, a DataFrame
    s.pause(); s.resume(); s.stop() # stop() waits for the final checkpoint
    s = Session.attach("my-run")    # by name or run folder: a Session's run after a kernel restart, or a `workbench run`
    s = Session.resume_from("runs/my-run", max_steps=400)    # continue a stopped run from its checkpoint
    s = Session.open("runs/my-run") # a finished run's folder, read-only, without Ray

Session keeps control, constructors and the live config (`cfg`); each other job has one owner.
Finding a run that already exists (attach's three kinds, resume_from's checks): `workbench.session_attach`.
Polling the run's actor (rows, status, a sweep's stop request, the end): `workbench.engine.run.feed.RunFeed`.
Config (defaults, recipe swap, overrides, name, out_dir): `workbench.runs.folder.resolve_config`.
Everything read-only (curve, fit, forecast, chart, status): `session.view`, a RunView (holding a copy
of the config) fed the rows polled from the run's actor. The Ray cluster (outside the kernel):
`workbench.engine.cluster.connect_for_session`. The MLflow run: `workbench.tracking.run_tracking`.
At the run's end (`wait`, `stop`, a dashboard seeing it): `workbench.runs.report.report_run_end`
(fit artifacts in the run folder, fit/* to MLflow).
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from pathlib import Path
from typing import Any

from workbench.engine.failures import RunFailed, show_one_line_in_ipython
from workbench.engine.run.feed import RunFeed
from workbench.errors import UserError, as_number
from workbench.runs.folder import has_checkpoint, resolve_config, with_max_steps
from workbench.runs.view import RunView
from workbench.session_attach import find_for_attach, resumable_config
from workbench.tracking import run_tracking


# In a notebook, a UserError or a failed run (also one raised inside a Ray actor) shows as its one
# line, not as a traceback through the engine; the cell still fails.
show_one_line_in_ipython((UserError, RunFailed))


def _polled(name: str) -> Any:
    """RunView's property or method `name`, read or called after polling the run once."""
    attr = getattr(RunView, name)
    if isinstance(attr, property):
        return property(lambda self: (self._poll(), getattr(self.view, name))[1], doc=attr.__doc__)

    @functools.wraps(attr)  # RunView's signature and docstring
    def call(self: "Session", *args: Any, **kw: Any) -> Any:
        self._poll()
        return attr(self.view, *args, **kw)

    return call


class Session:
    """One RL run driven from a notebook: start, watch, fit, forecast, stop.

        s = workbench.Session("configs/my.yaml", recipe="qwen-dapo", overrides={"train.lr": 1e-4})
        s.start(max_steps=200); s.dashboard(); s.wait()
        s.curve, s.fit(), s.forecast(budget=1.0), s.chart()

    `config`, `recipe`, `overrides` and `name` make the run's config (defaults, YAML, changes);
    `view` (a RunView) holds its rows, polled incrementally. `Session.attach`, `Session.resume_from`
    and `Session.open` give a Session for a run that already exists."""

    def __init__(self, config: str | Path | None = None, *, recipe: str | None = None,
                 overrides: dict[str, Any] | list[str] | None = None, name: str | None = None, tracking: bool = True,
                 experiment: str = "workbench", x: str = "compute/device_hours", tracking_uri: str | None = None,
                 run_id: str | None = None, parent_run_id: str | None = None):
        """`tracking`: log to MLflow (`experiment`, `tracking_uri`); `x`: the curve's compute axis;
        `run_id` logs into an existing MLflow run (a sweep's child)."""
        cfg = resolve_config(config, recipe, overrides, name)
        self._init_state(cfg, RunView(cfg, x=x, run_id=run_id, tracking_uri=tracking_uri), tracking=tracking,
                         experiment=experiment, parent_run_id=parent_run_id)

    def _init_state(self, cfg: Any, view: RunView, *, tracking: bool, experiment: str, parent_run_id: str | None) -> None:
        self._cfg, self.view = cfg, view  # the live config is the session's; the view keeps a copy
        self.tracking, self.experiment, self.parent_run_id = tracking, experiment, parent_run_id
        self.feed: RunFeed | None = None  # the run's handle, polled into the view (engine/run/feed.py) once started
        self._resume, self._finished, self._error = False, False, None  # _error: why the run failed
        self._dashboards: "weakref.WeakSet[Any]" = weakref.WeakSet()

    @property
    def cfg(self) -> Any:
        """The run's config (the live one; the view holds a copy, renewed when this is set)."""
        return self._cfg

    @cfg.setter
    def cfg(self, cfg: Any) -> None:
        self._cfg = cfg
        self.view.use_config(cfg)

    name, out_dir, x = (property(lambda self, k=k: getattr(self.view, k)) for k in ("name", "out_dir", "x"))
    run_id, tracking_uri = (property(lambda self, k=k: getattr(self.view, k)) for k in ("run_id", "tracking_uri"))
    max_steps = property(lambda self: self.view.max_steps, doc="The step target: the config's train.max_steps.")
    handle = property(lambda self: self.feed and self.feed.handle, doc="The run's RunHandle once started (else None).")
    started = property(lambda self: self.feed is not None)
    finished = property(lambda self: self._finished, doc="True once the run has ended and its results are taken (or read-only).")

    def __repr__(self) -> str:
        st = self.view.state.get("status", "not started")
        return f"Session({self.name!r}, status={st!r}, evaluations={len(self.view.evaluations())}, out_dir='{self.out_dir}')"

    # ------------------------------------------------------------------ lifecycle
    def plan(self, *, gpus_per_node: int | None = None, gpu_memory_gb: float | None = None, nodes: int | None = None) -> Any:
        """Will this run fit? The memory plan per device and role (`workbench plan`; print it for the
        table; `.fits`, `.verdict`). Without figures: the connected Ray cluster's, else this host's."""
        from workbench.engine.plan import cluster_shape, plan_for

        return plan_for(self.cfg, cluster_shape(gpus_per_node, gpu_memory_gb, nodes, cfg=self.cfg))

    def start(self, max_steps: int | None = None, max_minutes: float | None = None) -> "Session":
        """Create the MLflow run, launch the engine (a detached, named Ray actor) and return once it answers (the run goes on in the background)."""
        from workbench.engine import cluster, launch

        if self.started:
            raise UserError(f"session '{self.name}' was already started (status: {self.view.state.get('status', '?')}); "
                            "create a new Session for another run, or Session.resume_from() a stopped one")
        if max_steps is not None:  # recorded in the config, so resume_from() continues to the same target
            self.cfg = with_max_steps(self.cfg, max_steps)
        if max_minutes is not None and not as_number("max_minutes", max_minutes) > 0:
            raise UserError(f"max_minutes must be a number of minutes > 0, got {max_minutes!r}")
        if not self._resume and has_checkpoint(self.out_dir):
            raise UserError(f"{self.out_dir} already holds a run with checkpoints: continue it with "
                            f"Session.resume_from('{self.out_dir}') or pick another name")
        self.cfg, created = run_tracking.open_run(self.cfg, experiment=self.experiment, run_id=self.run_id,
                                                  parent_run_id=self.parent_run_id, tracking_uri=self.tracking_uri,
                                                  enabled=self.tracking)
        self.view.run_id, self.view.tracking_uri = self.cfg.tracking.run_id, self.cfg.tracking.tracking_uri
        with run_tracking.failed_if_raises(self.cfg, created):  # the run never started: say so in MLflow
            cluster.connect_for_session(self.cfg)  # a cluster of its own: the run survives a kernel restart
            handle = launch(self.cfg, detached=True, resume=self._resume, build_model=False)
        if self._resume:  # the Coordinator truncated metrics.jsonl to its checkpoint: the curve so far
            self.view.load_rows(self.out_dir / "metrics.jsonl")
        handle.start(max_minutes=max_minutes)  # the engine runs to its config's train.max_steps
        self.feed = RunFeed(handle, self.view)
        self.view.state = {"status": "starting", "step": 0}
        return self

    def _require_live(self, what: str, *, running: bool = True) -> None:
        if not self.started:
            why = "is a read-only view of a run folder (Session.open)" if self._finished else "was not started (call .start())"
            raise UserError(f"cannot {what}: session '{self.name}' {why}")
        if running and (self._finished or self._is_done()):
            raise UserError(f"cannot {what}: run '{self.name}' has ended ({self.view.state.get('status')})")

    def pause(self) -> None:
        """Pause after the trainer step in flight; compute stops counting while paused."""
        self._require_live("pause")
        self.handle.pause()

    def resume(self) -> None:
        """Continue a paused run (to continue a stopped run, use Session.resume_from)."""
        self._require_live("resume")
        self.handle.resume()

    def stop(self, timeout: float | None = 300) -> dict[str, Any]:
        """Stop after the step in flight, wait for the final checkpoint; return the summary (also on an ended run)."""
        self._require_live("stop", running=False)
        if not self._finished and not self._is_done():
            self.handle.stop()
        return self.wait(timeout=timeout)

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> dict[str, Any]:
        """Block until the run ends, refreshing this session's dashboards; return the summary.

        TimeoutError after `timeout` s (the run goes on); RunFailed when it failed. Ctrl-C stops waiting,
        not the run. `await session.wait_async()` keeps the kernel free."""
        for _ in self._until_done(timeout):
            self._poll()
            self._refresh_dashboards()
            time.sleep(poll)
        return self._summary()

    async def wait_async(self, timeout: float | None = None, poll: float = 1.0) -> dict[str, Any]:
        """`await s.wait_async()`: like wait(), but the kernel's event loop (dashboards) keeps running."""
        for _ in self._until_done(timeout):
            self.feed.check_stop()
            await asyncio.sleep(poll)
        return self._summary()

    def _until_done(self, timeout: float | None):
        """Yield until the run has ended (then finish the session); TimeoutError past `timeout` s."""
        self._require_live("wait", running=False)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._finished and not self._is_done():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run '{self.name}' still going after {timeout} s (step {self.view.state.get('step')})")
            yield
        self._finish()

    def update(self) -> list[dict[str, Any]]:
        """Poll once (rows, status, stop requests) and finish the session if the run has ended; return the
        new rows. What a dashboard's update task calls; a no-op on a read-only or finished session."""
        new = self._poll()
        if self.started and not self._finished and self._is_done():
            self._finish()  # a failure is kept in the status (error) and raised by wait()/stop()
        return new

    # ------------------------------------------------------------------ polling
    def _is_done(self) -> bool:
        return self._finished or self.feed.done()

    def _poll(self) -> list[dict[str, Any]]:
        """Fetch new metric rows and the status from the run's actor; return the new rows."""
        return [] if not self.started or self._finished else self.feed.poll()

    def _refresh_dashboards(self) -> None:
        for d in list(self._dashboards):
            d.refresh()

    def _finish(self) -> None:
        """Once, when the run has ended: last rows, summary, fit reported, actor released."""
        from workbench.runs.report import report_run_end

        if self._finished:
            return
        self._error = self.feed.end()  # the last rows, the summary or the failure, into the view
        self._finished = True
        if self.feed.owns_end:  # a run watched from its folder: its own driver reports its end
            report_run_end(self.cfg, self.view.rows, x=self.x, step=int(self.view.state.get("step") or 0),
                           tracked=bool(self.tracking and self.run_id))
        self.handle.kill()  # detached actors outlive the run; its results are on disk and in MLflow
        self._refresh_dashboards()

    def _summary(self) -> dict[str, Any]:
        """The ended run's summary; RunFailed when it failed."""
        if self._error:
            raise RunFailed(self._error)
        return dict(self.view.summary or {})

    # ------------------------------------------------------------------ the view (read-only)
    rows, curve, history = _polled("rows"), _polled("curve"), _polled("history")
    status, fit, forecast, chart = _polled("status"), _polled("fit"), _polled("forecast"), _polled("chart")
    export, samples = _polled("export"), _polled("samples")

    def dashboard(self, budget: float | None = None, *, poll: float = 2.0, fit_from: float | None = None):
        """A live ipywidgets panel (see workbench.widgets.dashboard.Dashboard)."""
        from workbench.widgets.dashboard import Dashboard

        d = Dashboard(self, budget=budget, poll=poll, fit_from=fit_from)
        self._dashboards.add(d)
        return d

    # ------------------------------------------------------------------ reconnect / resume / open
    @classmethod
    def attach(cls, target: str | Path, *, tracking: bool = True, x: str = "compute/device_hours") -> "Session":
        """The run `target`, by its name or its run folder, started by a Session (e.g. before a kernel
        restart) or by `workbench run` in a terminal. A live Session run is controlled through its named
        Ray actor (the recorded cluster, or RAY_ADDRESS); a live `workbench run` is watched from its
        folder with no Ray connection (`stop()` asks its driver to stop; pause/resume are refused); an
        ended run opens read-only (curve, fit, chart). Dropping the session leaves the run going.
        Finding the run and its kind: workbench/session_attach.py."""
        found = find_for_attach(target, tracking=tracking, x=x)
        s = cls._with_view(found.view, tracking=found.tracking)
        s.feed, s._finished = found.feed, found.feed is None  # an ended run: read-only, as Session.open
        s._poll()
        return s

    @classmethod
    def resume_from(cls, target: str | Path, *, max_steps: int | None = None, max_minutes: float | None = None,
                    tracking: bool = True, x: str = "compute/device_hours") -> "Session":
        """Continue a stopped run (out_dir, or name under <project>/runs) from its last checkpoint and start
        it: it keeps its MLflow run (reopened), its curve and, by default, its step target."""
        cfg = resumable_config(target, max_steps)
        s = cls._with_view(RunView(cfg, x=x), tracking=tracking, cfg=cfg)
        s._resume = True
        return s.start(max_steps=max_steps, max_minutes=max_minutes)

    @classmethod
    def open(cls, target: str | Path, *, x: str = "compute/device_hours") -> "Session":
        """A read-only session over a run folder (out_dir or name): its `view` is RunView.open(target). Needs no Ray."""
        s = cls._with_view(RunView.open(target, x=x), tracking=False)
        s._finished = True
        return s

    @classmethod
    def _with_view(cls, view: RunView, *, tracking: bool, cfg: Any = None) -> "Session":
        """A session over `view`; its live config is `cfg` (default: a copy of the view's)."""
        cfg = view.cfg if cfg is None else cfg
        tr = cfg.tracking
        view.run_id, view.tracking_uri = tr.run_id, tr.tracking_uri
        s = cls.__new__(cls)
        s._init_state(cfg, view, tracking=tracking and tr.mlflow and bool(tr.run_id), experiment=tr.experiment,
                      parent_run_id=tr.parent_run_id)
        return s
