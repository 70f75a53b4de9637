"""Metric sinks: where a run's config, metrics and artifacts go.

The engine talks only to this small interface; `JsonlSink` writes `metrics.jsonl` (always on),
`workbench.tracking.mlflow_sink.MlflowSink` logs to MLflow. A sink never raises into the
training loop for a transient logging failure; it warns once and carries on.

    sink = JsonlSink(out_dir / "metrics.jsonl")
    sink.log_metrics({"val/pass_rate": 0.3, "compute/flops": 1e12}, step=10)
    sink.commit(10)       # a checkpoint covering step 10 is on disk
    sink.rollback(10)     # the run went back to the step-10 checkpoint: steps after it are redone

Every step once, in every sink, and live. A run that restarts from a checkpoint (a trainer worker
died, the driver was restarted, `Session.resume_from`) redoes the steps after it, so before it does
the engine calls `rollback(step)` on every sink. A sink that can take points back says so with
`takes_back = True` and gets each step at once: `JsonlSink.rollback` truncates the file,
`MlflowSink.rollback` deletes the later points from a database store (SQLite, the default), so the
MLflow UI shows step k within seconds of the step. A sink that cannot (an MLflow tracking server
over http, W&B) is wrapped in `CommitGatedSink`: it holds a step's metrics until a checkpoint
covering that step has committed, so what it sent is never redone, and it drops what it holds on
a rollback; such a store lags by up to `checkpoint.every_steps`. A live sink keeps the steps of a
run that fails (as metrics.jsonl does) until a resume takes them back; a gated one keeps them back
and tags the store's run with their range.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable  # isinstance(sink, MetricSink) checks the four methods exist
class MetricSink(Protocol):
    def log_config(self, config: dict[str, Any]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...
    def close(self, status: str = "FINISHED") -> None: ...


def rewindable(sink: MetricSink) -> Any:
    """The sink as the engine holds it, able to `commit` and `rollback` steps (see above): the sink
    itself when it can take points back, else the sink behind a `CommitGatedSink`."""
    if isinstance(sink, (JsonlSink, CommitGatedSink)) or getattr(sink, "takes_back", False):
        return sink
    return CommitGatedSink(sink)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN; None keeps the key visible
    return v


class JsonlSink:
    """One JSON object per line: {"step": .., "kind": "train"|"eval", ...metrics}."""

    takes_back = True  # rollback() truncates the file

    def __init__(self, path: str | Path, *, append: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a" if append else "w", buffering=1)

    def log_config(self, config: dict[str, Any]) -> None:
        (self.path.parent / "config.json").write_text(json.dumps(config, indent=2, default=str))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        row = {"step": int(step), **{k: _clean(v) for k, v in metrics.items()}}
        self._fh.write(json.dumps(row, default=float) + "\n")

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        pass  # artifacts already live in the run directory

    def commit(self, step: int) -> None:
        pass  # every row is written at once; rollback() takes back the ones redone

    def rollback(self, step: int) -> None:
        """Drop every row after `step` (they will be redone), keeping the file's other rows."""
        self._fh.flush()
        rows = [r for r in read_jsonl(self.path) if r.get("step", 0) <= step]
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        self._fh.close()
        tmp.replace(self.path)  # atomic: a crash here leaves the old file or the new one
        self._fh = open(self.path, "a", buffering=1)

    def close(self, status: str = "FINISHED") -> None:
        if not self._fh.closed:
            self._fh.close()


class CommitGatedSink:
    """Wraps a sink that cannot take back what it was sent: metrics of a step reach it only once
    a checkpoint covering that step has committed (`commit`), or at a clean close. See the module
    docstring for why. Config, artifacts and tags pass straight through."""

    def __init__(self, inner: Any, committed: int = 0):
        self.inner = inner
        self.committed = int(committed)  # the last step a committed checkpoint covers
        self._held: list[tuple[int, dict[str, float]]] = []

    def log_config(self, config: dict[str, Any]) -> None:
        self.inner.log_config(config)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        if step <= self.committed:  # e.g. an evaluation of a step already checkpointed
            self.inner.log_metrics(metrics, step)
        else:
            self._held.append((int(step), dict(metrics)))

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.inner.log_artifact(path, artifact_path)

    def set_tags(self, tags: dict[str, Any]) -> None:
        if hasattr(self.inner, "set_tags"):
            self.inner.set_tags(tags)

    def commit(self, step: int) -> None:
        self.committed = max(self.committed, int(step))
        send = [(s, m) for s, m in self._held if s <= self.committed]
        self._held = [(s, m) for s, m in self._held if s > self.committed]
        for s, m in send:
            self.inner.log_metrics(m, s)

    def rollback(self, step: int) -> None:
        self._held = [(s, m) for s, m in self._held if s <= step]
        self.committed = int(step)

    @property
    def held_steps(self) -> list[int]:
        return sorted({s for s, _ in self._held})

    def close(self, status: str = "FINISHED") -> None:
        """A clean end (FINISHED, KILLED: the engine wrote its last checkpoint) sends what is held;
        a failure keeps it back, since a resume will redo those steps, and says so in a tag."""
        if str(status).upper() == "FAILED":
            held = self.held_steps
            if held:
                self.set_tags({"workbench.uncommitted_steps": f"{held[0]}-{held[-1]} (in metrics.jsonl only; a resume redoes them)"})
            self._held = []
        else:
            self.commit(max([self.committed] + self.held_steps))
        self.inner.close(status)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read metrics.jsonl; a torn last line (a killed run) is skipped, not fatal."""
    p = Path(path)
    return _parse_lines(p.read_bytes().split(b"\n")) if p.exists() else []


def _parse_lines(lines: list[bytes]) -> list[dict[str, Any]]:
    rows = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


class JsonlTail:
    """A growing metrics.jsonl read incrementally, for pollers (a sweep's rung monitor): `rows()`
    parses only the bytes appended since the last call, so a poll costs the new rows, not the
    whole run. A file that was replaced (`JsonlSink.rollback` writes a new one) or shrank is read
    again from its start; a line still being written waits for its newline."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._reset(None)

    def _reset(self, ino: Any) -> None:
        self._ino, self._offset, self._partial = ino, 0, b""
        self._rows: list[dict[str, Any]] = []

    def rows(self) -> list[dict[str, Any]]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._reset(None)
            return []
        if st.st_ino != self._ino or st.st_size < self._offset:
            self._reset(st.st_ino)
        if st.st_size > self._offset:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(st.st_size - self._offset)
            self._offset += len(data)
            lines = (self._partial + data).split(b"\n")
            self._partial = lines.pop()  # b"" after a complete line
            self._rows.extend(_parse_lines(lines))
        return self._rows
