"""The manual built once per test session (strict, into a temp folder), for the site tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def build_site(dest: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of the repository's manual into `dest` (what `make docs` runs)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(dest)],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("site")
    proc = build_site(dest)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    return dest
