"""`workbench.Session`: one RL run driven from a notebook (start, watch, fit, forecast, stop).

    import workbench
    s = workbench.Session()                                  # configs/quickstart.yaml (the CPU default)
    s = workbench.Session("configs/my.yaml", recipe="qwen-dapo", overrides={"train.lr": 1e-4})
    s.start(max_steps=200)          # creates the MLflow run, launches the engine on Ray, returns at once
    s.dashboard()                   # live widget: points, refitted sigmoid, band, progress, train metrics
    s.wait()                        # blocks (refreshing dashboards); raises RunFailed on failure
    s.curve, s.fit(), s.forecast(budget=1.0), s.chart()      # the run's RunView (workbench.runs.view): read-only
    s.pause(); s.resume(); s.stop() # stop() waits for the final checkpoint
    s = Session.attach("my-run")    # after a kernel restart (needs a Ray cluster outside the kernel)
    s = Session.resume_from("runs/my-run", max_steps=400)    # continue a stopped run from its checkpoint

Defaults: with neither `config` nor `recipe`, the project's configs/quickstart.yaml is used (the
built-in dataclass defaults when that file is not found, e.g. a non-editable install); `recipe`
alone means quickstart.yaml with that recipe preset. `recipe` swaps the preset but keeps the
config file's own recipe adjustments where the new preset leaves them as the old one did (see
`workbench.runs.folder.swap_recipe`): `recipe="scalerl-loo-no-fp32"` on quickstart.yaml keeps its
length_control. A run is named `<config name>-<time>-<4 hex>` unless `name` is given, and writes
to `<project>/runs/<name>` (project = the folder holding pyproject.toml or .git, as for the
MLflow store) unless the config sets `out_dir`. A fresh start refuses a folder that already holds
checkpoints: `resume_from` continues it. `Session.open(folder)` views a finished run without Ray.

Control and view are split: this class starts and steers the run and polls its rows into
`session.view`, a `workbench.runs.view.RunView` that owns everything read-only (curve, history,
fit, forecast, chart, status); sweeps, `compare` and the dashboard read views. The step target
is the config's `train.max_steps` (`start(max_steps=...)` writes it there). Stop requests: when
the file named by $WORKBENCH_STOP_REQUEST appears (a sweep stopping a loser), the session stops
its run after the step in flight, with a checkpoint, and prints the file's text (the reason).
Ray: the run lives on a local cluster outside the kernel, stopped when the last process using it
exits with no run going (workbench.engine.cluster; `workbench cluster status|stop`).

MLflow (tracking=True): `start()` creates the experiment and the run in this process (SQLite
stores must not be created by several processes at once), or uses `run_id` when a sweep passes
one; the engine's Coordinator logs every metric to it. When the run ends (`wait`, `stop`, or a
dashboard seeing the end) the session fits the curve and logs fit/A, fit/B, fit/C_mid with
fit/*_lo, fit/*_hi, fit/r2, fit/n, and artifacts fit/fit.json, fit/fit.html, fit/fit.png (also
written to <out_dir>/fit/). The detached Ray actor is then released.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import weakref
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from workbench.config import RunConfig, load_run_config
from workbench.errors import UserError
from workbench.runs.view import TERMINAL, RunView, check_x, folder_config
from workbench.runs.folder import (
    default_config_path, open_mlflow_run, override_items, run_folder, saved_config, swap_recipe, unique_name,
)  # fmt: skip

STOP_REQUEST_ENV = "WORKBENCH_STOP_REQUEST"  # path of a file whose appearance asks the run to stop


class Session:
    """One run: see the module docstring. `view` (a RunView) holds its rows, polled incrementally."""

    def __init__(self, config: str | Path | None = None, *, recipe: str | None = None,
                 overrides: dict[str, Any] | list[str] | None = None, name: str | None = None, tracking: bool = True,
                 experiment: str = "workbench", x: str = "compute/device_hours", tracking_uri: str | None = None,
                 run_id: str | None = None, parent_run_id: str | None = None):
        """See the module docstring; `run_id` logs into an existing MLflow run (a sweep's child)."""
        check_x(x)
        items = override_items(overrides)
        if config is None:
            config = default_config_path()
        elif not Path(config).is_file():
            raise UserError(f"config file not found: {config}")
        if recipe is not None:
            from workbench.configtools import load_yaml

            items["recipe"] = swap_recipe(load_yaml(config).get("recipe") if config else None, recipe)
        cfg = load_run_config(config, items)
        if name is not None:
            if not str(name).strip() or "/" in str(name):
                raise UserError(f"run name {name!r} must be non-empty and contain no '/'")
            cfg = dataclasses.replace(cfg, name=str(name))
        else:
            cfg = dataclasses.replace(cfg, name=unique_name(cfg.name))
        if cfg.out_dir is None:
            from workbench.tracking.store import project_root

            cfg = dataclasses.replace(cfg, out_dir=str(project_root() / "runs" / cfg.name))
        self._init_state(RunView(cfg, x=x, run_id=run_id, tracking_uri=tracking_uri), tracking=tracking,
                         experiment=experiment, parent_run_id=parent_run_id)

    def _init_state(self, view: RunView, *, tracking: bool, experiment: str, parent_run_id: str | None) -> None:
        self.view = view
        self.tracking, self.experiment, self.parent_run_id = tracking, experiment, parent_run_id
        self.handle: Any = None  # workbench.engine.run.launch.RunHandle once started
        self._seen = 0  # rows already taken from the actor (its list restarts at a resume)
        self._resume = False
        self._error: Optional[str] = None
        self._finished = False
        self._stop_requested = False
        self._dashboards: "weakref.WeakSet[Any]" = weakref.WeakSet()

    # ------------------------------------------------------------------ properties
    @property
    def cfg(self) -> RunConfig:
        return self.view.cfg

    @cfg.setter
    def cfg(self, cfg: RunConfig) -> None:
        self.view.cfg = cfg

    name = property(lambda self: self.view.name)
    out_dir = property(lambda self: self.view.out_dir)
    max_steps = property(lambda self: self.view.max_steps, doc="The step target: the config's train.max_steps.")
    x = property(lambda self: self.view.x)

    @property
    def run_id(self) -> str | None:
        return self.view.run_id

    @property
    def tracking_uri(self) -> str | None:
        return self.view.tracking_uri

    @property
    def started(self) -> bool:
        return self.handle is not None

    @property
    def finished(self) -> bool:
        """True once the run has ended and the session has taken its results (or for a read-only view)."""
        return self._finished

    def __repr__(self) -> str:
        st = self.view.state.get("status", "not started")
        return f"Session({self.name!r}, status={st!r}, evaluations={len(self.view.evaluations())}, out_dir='{self.out_dir}')"

    # ------------------------------------------------------------------ lifecycle
    def start(self, max_steps: int | None = None, max_minutes: float | None = None) -> "Session":
        """Create the MLflow run, launch the engine (a detached, named Ray actor) and return at once."""
        from workbench.engine import cluster
        from workbench.engine.run.launch import launch, required_resources

        if self.started:
            raise UserError(
                f"session '{self.name}' was already started (status: {self.view.state.get('status', '?')}); "
                "create a new Session for another run, or Session.resume_from() a stopped one"
            )
        if max_steps is not None:
            if int(max_steps) < 1:
                raise UserError(f"max_steps must be >= 1, got {max_steps}")
            # recorded in the config (its one owner), so resume_from() continues to the same target
            self.cfg = dataclasses.replace(self.cfg, train=dataclasses.replace(self.cfg.train, max_steps=int(max_steps)))
        if max_minutes is not None and not max_minutes > 0:
            raise UserError(f"max_minutes must be > 0, got {max_minutes}")
        ckpt = self.out_dir / "checkpoints" / "LATEST"
        if not self._resume and ckpt.exists():
            raise UserError(
                f"{self.out_dir} already holds a run with checkpoints: continue it with "
                f"Session.resume_from('{self.out_dir}') or pick another name"
            )
        created = self._open_mlflow_run()
        try:
            # a cluster of its own, not the kernel's: the run then survives a kernel restart
            need = required_resources(self.cfg)
            address = cluster.connect(
                num_cpus=max(os.cpu_count() or 1, math.ceil(need["CPU"])),
                num_gpus=self.cfg.resources.num_gpus,
                address=self.cfg.resources.ray_address,
            )
            cluster.hold(address)  # released (and stopped if idle) when this process exits
            handle = launch(self.cfg, detached=True, resume=self._resume, build_model=False)
        except BaseException:
            if created:  # the run never started: say so in MLflow
                from workbench.tracking.store import end_run

                end_run(self.run_id, "FAILED", self.tracking_uri)
            raise
        if self._resume:
            # the Coordinator truncated metrics.jsonl to its checkpoint: that is the curve so far
            from workbench.tracking.sink import read_jsonl

            self.view._rows = read_jsonl(self.out_dir / "metrics.jsonl")
        handle.start(max_minutes=max_minutes)  # the engine runs to its config's train.max_steps
        self.handle = handle
        self.view.state = {"status": "starting", "step": 0}
        return self

    def _open_mlflow_run(self) -> bool:
        """Set cfg.tracking to log into an MLflow run; True when this call created the run."""
        if not self.tracking:
            self.cfg = dataclasses.replace(self.cfg, tracking=dataclasses.replace(self.cfg.tracking, mlflow=False))
            return False
        run_id, uri, created = open_mlflow_run(
            self.name, self.out_dir, experiment=self.experiment, run_id=self.run_id,
            parent_run_id=self.parent_run_id, tracking_uri=self.tracking_uri or self.cfg.tracking.tracking_uri,
        )  # fmt: skip
        self.view.run_id, self.view.tracking_uri = run_id, uri
        tr = dataclasses.replace(self.cfg.tracking, mlflow=True, run_id=run_id, tracking_uri=uri,
                                 experiment=self.experiment, parent_run_id=self.parent_run_id)
        self.cfg = dataclasses.replace(self.cfg, tracking=tr)
        return created

    def _require_started(self, what: str) -> None:
        if not self.started and self._finished:
            raise UserError(f"cannot {what}: session '{self.name}' is a read-only view of a run folder (Session.open)")
        if not self.started:
            raise UserError(f"cannot {what}: session '{self.name}' was not started (call .start())")

    def pause(self) -> None:
        """Pause after the trainer step in flight; compute stops counting while paused."""
        self._require_live("pause")
        self.handle.pause()

    def resume(self) -> None:
        """Continue a paused run (to continue a stopped run, use Session.resume_from)."""
        self._require_live("resume")
        self.handle.resume()

    def _require_live(self, what: str) -> None:
        self._require_started(what)
        if self._finished or self._is_done():
            raise UserError(f"cannot {what}: run '{self.name}' has ended ({self.view.state.get('status')})")

    def stop(self, timeout: float | None = 300) -> dict[str, Any]:
        """Stop after the step in flight, wait for the final checkpoint; return the summary.

        On a run that already ended this just returns its summary.
        """
        self._require_started("stop")
        if not self._finished:
            if not self._is_done():
                self.handle.stop()
            return self.wait(timeout=timeout)
        if self._error:
            from workbench.engine.run.coordinator import RunFailed

            raise RunFailed(self._error)
        return dict(self.view.summary or {})

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> dict[str, Any]:
        """Block until the run ends, refreshing this session's dashboards; return the summary.

        Raises TimeoutError after `timeout` seconds (the run goes on) and RunFailed when the run
        failed. Ctrl-C (interrupt the kernel) stops waiting, not the run. In a notebook,
        `await session.wait_async()` keeps the kernel free instead.
        """
        self._require_started("wait")
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._finished and not self._is_done():
            self._poll()
            self._refresh_dashboards()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run '{self.name}' still going after {timeout} s (step {self.view.state.get('step')})")
            time.sleep(poll)
        return self._finish()

    async def wait_async(self, timeout: float | None = None, poll: float = 1.0) -> dict[str, Any]:
        """`await s.wait_async()`: like wait(), but the kernel's event loop (dashboards) keeps running."""
        import asyncio

        self._require_started("wait")
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._finished and not self._is_done():
            self._check_stop_request()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run '{self.name}' still going after {timeout} s")
            await asyncio.sleep(poll)
        return self._finish()

    def update(self) -> list[dict[str, Any]]:
        """Poll the run once (new rows into the view, status, stop requests); when it has ended,
        finish the session (summary, fit logged, actor released). Returns the new rows.
        What a dashboard's update task calls; a no-op on a read-only or finished session."""
        if not self.started or self._finished:
            return []
        new = self._poll()
        if self._is_done():
            from workbench.engine.run.coordinator import RunFailed

            try:
                self._finish()
            except RunFailed:
                pass  # kept in the status (error) and raised by wait()/stop()
        return new

    # ------------------------------------------------------------------ polling
    def _is_done(self) -> bool:
        if self._finished:
            return True
        if self.handle.run_ref is not None:
            return self.handle.done()
        # attached: this process did not submit run(); ask the actor
        try:
            st = self.handle.status()
        except Exception:  # noqa: BLE001 - the actor is gone: the run is over
            return True
        self.view.state = st
        return st.get("status") in TERMINAL

    def _poll(self) -> list[dict[str, Any]]:
        """Fetch new metric rows and the status from the run's actor; return the new rows."""
        if not self.started or self._finished:
            return []
        self._check_stop_request()
        try:
            new = self.handle.metrics(self._seen)
            self.view.state = self.handle.status()
        except Exception:  # noqa: BLE001 - actor gone (run ended or died): _finish reports it
            return []
        self._seen += len(new)
        self.view.extend(new)
        return new

    def _check_stop_request(self) -> None:
        """Honour a stop request file ($WORKBENCH_STOP_REQUEST): stop after the step in flight, once."""
        path = os.environ.get(STOP_REQUEST_ENV)
        if self._stop_requested or not path or not os.path.exists(path):
            return
        self._stop_requested = True
        try:
            reason = Path(path).read_text().strip()
        except OSError:
            reason = ""
        print(f"workbench: stop requested for run '{self.name}'" + (f": {reason}" if reason else ""), flush=True)
        try:
            self.handle.stop()
        except Exception:  # noqa: BLE001 - the run has ended already
            pass

    def _refresh_dashboards(self) -> None:
        for d in list(self._dashboards):
            d.refresh()

    def _finish(self) -> dict[str, Any]:
        """Once, when the run has ended: last rows, summary, fit logged to MLflow, actor released."""
        from workbench.engine.run.coordinator import RunFailed

        if not self._finished:
            self._poll()
            try:
                self.view.summary = self._result()
            except RunFailed as e:
                self._error = str(e)
            self._finished = True
            summary = self.view.summary or {}
            status = summary.get("status") or ("failed" if self._error else "finished")
            self.view.state = {**self.view.state, "status": status, "error": self._error}
            if summary:
                self.view.state["step"] = summary.get("steps", self.view.state.get("step"))
            self._log_fit()
            self.handle.kill()  # detached actors outlive the run; its results are on disk and in MLflow
            self._refresh_dashboards()
        if self._error:
            raise RunFailed(self._error)
        return dict(self.view.summary or {})

    def _result(self) -> dict[str, Any]:
        import json

        from workbench.engine.run.coordinator import RunFailed

        if self.handle.run_ref is not None:
            return self.handle.wait()
        st = self.view.state
        if st.get("status") == "failed":
            raise RunFailed(st.get("error") or "the run failed")
        path = self.out_dir / "summary.json"
        for _ in range(100):  # the status turns final just before summary.json is written
            if path.is_file():
                return json.loads(path.read_text())
            time.sleep(0.1)
        return {"status": st.get("status"), "steps": st.get("step")}

    # ------------------------------------------------------------------ the view (read-only)
    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every metric row so far (train steps and evaluations), oldest first."""
        self._poll()
        return self.view.rows

    @property
    def curve(self) -> pd.DataFrame:
        """Evaluations: step, compute_device_hours, compute_flops, val_pass_rate, val_pass_rate_se (RunView.curve)."""
        self._poll()
        return self.view.curve

    @property
    def history(self) -> pd.DataFrame:
        """Train-step rows (train/*, time/*, compute/*, ...) as a DataFrame indexed by step."""
        self._poll()
        return self.view.history

    def status(self) -> dict[str, Any]:
        """The engine's status (status, step, max_steps, error, out_dir, compute/...) plus the session's."""
        self._poll()
        return self.view.status()

    def fit(self, x: str | None = None, fit_from: float | None = None, n_boot: int = 200):
        """RunView.fit on the evaluations so far (polled first)."""
        self._poll()
        return self.view.fit(x, fit_from, n_boot)

    def forecast(self, budget: float, *, x: str | None = None, fit_from: float | None = None, level: float = 0.95,
                 min_gain: float = 0.01) -> dict[str, Any]:
        """RunView.forecast: pass rate, band and scaling-gain verdict at compute `budget`."""
        self._poll()
        return self.view.forecast(budget, x=x, fit_from=fit_from, level=level, min_gain=min_gain)

    def chart(self, budget: float | None = None, *, fit_from: float | None = None):
        """RunView.chart: the dashboard's chart as an Altair chart."""
        self._poll()
        return self.view.chart(budget, fit_from=fit_from)

    def _log_fit(self) -> None:
        """At run end: fit JSON/HTML/PNG into <out_dir>/fit/ and, with tracking, fit/* to MLflow."""
        from workbench.runs.forecast import log_fit, write_fit_artifacts

        sink = None
        if self.tracking and self.run_id:
            from workbench.tracking.mlflow_sink import MlflowSink

            sink = MlflowSink(self.run_id, self.tracking_uri)
        try:
            fit = self.view.fit(None, None, 200)
        except (UserError, ValueError, RuntimeError) as e:
            if sink is not None:
                sink.set_tags({"workbench.fit_error": str(e)})
            return
        paths = write_fit_artifacts(fit, self.out_dir / "fit", title=f"{self.name}: val/pass_rate vs {self.x}", x=self.x)
        if sink is not None:
            log_fit(sink, fit, paths, step=int(self.view.state.get("step") or 0), x=self.x)

    # ------------------------------------------------------------------ widgets
    def dashboard(self, budget: float | None = None, *, poll: float = 2.0, fit_from: float | None = None):
        """A live ipywidgets panel (see workbench.widgets.dashboard.Dashboard)."""
        from workbench.widgets.dashboard import Dashboard

        d = Dashboard(self, budget=budget, poll=poll, fit_from=fit_from)
        self._dashboards.add(d)
        return d

    # ------------------------------------------------------------------ reconnect / resume
    @classmethod
    def attach(cls, name: str, *, tracking: bool = True, x: str = "compute/device_hours") -> "Session":
        """Reconnect to the live run `name` (e.g. after a kernel restart).

        Sessions run on a local Ray cluster of their own that outlives the kernel (see
        workbench.engine.cluster); attach finds it through its recorded address, or RAY_ADDRESS.
        """
        from workbench.engine import cluster
        from workbench.engine.run import launch as L

        cluster.hold(cluster.connect(start_if_missing=False))
        handle = L.attach(name)
        st = handle.status()
        out = Path(st["out_dir"])
        cfg = saved_config(out) or dataclasses.replace(RunConfig(), name=name, out_dir=str(out))
        if st.get("max_steps") and int(st["max_steps"]) != cfg.train.max_steps:  # the engine's target wins
            cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=int(st["max_steps"])))
        s = cls._with_view(RunView(cfg, x=x), tracking=tracking)
        s.handle = handle
        if st.get("resumed_from") is not None:  # the actor holds only rows since its resume
            from workbench.tracking.sink import read_jsonl

            s.view._rows = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("step", 0) <= st["resumed_from"]]
        s.view.state = st
        s._poll()
        return s

    @classmethod
    def resume_from(cls, target: str | Path, *, max_steps: int | None = None, max_minutes: float | None = None,
                    tracking: bool = True, x: str = "compute/device_hours") -> "Session":
        """Continue a stopped run from its last checkpoint and start it; `target` is its out_dir or name.

        A name is looked up as <project>/runs/<name>. The run keeps its MLflow run (reopened) and
        its curve; max_steps defaults to the run's own target.
        """
        path = run_folder(target)
        if not (path / "checkpoints" / "LATEST").is_file():
            raise UserError(f"{path} has no checkpoint: nothing to resume from")
        s = cls._with_view(RunView(folder_config(path), x=x), tracking=tracking)
        s._resume = True
        return s.start(max_steps=max_steps, max_minutes=max_minutes)

    @classmethod
    def open(cls, target: str | Path, *, x: str = "compute/device_hours") -> "Session":
        """A read-only session over a run folder (out_dir or name): its `view` is RunView.open(target).

        Needs no Ray; the rows are read from metrics.jsonl once."""
        s = cls._with_view(RunView.open(target, x=x), tracking=False)
        s._finished = True
        return s

    @classmethod
    def _with_view(cls, view: RunView, *, tracking: bool) -> "Session":
        tr = view.cfg.tracking
        view.run_id, view.tracking_uri = tr.run_id, tr.tracking_uri
        s = cls.__new__(cls)
        s._init_state(view, tracking=tracking and tr.mlflow and bool(tr.run_id), experiment=tr.experiment,
                      parent_run_id=tr.parent_run_id)
        return s
