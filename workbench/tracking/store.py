"""Where MLflow runs live, and creating experiments and runs there safely.

The tracking URI is resolved once, in this order:

1. an explicit `tracking_uri` argument (config `tracking.tracking_uri`, `--tracking-uri`);
2. the `MLFLOW_TRACKING_URI` environment variable (e.g. a shared `mlflow server`);
3. `sqlite:///<project>/mlflow.db`, where <project> is `project_dir` if given, else the nearest
   folder at or above the current working directory holding `pyproject.toml` or `.git` (the
   repository root when you work inside a clone, also from `notebooks/`), else the working
   directory itself. Artifacts of experiments created here go to `<project>/mlartifacts/`.

A plain path to a SQLite file (`mlflow.db`, `runs/x.sqlite`, or any existing file) and a relative
`sqlite:///` path become `sqlite:///<absolute path>`, so every process, and a kernel spec, names the
same file whatever its working directory.

`check_reachable(uri)` fails fast with a one-line UserError before anything uses the store: a
server that does not answer, a file that is not an SQLite database, a folder that cannot be
written. Read-only commands (`workbench compare`, `queries`, history priors) use `read_client`,
which also refuses a store that does not exist yet instead of creating an empty one (checked once
per store and process: `require_store`).

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
import sqlite3
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
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
_STORE_HINT = ("`workbench run` (tracking.mlflow=true, the default), a Session and `workbench sweep` "
               "create it with their first tracked run; run one from this project, or point MLFLOW_TRACKING_URI at your store")


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
        return normalize_uri(env)
    folder = Path(project_dir).resolve() if project_dir is not None else project_root()
    return f"sqlite:///{folder / 'mlflow.db'}"


def resolve_tracking_uri(tracking_uri: str | None = None) -> str:
    """The store to use: `tracking_uri` (normalized, see `normalize_uri`), else the default."""
    if tracking_uri and tracking_uri.strip():
        return normalize_uri(tracking_uri)
    return default_tracking_uri()


def normalize_uri(uri: str) -> str:
    """A plain path to a SQLite file (ending in .db/.sqlite/.sqlite3, or an existing file), or a
    relative sqlite:/// path, as sqlite:///<absolute path>; any other URI unchanged."""
    uri = uri.strip()
    scheme = urllib.parse.urlparse(uri).scheme
    if not scheme:
        path = Path(uri).expanduser()
        if path.suffix.lower() in _SQLITE_SUFFIXES or path.is_file():
            return f"sqlite:///{path.resolve()}"
        return uri
    path = sqlite_path(uri)
    if path is not None and not path.is_absolute():
        query = uri.partition("?")[2]
        return f"sqlite:///{path.resolve()}" + (f"?{query}" if query else "")
    return uri


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


def server_problem(uri: str, timeout: float = 3.0) -> str | None:
    """Why the MLflow server at http(s) `uri` cannot be used, or None when it answers in time."""
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as resp:
            resp.read(64)
    except urllib.error.HTTPError as e:
        if e.code >= 500:
            return f"it answered HTTP {e.code}"
    except (urllib.error.URLError, OSError) as e:
        return str(getattr(e, "reason", e))
    return None


def check_reachable(uri: str, timeout: float = 3.0, *, must_exist: bool = False) -> None:
    """Fail fast with a one-line UserError when the tracking store cannot be used.

    http(s): the server must answer within `timeout` seconds (any HTTP status below 500).
    sqlite: an existing file must be an SQLite database; without `must_exist` its folder is
    created and must be writable; with `must_exist` (read-only use) the file must hold an MLflow
    store already, and nothing is created.
    """
    scheme = urllib.parse.urlparse(uri).scheme
    if scheme in ("http", "https"):
        problem = server_problem(uri, timeout)
        if problem is not None:
            raise UserError(
                f"MLflow tracking server {uri} is not reachable ({problem}); start one "
                "(`workbench ui` or `mlflow server`) or set MLFLOW_TRACKING_URI to a reachable "
                "server / a sqlite:/// path"
            )
        return
    if scheme == "sqlite":
        path = sqlite_path(uri)
        if path is None:
            return  # in-memory
        if path.is_dir():
            raise UserError(f"tracking store {uri}: {path} is a folder, not an SQLite database file")
        if must_exist and not path.exists():
            raise UserError(f"no MLflow store at {path} ({_STORE_HINT})")
        if not must_exist:
            _check_writable(path, uri)
        _check_sqlite_file(path, uri, must_exist)
        return
    if scheme in ("", "file"):
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() != "true":
            raise UserError(
                f"tracking store {uri}: a folder store is not supported by MLflow any more; give an "
                "SQLite file (--tracking-uri mlflow.db, or sqlite:///PATH) or an http:// server"
            )
        path = Path(urllib.parse.urlparse(uri).path if scheme == "file" else uri)
        if must_exist and not path.is_dir():
            raise UserError(f"no MLflow store at {path} ({_STORE_HINT})")
        if not must_exist:
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


def _check_sqlite_file(path: Path, uri: str, must_exist: bool) -> None:
    """UserError unless `path` (when it exists) opens as an SQLite database; with `must_exist`,
    one holding MLflow's tables. Opened read-only: the check never creates nor changes the file."""
    if not path.exists():
        return
    if not os.access(path, os.R_OK):
        raise UserError(f"tracking store {uri}: file {path} is not readable")
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        if is_locked_error(e):
            return  # a database another process is writing: it is one
        raise UserError(f"tracking store {uri}: {path} is not an SQLite database ({e}); give another file") from None
    if must_exist and "experiments" not in tables:
        raise UserError(f"no MLflow store at {path}: the database has no MLflow tables ({_STORE_HINT})")


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


_EXISTING: set[str] = set()  # stores this process found to exist: checked once, not on every read


def require_store(uri: str) -> None:
    """`check_reachable(uri, must_exist=True)`, once per store and process: readers call it per
    query (a comparison reads every run's curve, a sweep's monitor polls), and a store that existed
    still does."""
    if uri not in _EXISTING:
        check_reachable(uri, must_exist=True)
        _EXISTING.add(uri)


def read_client(tracking_uri: str | None = None):
    """An MlflowClient on a store that exists (for reading): a UserError instead of creating one."""
    uri = resolve_tracking_uri(tracking_uri)
    require_store(uri)
    return client(uri)


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
