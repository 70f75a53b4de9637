"""workbench.tracking.store: tracking URI resolution, experiments and runs in a real SQLite store."""

from __future__ import annotations

import sqlite3
import time

import pytest
from mlflow import MlflowClient

from workbench.errors import UserError
from workbench.tracking import store


def test_env_var_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert store.default_tracking_uri(tmp_path) == "http://mlflow.example:5000"


def test_default_is_sqlite_in_project_root(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    sub = tmp_path / "notebooks"
    sub.mkdir()
    monkeypatch.chdir(sub)
    # From a sub-folder the project root (with pyproject.toml) holds the store.
    assert store.default_tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert store.default_tracking_uri(sub) == f"sqlite:///{sub.resolve() / 'mlflow.db'}"
    assert store.sqlite_path(store.default_tracking_uri()) == tmp_path.resolve() / "mlflow.db"


def test_ensure_experiment_is_idempotent_and_keeps_artifacts_next_to_db(tracking_uri):
    a = store.ensure_experiment("idem", tracking_uri)
    b = store.ensure_experiment("idem", tracking_uri)
    assert a == b
    exp = MlflowClient(tracking_uri).get_experiment(a)
    db_dir = store.sqlite_path(tracking_uri).parent
    assert exp.artifact_location == (db_dir / "mlartifacts" / "idem").as_uri()


def test_deleted_experiment_is_restored(tracking_uri):
    c = MlflowClient(tracking_uri)
    eid = store.ensure_experiment("to-delete", tracking_uri)
    c.delete_experiment(eid)
    assert store.ensure_experiment("to-delete", tracking_uri) == eid
    assert c.get_experiment(eid).lifecycle_stage == "active"


def test_empty_experiment_name_is_a_user_error(tracking_uri):
    with pytest.raises(UserError, match="experiment name"):
        store.ensure_experiment("  ", tracking_uri)


def test_create_child_run_and_end_it(tracking_uri, experiment):
    parent = store.create_run(experiment, "sweep", {"kind": "sweep"}, tracking_uri=tracking_uri)
    child = store.create_run(experiment, "point", {"seed": 3}, parent_run_id=parent, tracking_uri=tracking_uri)
    run = MlflowClient(tracking_uri).get_run(child)
    assert run.info.run_name == "point"
    assert run.info.status == "RUNNING"
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.tags["seed"] == "3"
    store.end_run(child, "failed", tracking_uri=tracking_uri)
    assert store.run_status(child, tracking_uri) == "FAILED"
    with pytest.raises(UserError, match="FINISHED, FAILED or KILLED"):
        store.end_run(child, "DONE", tracking_uri=tracking_uri)


def test_create_run_creates_a_missing_experiment(tracking_uri):
    rid = store.create_run("made-on-demand", "r", tracking_uri=tracking_uri)
    run = MlflowClient(tracking_uri).get_run(rid)
    assert MlflowClient(tracking_uri).get_experiment(run.info.experiment_id).name == "made-on-demand"


def test_unreachable_server_fails_fast_with_clear_message(free_port):
    uri = f"http://127.0.0.1:{free_port}"
    t0 = time.monotonic()
    with pytest.raises(UserError, match="not reachable"):
        store.check_reachable(uri, timeout=2.0)
    assert time.monotonic() - t0 < 10  # a short timeout, not a hang


def test_unwritable_sqlite_path_is_a_user_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(UserError, match="cannot create folder"):
        store.check_reachable(f"sqlite:///{blocker / 'sub' / 'mlflow.db'}")
    with pytest.raises(UserError):
        store.ensure_experiment("x", f"sqlite:///{blocker / 'mlflow.db'}")


def test_retry_locked_retries_only_lock_errors():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "ok"

    assert store.retry_locked(flaky) == "ok"
    assert len(calls) == 3

    def broken():
        calls.append(2)
        raise sqlite3.OperationalError("no such table: runs")

    with pytest.raises(sqlite3.OperationalError):
        store.retry_locked(broken)
    assert calls.count(2) == 1


def test_locked_error_detected_through_wrapping():
    try:
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError as inner:
            raise RuntimeError("MLflow wrapped it") from inner
    except RuntimeError as outer:
        assert store.is_locked_error(outer)
    assert not store.is_locked_error(RuntimeError("other"))


def test_a_plain_path_to_a_sqlite_file_is_an_absolute_sqlite_uri(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    here = tmp_path.resolve()
    assert store.resolve_tracking_uri("mlflow.db") == f"sqlite:///{here / 'mlflow.db'}"
    assert store.resolve_tracking_uri("runs/x.sqlite") == f"sqlite:///{here / 'runs' / 'x.sqlite'}"
    assert store.resolve_tracking_uri("sqlite:///rel.db") == f"sqlite:///{here / 'rel.db'}"  # relative URI
    (tmp_path / "store").write_bytes(b"")  # an existing file, whatever its name
    assert store.resolve_tracking_uri("store") == f"sqlite:///{here / 'store'}"
    for uri in ("http://h:5000", f"sqlite:///{here / 'a.db'}", "postgresql://u@h/db"):
        assert store.resolve_tracking_uri(uri) == uri
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "env.db")
    assert store.resolve_tracking_uri() == f"sqlite:///{here / 'env.db'}"
    # and the store is really created there, from another working directory too
    (tmp_path / "elsewhere").mkdir()
    uri = store.resolve_tracking_uri("mlflow.db")
    monkeypatch.chdir(tmp_path / "elsewhere")
    store.ensure_experiment("plain-path", uri)
    assert (tmp_path / "mlflow.db").is_file() and not (tmp_path / "elsewhere" / "mlflow.db").exists()


def test_a_file_that_is_not_a_database_is_a_one_line_user_error(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_text("these are notes, not a database\n")
    for check in (lambda u: store.check_reachable(u), lambda u: store.check_reachable(u, must_exist=True),
                  lambda u: store.ensure_experiment("x", u), lambda u: store.read_client(u)):
        with pytest.raises(UserError, match=f"{junk} is not an SQLite database") as e:
            check(f"sqlite:///{junk}")
        assert "\n" not in str(e.value)
    assert junk.read_text() == "these are notes, not a database\n"  # untouched


def test_reading_refuses_a_missing_store_and_creates_nothing(tmp_path, tracking_uri):
    missing = tmp_path / "no" / "dir" / "m.db"
    with pytest.raises(UserError, match=f"no MLflow store at {missing} \\(`workbench run` \\(tracking.mlflow=true, the default\\)"):
        store.read_client(f"sqlite:///{missing}")
    assert not (tmp_path / "no").exists()
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()  # an SQLite file without MLflow's tables
    with pytest.raises(UserError, match="no MLflow store at .*no MLflow tables"):
        store.check_reachable(f"sqlite:///{empty}", must_exist=True)
    store.check_reachable(tracking_uri, must_exist=True)  # a real store passes
    with pytest.raises(UserError, match="is a folder"):
        store.check_reachable(f"sqlite:///{tmp_path}")


def test_a_folder_store_is_a_user_error_not_mlflows_exception(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(UserError, match="folder store is not supported.*--tracking-uri mlflow.db"):
        store.ensure_experiment("x", str(tmp_path / "mlruns"))
