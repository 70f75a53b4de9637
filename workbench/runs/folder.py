"""Run folders and configs for `workbench.Session`: where a run lives and how it was configured.

    path = default_config_path()            # <source tree>/configs/quickstart.yaml, or None
    items = override_items(["train.lr=1e-4"])   # {'train.lr': 0.0001}; a dict passes through
    swap_recipe(file_recipe, "scalerl-loo-no-fp32")   # the `recipe` override that keeps local tweaks
    folder = run_folder("my-run")           # a path, else <project>/runs/<name>
    cfg = saved_config(folder)              # config.json, else the latest checkpoint's config
    run_id, uri, created = open_mlflow_run("my-run", folder, experiment="workbench")
"""

from __future__ import annotations

from workbench.rl.recipe import swap_recipe  # noqa: F401  (re-exported: Session and tests use it here)

import contextlib
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from workbench.config import RunConfig, run_config_from_dict
from workbench.configtools import parse_override
from workbench.errors import UserError


def default_config_path() -> Optional[Path]:
    """configs/quickstart.yaml of the source tree this package lives in (None if absent)."""
    path = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
    return path if path.is_file() else None


def override_items(overrides: dict[str, Any] | list[str] | None) -> dict[str, Any]:
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    if isinstance(overrides, (list, tuple)):
        return dict(parse_override(o) for o in overrides)
    raise UserError(
        f"overrides must be a dict {{'train.lr': 1e-4}} or a list of 'key=value' strings, not {type(overrides).__name__}"
    )


def unique_name(base: str) -> str:
    return f"{base}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def run_folder(target: str | Path) -> Path:
    """`target` as a run folder: a path, else <project>/runs/<target>."""
    from workbench.tracking.store import project_root

    path = Path(target)
    if (path / "metrics.jsonl").is_file() or (path / "checkpoints").is_dir():
        return path.resolve()
    by_name = project_root() / "runs" / str(target)
    if (by_name / "metrics.jsonl").is_file() or (by_name / "checkpoints").is_dir():
        return by_name
    raise UserError(f"no run in {path} (nor in {by_name}): expected metrics.jsonl or checkpoints/ there")


def saved_config(out_dir: Path) -> Optional[RunConfig]:
    """The run's config: config.json (written at run start), else the latest checkpoint's state."""
    from workbench.runs.checkpoint import CheckpointStore

    path = out_dir / "config.json"
    data = json.loads(path.read_text()) if path.is_file() else None
    if data is None:
        state = CheckpointStore(out_dir / "checkpoints").latest_state()
        data = state.get("config") if state else None
    return run_config_from_dict(data) if data else None


@contextlib.contextmanager
def _quiet(logger: str):
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(level)


def open_mlflow_run(name: str, out_dir: Path, *, experiment: str, run_id: Optional[str] = None,
                    parent_run_id: Optional[str] = None, tracking_uri: Optional[str] = None) -> tuple[str, str, bool]:
    """The MLflow run a session logs into: a new one, or `run_id` reopened (a resumed run, a
    sweep's child). Created in the calling process: SQLite stores must not be created by several
    processes at once. Returns (run_id, tracking_uri, created)."""
    from workbench.tracking import store

    uri = store.resolve_tracking_uri(tracking_uri)
    if run_id is None:
        with _quiet("mlflow.store.db.utils"):  # "Creating initial MLflow database tables..."
            store.ensure_experiment(experiment, uri)
        tags = {"workbench.kind": "session", "workbench.run": name, "workbench.out_dir": str(out_dir)}
        return store.create_run(experiment, name, tags, parent_run_id=parent_run_id, tracking_uri=uri), uri, True
    try:
        status = store.run_status(run_id, uri)
    except Exception as e:  # noqa: BLE001 - MlflowException for an unknown id
        raise UserError(f"no MLflow run {run_id!r} in {uri}: {e}") from None
    if status != "RUNNING":
        store.retry_locked(store.client(uri).update_run, run_id, status="RUNNING")
    return run_id, uri, False
