"""Metric sinks: where a run's config, metrics and artifacts go.

The engine talks only to this small interface; `JsonlSink` writes `metrics.jsonl` (always on),
`workbench.tracking.mlflow_sink.MlflowSink` logs to MLflow, `wandb_sink.WandbSink` to W&B. A sink
never raises into the training loop for a transient logging failure; it warns once and carries on.

    sink = JsonlSink(out_dir / "metrics.jsonl")
    sink.log_metrics({"val/pass_rate": 0.3, "compute/flops": 1e12}, step=10)
    sink.commit(10)       # a checkpoint covering step 10 is on disk
    sink.rollback(10)     # the run went back to the step-10 checkpoint: steps after it are redone

Every step once, in every sink, and live: each sink gets a step's row as soon as it is logged. A
run that restarts from a checkpoint (a trainer worker died, the driver was restarted,
`Session.resume_from`) redoes the steps after it, so before it does the engine calls
`rollback(step)` on every sink. A sink that can take points back says so with `takes_back = True`:
`JsonlSink.rollback` truncates the file, `MlflowSink.rollback` deletes the later points from a
database store (SQLite, the default), so the redone steps replace them. A sink that cannot (an
MLflow tracking server over http, W&B, whose histories only grow) is wrapped in `AppendOnlySink`,
which reconciles instead: at the rollback it asks the store which points past the checkpoint it
holds already (`points_after`: MLflow's metric history, W&B's transaction log) and adds what this
process sent, and when the redone steps come it sends only the points the store lacks. So each
step is there once; for the steps the lost timeline had logged (at most `checkpoint.every_steps`)
the store keeps that timeline's values, metrics.jsonl the redone ones, and the store's run is
tagged `workbench.earlier_timeline_steps` with their range. (W&B's own rewind, `resume_from`, is a
preview feature missing from most accounts and self-hosted servers; a fork would be a second run.)
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
    itself when it can take points back, else the sink behind an `AppendOnlySink`."""
    if isinstance(sink, (JsonlSink, AppendOnlySink)) or getattr(sink, "takes_back", False):
        return sink
    return AppendOnlySink(sink)


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


class AppendOnlySink:
    """Wraps a sink that cannot take back what it was sent (an MLflow server, W&B): every point goes
    out live, and after a rollback a redone point the store already holds (the same key at the same
    step, from the lost timeline) is not sent again. See the module docstring for why. The inner
    sink may tell what its store holds past a step (`points_after(step) -> {step: keys}`); config,
    artifacts, tags and samples pass straight through."""

    EARLIER_TAG = "workbench.earlier_timeline_steps"

    def __init__(self, inner: Any):
        self.inner = inner
        self._sent: dict[int, set[str]] = {}  # step -> keys this process sent, steps after the last commit
        self._held: dict[int, set[str]] = {}  # step -> keys the store holds from a lost timeline: not sent again

    def log_config(self, config: dict[str, Any]) -> None:
        self.inner.log_config(config)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        held = self._held.get(int(step), set())
        send = {k: v for k, v in metrics.items() if k not in held}
        if send:
            self.inner.log_metrics(send, step)
            self._sent.setdefault(int(step), set()).update(send)

    def log_samples(self, step: int, kind: str, records: list[dict[str, Any]]) -> None:
        """A step's kept completions (W&B: a table, as TRL's `log_completions`), once per step."""
        key = f"samples/{kind}"
        if hasattr(self.inner, "log_samples") and key not in self._held.get(int(step), set()):
            self.inner.log_samples(step, kind, records)
            self._sent.setdefault(int(step), set()).add(key)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.inner.log_artifact(path, artifact_path)

    def set_tags(self, tags: dict[str, Any]) -> None:
        if hasattr(self.inner, "set_tags"):
            self.inner.set_tags(tags)

    def start_fresh(self) -> None:
        """A new run in this folder (not a resume): nothing of an earlier one is held."""
        self._sent, self._held = {}, {}
        if hasattr(self.inner, "start_fresh"):
            self.inner.start_fresh()

    def commit(self, step: int) -> None:
        """A checkpoint covers `step`: its points are final, nothing at or before it is redone."""
        self._sent = {s: k for s, k in self._sent.items() if s > step}
        self._held = {s: k for s, k in self._held.items() if s > step}

    def rollback(self, step: int) -> None:
        """The steps after `step` are redone: what the store holds of them stays and is not sent again."""
        held: dict[int, set[str]] = {s: set(k) for s, k in self._held.items() if s > step}
        stored = self.inner.points_after(step) if hasattr(self.inner, "points_after") else {}
        for source in (stored, self._sent):
            for s, keys in source.items():
                if s > step:
                    held.setdefault(int(s), set()).update(keys)
        self._held = held
        self._sent = {s: k for s, k in self._sent.items() if s <= step}
        if held:
            self.set_tags({self.EARLIER_TAG: f"{min(held)}-{max(held)}: logged before the restart from step {step}; "
                                             "metrics.jsonl holds the values of these steps as redone"})

    @property
    def held_steps(self) -> list[int]:
        """The steps whose points (some or all) the store holds from a lost timeline."""
        return sorted(self._held)

    def close(self, status: str = "FINISHED") -> None:
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
