"""Stop losers by forecast while a sweep runs (`workbench sweep ... --stop-early`).

Points run in rungs of evaluations (`--rung-evals N`, at least MIN_POINTS). A monitor thread in
the sweep process reads every point's curve from MLflow every few seconds; whenever a running
point completes a rung (N more evaluations at compute > 0), it refits every point (finished,
stopped and running; the seeds of one point jointly) and asks
`workbench.scaling.decide.early_stop.rung_decisions` which points cannot win. A losing point that has
completed at least one rung is asked to stop (`workbench.runs.stop_request`: the monitor writes the
point's stop-request file, $WORKBENCH_STOP_REQUEST in its papermill process), which `workbench.Session` honours
by stopping its run after the step in flight, with a checkpoint. The stopped point keeps its
curve and its fit (the session logs it as for any run end). Its recorded reason
(`final_reason`) counts the evaluations its curve ended with: the run goes on for the steps in
flight when the request arrives, and the engine evaluates its last step.

The budget the forecasts are compared at is `--budget`, or by default the compute of a full
point: for each run, its compute per step so far (latest compute / latest step) times its step
target (the MLflow param `train.max_steps`, which the engine logs from its config), and the
largest of those. Compute saved = what stopped points would still have spent (compute per step x
remaining steps) / what the full sweep would have spent (spent + that).

    mon = RungMonitor(uri, metric="val/pass_rate", x="compute/device_hours", rung_evals=4)
    mon.start(); mon.register(key, label, group, run_id, stop_file); ...; mon.ended(key); mon.close()
    account = compute_account(progress(run_id, x, uri), stopped=True)
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from workbench.errors import UserError
from workbench.runs.report import SCORE_KEY
from workbench.scaling.data import MIN_POINTS
from workbench.runs.stop_request import request_stop


@dataclass
class Progress:
    """One run as logged so far: its evaluations, its latest (step, compute) and its step target."""

    x: np.ndarray
    y: np.ndarray
    last_step: int
    last_x: float
    max_steps: Optional[int]

    @property
    def evaluations(self) -> int:
        return int((self.x > 0).sum())

    @property
    def per_step(self) -> float:
        return self.last_x / self.last_step if self.last_step > 0 else float("nan")

    @property
    def full(self) -> float:
        """Compute of the whole run at the pace so far (nan without a step target)."""
        return self.per_step * self.max_steps if self.max_steps else float("nan")


def progress(run_id: str, metric: str, x: str, uri: str, tails: Optional[dict[str, Any]] = None) -> Optional[Progress]:
    """What the run has logged so far (None before its first evaluation): its own rows
    (metrics.jsonl in its folder) when this machine sees them, else what MLflow holds. The rows
    come first: they hold a restart's redone values, where an MLflow server keeps the lost ones (tracking/sink.py).
    A poller passes `tails` (path -> JsonlTail, kept between calls) to read only new rows."""
    from workbench.tracking.store import client, retry_locked

    run = retry_locked(client(uri).get_run, run_id)
    try:
        max_steps = int(float(run.data.params["train.max_steps"]))
    except (KeyError, ValueError):
        max_steps = None
    from workbench.tracking.run_tracking import OUT_DIR_TAG

    out_dir = run.data.tags.get(OUT_DIR_TAG)
    if metric.startswith(SCORE_KEY) and out_dir and (Path(out_dir) / "metrics.jsonl").is_file():
        from workbench.tracking.sink import JsonlTail

        path = Path(out_dir) / "metrics.jsonl"
        tail = JsonlTail(path) if tails is None else tails.setdefault(str(path), JsonlTail(path))
        return _progress_from_rows(tail.rows(), x, max_steps, metric)
    return _progress_from_mlflow(run_id, metric, x, uri, max_steps)


def _progress_from_rows(rows: list[dict[str, Any]], x: str, max_steps: Optional[int],
                        metric: str = SCORE_KEY) -> Optional[Progress]:
    from workbench.runs.report import eval_curve

    xs, ys = eval_curve(rows, x, metric)
    if not len(xs):
        return None
    stamped = [r for r in rows if x == "step" or r.get(x) is not None]
    last = max(stamped, key=lambda r: (r.get("step", 0), r.get(x, 0) if x != "step" else 0))
    last_step = int(last.get("step", 0))
    return Progress(xs, ys, last_step, float(last_step if x == "step" else last[x]), max_steps)


def _progress_from_mlflow(run_id: str, metric: str, x: str, uri: str, max_steps: Optional[int]) -> Optional[Progress]:
    from workbench.tracking.queries import metric_history, run_curve

    try:
        curve = run_curve(run_id, metric=metric, x=x, tracking_uri=uri)
    except UserError:
        return None
    hist = metric_history(run_id, metric if x == "step" else x, uri)
    last_step = int(hist.index.max()) if len(hist) else 0
    last_x = float(last_step if x == "step" else (hist.iloc[-1] if len(hist) else 0.0))
    return Progress(curve["x"].to_numpy(float), curve["y"].to_numpy(float), last_step, last_x, max_steps)


def stop_reason(p: Progress, why: str, asked: Optional[Progress] = None) -> str:
    """One line: why a point was stopped, counting the evaluations on its curve as a reader of the
    curve does (step 0's included). `asked`: the run when the stop was asked, if it went on after."""
    text = f"stopped by forecast after {len(p.x)} evaluations, at step {p.last_step}"
    if asked is not None and asked.last_step != p.last_step:
        text += f" (asked at step {asked.last_step} after {len(asked.x)}; the steps in flight were finished, the last evaluated)"
    return f"{text}: {why}"


def compute_account(p: Optional[Progress], *, stopped: bool) -> dict[str, float]:
    """{"spent", "unspent"}: compute used, and what a stopped run would still have used."""
    if p is None:
        return {"spent": 0.0, "unspent": 0.0}
    unspent = p.per_step * max(0, p.max_steps - p.last_step) if stopped and p.max_steps and p.last_step > 0 else 0.0
    return {"spent": float(p.last_x), "unspent": float(unspent)}


def fit_group(curves: list[Progress]) -> Any:
    """The sigmoid fit of one point (its seeds jointly); None while too few evaluations."""
    from workbench.runs.report import fit_curves

    usable = [c for c in curves if c.evaluations >= MIN_POINTS]
    if not usable:
        return None
    try:
        return fit_curves([(c.x, c.y) for c in usable])
    except (UserError, ValueError, RuntimeError, FloatingPointError):
        return None


@dataclass
class _Run:
    label: str
    group: str
    run_id: str
    stop_file: Path
    ended: bool = False
    rung: int = 0
    last: Optional[Progress] = None
    final: bool = False  # read once more after it ended: nothing will change


@dataclass
class RungMonitor:
    uri: str
    metric: str
    x: str
    rung_evals: int
    budget: Optional[float] = None
    poll: float = 3.0
    runs: dict[str, _Run] = field(default_factory=dict)
    requested: dict[str, str] = field(default_factory=dict)  # key -> reason of the stop request
    rounds: list[dict[str, Any]] = field(default_factory=list)  # every decision round, for the record

    def __post_init__(self) -> None:
        if self.rung_evals < MIN_POINTS:
            raise UserError(f"--rung-evals must be at least {MIN_POINTS} (a sigmoid fit needs {MIN_POINTS} evaluations "
                            f"at compute > 0), got {self.rung_evals}")
        if self.budget is not None and not self.budget > 0:
            raise UserError(f"--budget must be a compute > 0, got {self.budget}")
        self._lock = threading.Lock()
        self._asked: dict[str, tuple[str, Progress]] = {}  # key -> (why, the run when it was asked to stop)
        self._tails: dict[str, Any] = {}  # metrics.jsonl path -> JsonlTail: each poll reads only new rows
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sweep-rungs", daemon=True)
        self.error: Optional[str] = None

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=60)

    def register(self, key: str, label: str, group: str, run_id: str, stop_file: Path) -> None:
        with self._lock:
            self.runs[key] = _Run(label, group, run_id, stop_file)

    def ended(self, key: str) -> None:
        with self._lock:
            if key in self.runs:
                self.runs[key].ended = True

    def final_reason(self, key: str) -> Optional[str]:
        """The reason of a stopped point once its run has ended, counting the evaluations its
        curve ended with: the steps in flight when the request arrived are finished, and the
        engine evaluates the last one, so the curve has more than the decision saw."""
        if key not in self._asked:
            return None
        why, asked = self._asked[key]
        try:
            final = progress(self.runs[key].run_id, self.metric, self.x, self.uri) or asked
        except Exception:  # noqa: BLE001 - a store hiccup: the reason as asked still holds
            final = asked
        return stop_reason(final, why, asked)

    def _loop(self) -> None:
        while not self._done.wait(self.poll):
            try:
                self.check()
            except Exception as e:  # noqa: BLE001 - a store hiccup must not end the sweep; say so once
                self.error = f"{type(e).__name__}: {e}"

    def check(self) -> list[str]:
        """Read every run; after a running run completes a rung, decide. Returns the keys asked to stop."""
        with self._lock:
            runs = dict(self.runs)
        new_rung = False
        for r in runs.values():
            if r.final:
                continue
            r.last = progress(r.run_id, self.metric, self.x, self.uri, self._tails) or r.last
            r.final = r.ended
            if r.last is not None and not r.ended:
                rung = r.last.evaluations // self.rung_evals
                if rung > r.rung:
                    r.rung, new_rung = rung, True
        return self.decide(runs) if new_rung else []

    def current_budget(self, runs: dict[str, _Run]) -> float:
        if self.budget is not None:
            return float(self.budget)
        full = [r.last.full for r in runs.values() if r.last is not None and np.isfinite(r.last.full)]
        return max(full) if full else float("nan")

    def decide(self, runs: dict[str, _Run]) -> list[str]:
        from workbench.scaling.decide.early_stop import rung_decisions

        budget = self.current_budget(runs)
        if not np.isfinite(budget) or budget <= 0:
            return []
        groups: dict[str, list[Progress]] = {}
        for r in runs.values():
            if r.last is not None:
                groups.setdefault(r.group, []).append(r.last)
        fits = {g: fit_group(curves) for g, curves in groups.items()}
        decisions = rung_decisions(fits, budget)
        stopped = []
        for key, r in runs.items():
            d = decisions.get(r.group)
            if d is None or not d.stop or r.ended or key in self.requested or r.rung < 1:
                continue
            reason = stop_reason(r.last, d.reason)
            request_stop(r.stop_file, reason)
            self.requested[key] = reason
            self._asked[key] = (d.reason, r.last)
            stopped.append(key)
        self.rounds.append({"time": time.time(), "budget": budget, "stopped": [runs[k].label for k in stopped],
                            "decisions": {g: {"stop": d.stop, "reason": d.reason, "forecast": d.forecast, "best": d.best}
                                          for g, d in decisions.items()}})
        return stopped
