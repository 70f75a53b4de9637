"""`MlflowSink`: the MetricSink that logs one run's config, metrics and artifacts to MLflow.

It writes to an existing run (create it with `workbench.tracking.store.create_run`, in the
process that owns the experiment) through an `MlflowClient` bound to an explicit tracking URI,
so it works inside a Ray actor or a papermill kernel: no global `mlflow.start_run` state. The
sink is picklable (the client is rebuilt on the other side).

    sink = MlflowSink(run_id, tracking_uri)
    sink.log_config(to_dict(cfg))                      # flattened: recipe.loss.type = cispo
    sink.log_metrics({"val/pass_rate": 0.41, "compute/device_hours": 0.2}, step=10)
    sink.log_artifact("runs/x/metrics.jsonl")
    sink.rollback(8)                                   # a restart from the step-8 checkpoint: later points deleted
    sink.close("FINISHED")                             # or FAILED / KILLED

Metrics go out live, one batch per step. A run that restarts from a checkpoint redoes the steps
after it, so `rollback(step)` deletes the run's points after `step` before they are logged again:
each step stays once in the metric history, with the surviving timeline's values. MLflow has no
call that deletes a metric (mlflow/mlflow#2973), so this edits the store's own `metrics` and
`latest_metrics` tables through MLflow's table models; it can only do that for a database store
(SQLite, the default, or PostgreSQL / MySQL / MS SQL). A tracking server's REST API cannot delete,
so for an http(s) store `takes_back` is False: it still gets every step live, and after a restart
the engine's `AppendOnlySink` (workbench.tracking.sink) asks `points_after(step)` which points the
server holds past the checkpoint and does not send those again.

Like every sink it never raises into the training loop for a logging failure: SQLite
'database is locked' is retried, anything else is warned about (once per kind) and dropped.
Bad arguments (an unknown status) still raise UserError.
"""

from __future__ import annotations

import dataclasses
import math
import time
import urllib.parse
import warnings
from pathlib import Path
from typing import Any

from workbench.configtools import flatten, to_dict
from workbench.errors import UserError
from workbench.tracking.store import retry_locked

MAX_PARAM_VALUE = 6000  # MLflow's limit on a param value
MAX_KEY = 250  # MLflow's limit on a param / metric key
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
TERMINAL = ("FINISHED", "FAILED", "KILLED")


def param_value(value: Any) -> str:
    """A config value as an MLflow param string, cut to MLflow's 6000-character limit."""
    if value is None:
        text = "None"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(str(v) for v in value) + "]"
    else:
        text = str(value)
    if len(text) > MAX_PARAM_VALUE:
        marker = "...[truncated]"
        text = text[: MAX_PARAM_VALUE - len(marker)] + marker
    return text


def config_params(config: Any) -> dict[str, str]:
    """Flatten a config (dataclass tree or nested dict) into {dotted.key: str}."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = to_dict(config)
    if not isinstance(config, dict):
        raise UserError(f"log_config expects a mapping or a dataclass, got {type(config).__name__}")
    return {k[:MAX_KEY]: param_value(v) for k, v in flatten(config).items()}


class MlflowSink:
    """MetricSink writing to MLflow run `run_id` at `tracking_uri`."""

    def __init__(self, run_id: str, tracking_uri: str):
        if not run_id:
            raise UserError("MlflowSink needs the run_id of an existing MLflow run")
        if not tracking_uri:
            raise UserError("MlflowSink needs an explicit tracking_uri")
        self.run_id = run_id
        self.tracking_uri = tracking_uri
        self._client = None
        self._engine = None
        self._closed = False
        self._warned: set[str] = set()

    # The client holds connections; ship only the address to another process.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = state["_engine"] = None
        return state

    @property
    def client(self):
        if self._client is None:
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def _warn_once(self, kind: str, exc: BaseException) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(f"MLflow {kind} for run {self.run_id} failed ({exc}); carrying on", RuntimeWarning, stacklevel=3)

    def log_config(self, config: Any) -> None:
        """Every config value as a param (dotted keys). Params already logged are not re-sent;
        a changed value (MLflow params are immutable) is recorded as tag `config.<key>`."""
        from mlflow.entities import Param, RunTag

        params = config_params(config)
        try:
            existing = retry_locked(self.client.get_run, self.run_id).data.params
        except Exception as e:  # noqa: BLE001 - logging must not stop training
            self._warn_once("log_config", e)
            return
        new = [Param(k, v) for k, v in params.items() if k not in existing]
        changed = [RunTag(f"config.{k}"[:MAX_KEY], v) for k, v in params.items() if k in existing and existing[k] != v]
        try:
            for i in range(0, len(new), PARAMS_PER_BATCH):
                retry_locked(self.client.log_batch, self.run_id, params=new[i : i + PARAMS_PER_BATCH])
            for i in range(0, len(changed), PARAMS_PER_BATCH):
                retry_locked(self.client.log_batch, self.run_id, tags=changed[i : i + PARAMS_PER_BATCH])
        except Exception as e:  # noqa: BLE001
            self._warn_once("log_config", e)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """One batch per call; None and non-numeric values are skipped, NaN/inf are kept."""
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        batch = []
        for key, value in metrics.items():
            if value is None or isinstance(value, bool):
                continue
            try:
                v = float(value)
            except (TypeError, ValueError):
                continue
            if math.isinf(v):
                v = math.copysign(1.7976931348623157e308, v)  # what MLflow stores for inf
            batch.append(Metric(str(key)[:MAX_KEY], v, ts, int(step)))
        try:
            for i in range(0, len(batch), METRICS_PER_BATCH):
                retry_locked(self.client.log_batch, self.run_id, metrics=batch[i : i + METRICS_PER_BATCH])
        except Exception as e:  # noqa: BLE001
            self._warn_once("log_metrics", e)

    @property
    def takes_back(self) -> bool:
        """Whether `rollback` can delete points: true for a database store (see the module doc)."""
        from mlflow.store.db.db_types import DATABASE_ENGINES

        return urllib.parse.urlparse(self.tracking_uri).scheme.split("+")[0].lower() in DATABASE_ENGINES

    def commit(self, step: int) -> None:
        pass  # every step was sent live; rollback() takes back the ones redone

    def points_after(self, step: int) -> dict[int, set[str]]:
        """{step: metric keys} the run holds past `step` (read from the store: any store, a server too)."""
        held: dict[int, set[str]] = {}
        try:
            keys = list(retry_locked(self.client.get_run, self.run_id).data.metrics)
            for key in keys:
                for m in retry_locked(self.client.get_metric_history, self.run_id, key):
                    if m.step > step:
                        held.setdefault(int(m.step), set()).add(key)
        except Exception as e:  # noqa: BLE001 - an unreadable store: nothing known held
            self._warn_once("reading its metric history", e)
            return {}
        return held

    def rollback(self, step: int) -> None:
        """Delete this run's metric points after `step` (they are about to be redone) and set each
        touched key's latest value back to its last point at or before `step`."""
        try:
            retry_locked(self._delete_after, int(step))
        except Exception as e:  # noqa: BLE001 - logging must not stop training
            self._warn_once("rollback", e)

    def _delete_after(self, step: int) -> None:
        from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric
        from sqlalchemy import create_engine, delete, select
        from sqlalchemy.orm import Session
        from sqlalchemy.pool import NullPool

        if self._engine is None:  # NullPool: no connection held between the rare rollbacks
            self._engine = create_engine(self.tracking_uri, poolclass=NullPool)
        with Session(self._engine) as db, db.begin():  # one transaction: readers see before or after
            later = (SqlLatestMetric.run_uuid == self.run_id) & (SqlLatestMetric.step > step)
            keys = list(db.scalars(select(SqlLatestMetric.key).where(later)))
            db.execute(delete(SqlMetric).where((SqlMetric.run_uuid == self.run_id) & (SqlMetric.step > step)))
            db.execute(delete(SqlLatestMetric).where(later))
            for key in keys:  # MLflow's own order for "latest": step, then timestamp, then value
                last = db.scalars(
                    select(SqlMetric).where((SqlMetric.run_uuid == self.run_id) & (SqlMetric.key == key))
                    .order_by(SqlMetric.step.desc(), SqlMetric.timestamp.desc(), SqlMetric.value.desc()).limit(1)
                ).first()
                if last is not None:
                    db.add(SqlLatestMetric(key=key, value=last.value, timestamp=last.timestamp, step=last.step,
                                           is_nan=last.is_nan, run_uuid=self.run_id))

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Copy a file (or a whole folder) into the run's artifacts."""
        p = Path(path)
        try:
            if p.is_dir():
                retry_locked(self.client.log_artifacts, self.run_id, str(p), artifact_path)
            elif p.is_file():
                retry_locked(self.client.log_artifact, self.run_id, str(p), artifact_path)
            else:
                raise FileNotFoundError(f"no such file: {p}")
        except Exception as e:  # noqa: BLE001
            self._warn_once("log_artifact", e)

    def set_tags(self, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        try:
            items = [RunTag(str(k)[:MAX_KEY], str(v)[:8000]) for k, v in tags.items()]
            retry_locked(self.client.log_batch, self.run_id, tags=items)
        except Exception as e:  # noqa: BLE001
            self._warn_once("set_tags", e)

    def close(self, status: str = "FINISHED") -> None:
        """Set the run's final status (FINISHED, FAILED or KILLED). Closing twice is a no-op."""
        status = str(status).upper()
        if status not in TERMINAL:
            raise UserError(f"run status must be one of {list(TERMINAL)}, got {status!r}")
        if self._closed:
            return
        try:
            retry_locked(self.client.set_terminated, self.run_id, status=status)
            self._closed = True
        except Exception as e:  # noqa: BLE001
            self._warn_once("close", e)
