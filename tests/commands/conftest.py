"""The commands' tests use the tracking tests' real SQLite MLflow store and free port."""

from tests.tracking.conftest import experiment, free_port, tracking_uri  # noqa: F401 - fixtures
