"""`workbench.Session`: one RL run driven from a notebook (start, watch, fit, forecast, stop).

    import workbench
    s = workbench.Session()                                  # configs/quickstart.yaml (the CPU default)
    s = workbench.Session("configs/my.yaml", recipe="qwen-dapo", overrides={"train.lr": 1e-4})
    s.start(max_steps=200)          # creates the MLflow run, launches the engine on Ray, returns at once
    s.dashboard()                   # live widget: points, refitted sigmoid, band, progress, train metrics
    s.wait()                        # blocks (refreshing dashboards); raises RunFailed on failure
    s.curve                         # DataFrame: step, compute_device_hours, compute_flops, val_pass_rate, val_pass_rate_se
    s.fit()                         # workbench.scaling.SigmoidFit of val/pass_rate vs `x`
    s.forecast(budget=1.0)          # predicted pass rate, 95% band and scaling-gain verdict at that compute
    s.pause(); s.resume(); s.stop() # stop() waits for the final checkpoint
    s = Session.attach("my-run")    # after a kernel restart (needs a Ray cluster outside the kernel)
    s = Session.resume_from("runs/my-run", max_steps=400)    # continue a stopped run from its checkpoint

Defaults: with neither `config` nor `recipe`, the project's configs/quickstart.yaml is used (the
built-in dataclass defaults when that file is not found, e.g. a non-editable install); `recipe`
alone means quickstart.yaml with that recipe preset. `recipe` swaps the preset but keeps the
config file's own recipe adjustments where the new preset leaves them as the old one did (see
`workbench.widgets.runs.swap_recipe`): `recipe="scalerl-loo-no-fp32"` on quickstart.yaml keeps its
length_control. A run is named `<config name>-<time>-<4 hex>` unless `name` is given, and writes
to `<project>/runs/<name>` (project = the folder holding pyproject.toml or .git, as for the
MLflow store) unless the config sets `out_dir`. A fresh start refuses a folder that already holds
checkpoints: `resume_from` continues it. `Session.open(folder)` views a finished run without Ray.

MLflow (tracking=True): `start()` creates the experiment and the run in this process (SQLite
stores must not be created by several processes at once), or uses `run_id` when a sweep passes
one; the engine's Coordinator logs every metric to it. When the run ends (`wait`, `stop`, or a
dashboard seeing the end) the session fits the curve and logs fit/A, fit/B, fit/C_mid with
fit/*_lo, fit/*_hi, fit/r2, fit/n, and artifacts fit/fit.json, fit/fit.html, fit/fit.png (also
written to <out_dir>/fit/). The detached Ray actor is then released.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import weakref
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from workbench.config import RunConfig, load_run_config
from workbench.errors import UserError
from workbench.widgets.runs import (
    default_config_path, open_mlflow_run, override_items, run_folder, saved_config, swap_recipe, unique_name,
)  # fmt: skip

EVAL_KEY = "val/pass_rate"
CURVE_COLUMNS = ["step", "compute_device_hours", "compute_flops", "val_pass_rate", "val_pass_rate_se"]
# metric key -> curve column; `x` may be any of these keys
X_COLUMNS = {"compute/device_hours": "compute_device_hours", "compute/flops": "compute_flops", "step": "step"}
TERMINAL = ("finished", "stopped", "failed")
MIN_EVALS = 4  # workbench.scaling.sigmoid.MIN_POINTS


class Session:
    """One run: see the module docstring. Metric rows are kept here, polled incrementally."""

    def __init__(self, config: str | Path | None = None, *, recipe: str | None = None,
                 overrides: dict[str, Any] | list[str] | None = None, name: str | None = None, tracking: bool = True,
                 experiment: str = "workbench", x: str = "compute/device_hours", tracking_uri: str | None = None,
                 run_id: str | None = None, parent_run_id: str | None = None):
        """See the module docstring; `run_id` logs into an existing MLflow run (a sweep's child)."""
        if x not in X_COLUMNS:
            raise UserError(f"x must be one of {list(X_COLUMNS)}, not {x!r}")
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
        self._init_state(cfg, tracking=tracking, experiment=experiment, x=x, tracking_uri=tracking_uri,
                         run_id=run_id, parent_run_id=parent_run_id)

    def _init_state(self, cfg: RunConfig, *, tracking: bool, experiment: str, x: str, tracking_uri: str | None,
                    run_id: str | None, parent_run_id: str | None) -> None:
        self.cfg, self.tracking, self.experiment, self.x = cfg, tracking, experiment, x
        self.tracking_uri, self.run_id, self.parent_run_id = tracking_uri, run_id, parent_run_id
        self.handle: Any = None  # workbench.engine.launch.RunHandle once started
        self.max_steps = cfg.train.max_steps
        self._rows: list[dict[str, Any]] = []
        self._seen = 0  # rows already taken from the actor (its list restarts at a resume)
        self._resume = False
        self._last_status: dict[str, Any] = {}
        self._summary: Optional[dict[str, Any]] = None
        self._error: Optional[str] = None
        self._finished = False
        self._fit_cache: dict[tuple, Any] = {}
        self._dashboards: "weakref.WeakSet[Any]" = weakref.WeakSet()

    # ------------------------------------------------------------------ properties
    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def out_dir(self) -> Path:
        return Path(self.cfg.out_dir or f"runs/{self.cfg.name}")

    @property
    def started(self) -> bool:
        return self.handle is not None

    def __repr__(self) -> str:
        st = self._last_status.get("status", "not started")
        return f"Session({self.name!r}, status={st!r}, evaluations={len(self._evals())}, out_dir='{self.out_dir}')"

    # ------------------------------------------------------------------ lifecycle
    def start(self, max_steps: int | None = None, max_minutes: float | None = None) -> "Session":
        """Create the MLflow run, launch the engine (a detached, named Ray actor) and return at once."""
        from workbench.engine import cluster
        from workbench.engine.launch import launch, required_resources

        if self.started:
            raise UserError(
                f"session '{self.name}' was already started (status: {self._last_status.get('status', '?')}); "
                "create a new Session for another run, or Session.resume_from() a stopped one"
            )
        if max_steps is not None:
            if int(max_steps) < 1:
                raise UserError(f"max_steps must be >= 1, got {max_steps}")
            # recorded in the config, so resume_from() continues to the same target
            self.cfg = dataclasses.replace(self.cfg, train=dataclasses.replace(self.cfg.train, max_steps=int(max_steps)))
        if max_minutes is not None and not max_minutes > 0:
            raise UserError(f"max_minutes must be > 0, got {max_minutes}")
        self.max_steps = self.cfg.train.max_steps
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
            cluster.connect(
                num_cpus=max(os.cpu_count() or 1, math.ceil(need["CPU"])),
                num_gpus=self.cfg.resources.num_gpus,
                address=self.cfg.resources.ray_address,
            )
            handle = launch(self.cfg, detached=True, resume=self._resume, build_model=False)
        except BaseException:
            if created:  # the run never started: say so in MLflow
                from workbench.tracking.store import end_run

                end_run(self.run_id, "FAILED", self.tracking_uri)
            raise
        if self._resume:
            # the Coordinator truncated metrics.jsonl to its checkpoint: that is the curve so far
            from workbench.tracking.sink import read_jsonl

            self._rows = read_jsonl(self.out_dir / "metrics.jsonl")
        handle.start(self.max_steps, max_minutes)
        self.handle = handle
        self._last_status = {"status": "starting", "step": 0, "max_steps": self.max_steps}
        return self

    def _open_mlflow_run(self) -> bool:
        """Set cfg.tracking to log into an MLflow run; True when this call created the run."""
        if not self.tracking:
            self.cfg = dataclasses.replace(self.cfg, tracking=dataclasses.replace(self.cfg.tracking, mlflow=False))
            return False
        self.run_id, self.tracking_uri, created = open_mlflow_run(
            self.name, self.out_dir, experiment=self.experiment, run_id=self.run_id,
            parent_run_id=self.parent_run_id, tracking_uri=self.tracking_uri or self.cfg.tracking.tracking_uri,
        )  # fmt: skip
        tr = dataclasses.replace(self.cfg.tracking, mlflow=True, run_id=self.run_id, tracking_uri=self.tracking_uri,
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
            raise UserError(f"cannot {what}: run '{self.name}' has ended ({self._last_status.get('status')})")

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
            from workbench.engine.coordinator import RunFailed

            raise RunFailed(self._error)
        return dict(self._summary or {})

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
                raise TimeoutError(f"run '{self.name}' still going after {timeout} s (step {self._last_status.get('step')})")
            time.sleep(poll)
        return self._finish()

    async def wait_async(self, timeout: float | None = None, poll: float = 1.0) -> dict[str, Any]:
        """`await s.wait_async()`: like wait(), but the kernel's event loop (dashboards) keeps running."""
        import asyncio

        self._require_started("wait")
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._finished and not self._is_done():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run '{self.name}' still going after {timeout} s")
            await asyncio.sleep(poll)
        return self._finish()

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
        self._last_status = st
        return st.get("status") in TERMINAL

    def _poll(self) -> list[dict[str, Any]]:
        """Fetch new metric rows and the status from the run's actor; return the new rows."""
        if not self.started or self._finished:
            return []
        try:
            new = self.handle.metrics(self._seen)
            self._last_status = self.handle.status()
        except Exception:  # noqa: BLE001 - actor gone (run ended or died): _finish reports it
            return []
        self._seen += len(new)
        self._rows.extend(new)
        return new

    def _refresh_dashboards(self) -> None:
        for d in list(self._dashboards):
            d.refresh()

    def _finish(self) -> dict[str, Any]:
        """Once, when the run has ended: last rows, summary, fit logged to MLflow, actor released."""
        from workbench.engine.coordinator import RunFailed

        if not self._finished:
            self._poll()
            try:
                self._summary = self._result()
            except RunFailed as e:
                self._error = str(e)
            self._finished = True
            status = (self._summary or {}).get("status") or ("failed" if self._error else "finished")
            self._last_status = {**self._last_status, "status": status, "error": self._error}
            if self._summary:
                self._last_status["step"] = self._summary.get("steps", self._last_status.get("step"))
            self._log_fit()
            self.handle.kill()  # detached actors outlive the run; its results are on disk and in MLflow
            self._refresh_dashboards()
        if self._error:
            raise RunFailed(self._error)
        return dict(self._summary or {})

    def _result(self) -> dict[str, Any]:
        from workbench.engine.coordinator import RunFailed

        if self.handle.run_ref is not None:
            return self.handle.wait()
        st = self._last_status
        if st.get("status") == "failed":
            raise RunFailed(st.get("error") or "the run failed")
        path = self.out_dir / "summary.json"
        for _ in range(100):  # the status turns final just before summary.json is written
            if path.is_file():
                return json.loads(path.read_text())
            time.sleep(0.1)
        return {"status": st.get("status"), "steps": st.get("step")}

    # ------------------------------------------------------------------ data
    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every metric row so far (train steps and evaluations), oldest first."""
        self._poll()
        return list(self._rows)

    def _evals(self) -> list[dict[str, Any]]:
        return [r for r in self._rows if r.get(EVAL_KEY) is not None]

    @property
    def curve(self) -> pd.DataFrame:
        """Evaluations: step, compute_device_hours, compute_flops, val_pass_rate, val_pass_rate_se."""
        self._poll()
        return self._curve_frame()

    def _curve_frame(self) -> pd.DataFrame:
        data = [
            {
                "step": int(r["step"]),
                "compute_device_hours": float(r.get("compute/device_hours", math.nan)),
                "compute_flops": float(r.get("compute/flops", math.nan)),
                "val_pass_rate": float(r[EVAL_KEY]),
                "val_pass_rate_se": float(r.get("val/pass_rate_se") if r.get("val/pass_rate_se") is not None else math.nan),
            }
            for r in self._evals()
        ]
        # evaluations finish out of order (a later one can be logged first); a resume may repeat one
        frame = pd.DataFrame(data, columns=CURVE_COLUMNS).sort_values("step", kind="stable")
        return frame.drop_duplicates("step", keep="last").reset_index(drop=True)

    @property
    def history(self) -> pd.DataFrame:
        """Train-step rows (train/*, time/*, compute/*, ...) as a DataFrame indexed by step."""
        self._poll()
        train = [r for r in self._rows if EVAL_KEY not in r]
        return pd.DataFrame(train).set_index("step") if train else pd.DataFrame()

    def status(self) -> dict[str, Any]:
        """The engine's status (status, step, max_steps, error, out_dir, compute/...) plus the session's."""
        if not self.started and not self._finished:
            st: dict[str, Any] = {"status": "not started", "step": 0, "max_steps": self.max_steps, "out_dir": str(self.out_dir)}
        else:
            self._poll()
            st = dict(self._last_status)
        st.update(name=self.name, run_id=self.run_id, evaluations=len(self._evals()))
        return st

    # ------------------------------------------------------------------ fit & forecast
    def fit(self, x: str | None = None, fit_from: float | None = None, n_boot: int = 200):
        """The sigmoid fit (workbench.scaling.SigmoidFit) of val/pass_rate vs `x` on the evaluations so far.

        R0 is the pass rate measured at compute 0 (the evaluation before training); a resumed
        curve without one uses its first point. fit_from leaves out early points (the paper
        drops the first ~1.5k GPU-hours). Cached until a new evaluation arrives.
        """
        self._poll()
        return self._fit(x, fit_from, n_boot)

    def _fit(self, x: str | None, fit_from: float | None, n_boot: int):
        from workbench.scaling import fit_sigmoid

        x = x or self.x
        if x not in X_COLUMNS:
            raise UserError(f"x must be one of {list(X_COLUMNS)}, not {x!r}")
        df = self._curve_frame()
        key = (len(df), x, fit_from, n_boot)
        if key in self._fit_cache:
            return self._fit_cache[key]
        c = df[X_COLUMNS[x]].to_numpy(dtype=float)
        y = df["val_pass_rate"].to_numpy(dtype=float)
        usable = (c > 0) & ((c >= fit_from) if fit_from is not None else True)
        n = int(usable.sum())
        if n < MIN_EVALS:
            every = self.cfg.eval.every_steps
            raise UserError(
                f"only {n} evaluation(s) with {x} > {fit_from or 0:g} so far ({len(df)} in all); the sigmoid fit "
                f"needs at least {MIN_EVALS}: wait for more (one every {every} steps)"
            )
        r0 = None if (c == 0).any() else "first"
        result = fit_sigmoid(c, y, r0=r0, fit_from=fit_from, n_boot=n_boot)
        self._fit_cache = {key: result}  # only the latest: a new evaluation invalidates it
        return result

    def forecast(self, budget: float, *, x: str | None = None, fit_from: float | None = None, level: float = 0.95,
                 min_gain: float = 0.01) -> dict[str, Any]:
        """Predicted pass rate at compute `budget` (in units of `x`) with its band and, for a budget
        past the current compute, workbench.scaling.scaling_gain's gain, interval and verdict."""
        from workbench.widgets.report import forecast_from_fit

        return forecast_from_fit(self.fit(x, fit_from), budget, x=x or self.x, level=level, min_gain=min_gain)

    def chart(self, budget: float | None = None, *, fit_from: float | None = None):
        """The dashboard's chart as an Altair chart (points; fit, band and forecast once 4 evaluations exist).

        Offline display in a notebook: `alt.renderers.enable("svg")` (rendered by vl-convert)."""
        from workbench.widgets.chart import default_budget, session_chart

        curve = self.curve
        if curve.empty:
            raise UserError(f"run '{self.name}' has no evaluation yet: nothing to draw")
        try:
            fit = self._fit(None, fit_from, 200)
        except UserError:
            fit = None
        budget = budget if budget is not None else default_budget(curve, self.x)
        return session_chart(curve, fit, x=self.x, budget=budget, title=f"{self.name}: val/pass_rate vs {self.x}")

    def _log_fit(self) -> None:
        """At run end: fit JSON/HTML/PNG into <out_dir>/fit/ and, with tracking, fit/* to MLflow."""
        from workbench.widgets.report import log_fit, write_fit_artifacts

        sink = None
        if self.tracking and self.run_id:
            from workbench.tracking.mlflow_sink import MlflowSink

            sink = MlflowSink(self.run_id, self.tracking_uri)
        try:
            fit = self._fit(None, None, 200)
        except (UserError, ValueError, RuntimeError) as e:
            if sink is not None:
                sink.set_tags({"workbench.fit_error": str(e)})
            return
        paths = write_fit_artifacts(fit, self.out_dir / "fit", title=f"{self.name}: val/pass_rate vs {self.x}", x=self.x)
        if sink is not None:
            log_fit(sink, fit, paths, step=int(self._last_status.get("step") or 0), x=self.x)

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
        from workbench.engine import launch as L

        cluster.connect(start_if_missing=False)
        handle = L.attach(name)
        st = handle.status()
        out = Path(st["out_dir"])
        cfg = saved_config(out) or dataclasses.replace(RunConfig(), name=name, out_dir=str(out))
        s = cls.__new__(cls)
        tr = cfg.tracking
        s._init_state(cfg, tracking=tracking and tr.mlflow and bool(tr.run_id), experiment=tr.experiment, x=x,
                      tracking_uri=tr.tracking_uri, run_id=tr.run_id, parent_run_id=tr.parent_run_id)
        s.handle = handle
        s.max_steps = int(st.get("max_steps") or cfg.train.max_steps)
        if st.get("resumed_from") is not None:  # the actor holds only rows since its resume
            from workbench.tracking.sink import read_jsonl

            s._rows = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("step", 0) <= st["resumed_from"]]
        s._last_status = st
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
        s = cls._from_folder(path, tracking=tracking, x=x)
        s._resume = True
        return s.start(max_steps=max_steps, max_minutes=max_minutes)

    @classmethod
    def open(cls, target: str | Path, *, x: str = "compute/device_hours") -> "Session":
        """A read-only view of a run folder (out_dir or name): curve, fit, forecast, chart, dashboard.

        Needs no Ray; the rows are read from metrics.jsonl once."""
        from workbench.tracking.sink import read_jsonl

        path = run_folder(target)
        s = cls._from_folder(path, tracking=False, x=x)
        s._rows = read_jsonl(path / "metrics.jsonl")
        summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else {}
        s._summary, s._finished = summary, True
        last = max((int(r.get("step", 0)) for r in s._rows), default=0)
        s._last_status = {"status": summary.get("status", "unknown"), "step": summary.get("steps", last),
                          "max_steps": s.cfg.train.max_steps, "out_dir": str(path)}
        return s

    @classmethod
    def _from_folder(cls, path: Path, *, tracking: bool, x: str) -> "Session":
        cfg = saved_config(path)
        if cfg is None:
            raise UserError(f"{path} has no config.json or checkpoint state: cannot tell how the run was configured")
        cfg = dataclasses.replace(cfg, out_dir=str(path))
        tr = cfg.tracking
        s = cls.__new__(cls)
        s._init_state(cfg, tracking=tracking and tr.mlflow and bool(tr.run_id), experiment=tr.experiment, x=x,
                      tracking_uri=tr.tracking_uri, run_id=tr.run_id, parent_run_id=tr.parent_run_id)
        return s
