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
