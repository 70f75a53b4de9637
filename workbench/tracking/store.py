"""Where MLflow runs live, and creating experiments and runs there safely.

The tracking URI is resolved once, in this order:

1. an explicit `tracking_uri` argument (config `tracking.tracking_uri`, `--tracking-uri`);
2. the `MLFLOW_TRACKING_URI` environment variable (e.g. a shared `mlflow server`);
3. `sqlite:///<project>/mlflow.db`, where <project> is `project_dir` if given, else the nearest
   folder at or above the current working directory holding `pyproject.toml` or `.git` (the
   repository root when you work inside a clone, also from `notebooks/`), else the working
   directory itself. Artifacts of experiments created here go to `<project>/mlartifacts/`.

SQLite stores are shared by several processes (sweep points, Ray actors). Two processes that
create the database or the same experiment at once race on the schema migration or get
"database is locked"; so the parent process calls `ensure_experiment` (which creates the store
and the experiment) BEFORE any child starts, and every write goes through `retry_locked`.

    uri = default_tracking_uri()
    exp_id = ensure_experiment("ablations", uri)
    parent = create_run("ablations", "sweep", {"kind": "sweep"}, tracking_uri=uri)
    child = create_run("ablations", "scalerl", {}, parent_run_id=parent, tracking_uri=uri)
    end_run(child, "FINISHED", tracking_uri=uri)
"""

from __future__ import annotations

import os
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from workbench.errors import UserError

T = TypeVar("T")

PARENT_TAG = "mlflow.parentRunId"
RUN_STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")
_PROJECT_MARKERS = ("pyproject.toml", ".git")


def project_root(start: str | Path | None = None) -> Path:
    """Nearest folder at or above `start` (default: cwd) with pyproject.toml or .git, else start."""
    here = Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / m).exists() for m in _PROJECT_MARKERS):
            return folder
    return here


def default_tracking_uri(project_dir: str | Path | None = None) -> str:
    """$MLFLOW_TRACKING_URI if set, else sqlite:///<project>/mlflow.db (see module doc)."""
    env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if env:
        return env
    folder = Path(project_dir).resolve() if project_dir is not None else project_root()
    return f"sqlite:///{folder / 'mlflow.db'}"


def resolve_tracking_uri(tracking_uri: str | None = None) -> str:
    return tracking_uri or default_tracking_uri()


def sqlite_path(uri: str) -> Path | None:
    """File behind a sqlite:/// URI (None for in-memory or non-sqlite URIs)."""
    if not uri.startswith("sqlite:"):
        return None
    rest = uri[len("sqlite:") :]
    if not rest.startswith("///"):
        return None  # sqlite:// (memory) or malformed
    path = rest[3:].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path)


def default_artifact_location(uri: str, experiment: str) -> str | None:
    """Artifacts next to a SQLite store (<dir>/mlartifacts/<experiment>); None: server decides."""
    db = sqlite_path(uri)
    if db is None:
        return None
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in experiment) or "experiment"
    return (db.resolve().parent / "mlartifacts" / safe).as_uri()


def check_reachable(uri: str, timeout: float = 3.0) -> None:
    """Fail fast with a clear UserError when the tracking store cannot be used.

    http(s): the server must answer within `timeout` seconds (any HTTP status below 500).
    sqlite / file: the folder must exist (it is created) and be writable.
    """
    scheme = urllib.parse.urlparse(uri).scheme
    if scheme in ("http", "https"):
        url = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                resp.read(64)
        except urllib.error.HTTPError as e:
            if e.code >= 500:
                raise UserError(f"MLflow tracking server {uri} answered HTTP {e.code}; check the server") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise UserError(
                f"MLflow tracking server {uri} is not reachable ({reason}); start one "
                "(`workbench ui` or `mlflow server`) or set MLFLOW_TRACKING_URI to a reachable "
                "server / a sqlite:/// path"
            ) from None
        return
    if scheme == "sqlite":
        path = sqlite_path(uri)
        if path is None:
            return  # in-memory
        _check_writable(path, uri)
        return
    if scheme in ("", "file"):
        path = Path(urllib.parse.urlparse(uri).path if scheme == "file" else uri)
        _check_writable(path / "probe", uri)
        return
    # postgresql://, mysql://, databricks: left to MLflow's own error messages


def _check_writable(path: Path, uri: str) -> None:
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"tracking store {uri}: cannot create folder {folder} ({e.strerror})") from None
    if not os.access(folder, os.W_OK):
        raise UserError(f"tracking store {uri}: folder {folder} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"tracking store {uri}: file {path} is not writable")


def is_locked_error(exc: BaseException) -> bool:
    """True for SQLite 'database is locked' errors, however MLflow wrapped them."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e).lower()
        if "database is locked" in text or "database table is locked" in text:
            return True
        e = e.__cause__ or e.__context__
    return False


def retry_locked(fn: Callable[..., T], *args: Any, attempts: int = 10, **kwargs: Any) -> T:
    """Call fn, retrying with jittered backoff while SQLite says 'database is locked'."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - filtered just below
            if attempt == attempts - 1 or not is_locked_error(e):
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


def client(tracking_uri: str | None = None):
    """An MlflowClient bound to an explicit URI (never the global mlflow state)."""
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))


def ensure_experiment(name: str, tracking_uri: str | None = None, artifact_location: str | None = None) -> str:
    """Create (once) the store and the experiment `name`; return its id.

    Call it in the parent process before children start. A deleted experiment of that name is
    restored (MLflow refuses to create a second one with the same name).
    """
    from mlflow.exceptions import MlflowException

    if not name or not str(name).strip():
        raise UserError("experiment name must not be empty")
    uri = resolve_tracking_uri(tracking_uri)
    check_reachable(uri)
    c = client(uri)
    exp = retry_locked(c.get_experiment_by_name, name)
    if exp is None:
        location = artifact_location or default_artifact_location(uri, name)
        try:
            return retry_locked(c.create_experiment, name, artifact_location=location)
        except MlflowException:
            exp = retry_locked(c.get_experiment_by_name, name)  # someone else created it first
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        retry_locked(c.restore_experiment, exp.experiment_id)
    return exp.experiment_id


def _experiment_id(c, experiment: str, uri: str) -> str:
    exp = retry_locked(c.get_experiment_by_name, experiment)
    if exp is not None and exp.lifecycle_stage != "deleted":
        return exp.experiment_id
    if str(experiment).isdigit():
        try:
            return retry_locked(c.get_experiment, str(experiment)).experiment_id
        except Exception:  # noqa: BLE001 - not an id either: create it by name below
            pass
    return ensure_experiment(experiment, uri)


def create_run(
    experiment: str,
    name: str,
    tags: Mapping[str, Any] | None = None,
    parent_run_id: str | None = None,
    tracking_uri: str | None = None,
) -> str:
    """Start a run (status RUNNING) in `experiment` (a name, or an id); return its run_id.

    A child run carries the `mlflow.parentRunId` tag, which the MLflow UI nests under the parent.
    """
    uri = resolve_tracking_uri(tracking_uri)
    c = client(uri)
    exp_id = _experiment_id(c, experiment, uri)
    all_tags = {str(k): str(v) for k, v in (tags or {}).items()}
    if parent_run_id:
        all_tags[PARENT_TAG] = parent_run_id
    run = retry_locked(c.create_run, exp_id, run_name=name, tags=all_tags)
    return run.info.run_id


def end_run(run_id: str, status: str = "FINISHED", tracking_uri: str | None = None) -> None:
    """Set a run's terminal status: FINISHED, FAILED or KILLED."""
    status = status.upper()
    if status not in ("FINISHED", "FAILED", "KILLED"):
        raise UserError(f"run status must be FINISHED, FAILED or KILLED, got {status!r}")
    c = client(tracking_uri)
    retry_locked(c.set_terminated, run_id, status=status)


def run_status(run_id: str, tracking_uri: str | None = None) -> str:
    return retry_locked(client(tracking_uri).get_run, run_id).info.status
