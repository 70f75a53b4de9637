"""Metric sinks: where a run's config, metrics and artifacts go.

The engine talks only to this small interface; `JsonlSink` writes `metrics.jsonl` (always on),
`workbench.tracking.mlflow_sink.MlflowSink` logs to MLflow. A sink never raises into the
training loop for a transient logging failure; it warns once and carries on.

    sink = JsonlSink(out_dir / "metrics.jsonl")
    sink.log_metrics({"val/pass_rate": 0.3, "compute/flops": 1e12}, step=10)
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
    def log_artifact(self, path: str | Path) -> None: ...
    def close(self, status: str = "FINISHED") -> None: ...


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN; None keeps the key visible
    return v


class JsonlSink:
    """One JSON object per line: {"step": .., "kind": "train"|"eval", ...metrics}."""

    def __init__(self, path: str | Path, *, append: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a" if append else "w", buffering=1)

    def log_config(self, config: dict[str, Any]) -> None:
        (self.path.parent / "config.json").write_text(json.dumps(config, indent=2, default=str))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        row = {"step": int(step), **{k: _clean(v) for k, v in metrics.items()}}
        self._fh.write(json.dumps(row, default=float) + "\n")

    def log_artifact(self, path: str | Path) -> None:
        pass  # artifacts already live in the run directory

    def close(self, status: str = "FINISHED") -> None:
        if not self._fh.closed:
            self._fh.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read metrics.jsonl; a torn last line (a killed run) is skipped, not fatal."""
    rows = []
    p = Path(path)
    if not p.exists():
        return rows
    for line in p.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
