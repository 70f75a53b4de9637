"""Shared fixtures for the tracking tests: one real SQLite MLflow store per test session."""

from __future__ import annotations

import socket
import uuid

import pytest

from workbench.tracking.store import ensure_experiment


@pytest.fixture(scope="session")
def tracking_uri(tmp_path_factory) -> str:
    # Creating the store runs MLflow's schema migration (seconds): once per session.
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    ensure_experiment("warmup", uri)
    return uri


@pytest.fixture
def experiment(tracking_uri) -> str:
    """A fresh experiment name in the shared store (tests stay independent)."""
    name = f"exp-{uuid.uuid4().hex[:8]}"
    ensure_experiment(name, tracking_uri)
    return name


@pytest.fixture
def free_port() -> int:
    """A TCP port nothing listens on (bound once and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 over its own SQLite store: its http:// URI (MLflow over
    http cannot delete points, so the engine reconciles with it instead)."""
    import os
    import signal
    import subprocess
    import time
    import urllib.request

    from workbench.commands.ui import server_command

    folder = tmp_path_factory.mktemp("mlflow-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(folder / "server.log", "wb")
    proc = subprocess.Popen(server_command(f"sqlite:///{folder / 'mlflow.db'}", port=port), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(uri + "/health", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mlflow server did not start: {(folder / 'server.log').read_text()[-2000:]}") from None
                time.sleep(0.5)
        yield uri
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
