"""Connecting to an existing Ray cluster that requires token authentication (RAY_AUTH_MODE=token).

A real head node is started here with `ray start` (its own temp dir and a token given through
the environment: ~/.ray/auth_token is never touched) and killed by PID at the end. Drivers run
in subprocesses, each with its own HOME: with the cluster's token in ~/.ray/auth_token the run
connects; without a token, or with a wrong one, it stops with "authentication failed" (not
"cannot reach") and leaves no Ray process behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from workbench.engine import cluster

pytestmark = pytest.mark.slow
RAY = str(Path(sys.executable).with_name("ray"))
DRIVER = """
import sys
from workbench.config import run_config_from_dict
from workbench.engine.cluster import connect_for_run
from workbench.errors import UserError
try:
    connect_for_run(run_config_from_dict({}, {"resources.ray_address": sys.argv[1]}))
except UserError as e:
    print("USERERROR", e, flush=True)
    sys.exit(2)
import ray
print("CONNECTED", ray.cluster_resources().get("CPU"), flush=True)
ray.shutdown()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def pids_with(marker: str) -> set[int]:
    """PIDs whose command line mentions `marker` (this cluster's temp dir)."""
    out = set()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker.encode() in (p / "cmdline").read_bytes():
                    out.add(int(p.name))
            except OSError:
                pass
    return out


def start_cluster(mode: str, tag: str):
    """A head node with RAY_AUTH_MODE=`mode` in its own temp dir; yields (address, token, temp dir)."""
    temp = f"/tmp/wb{tag}{os.getpid()}"  # short: Ray's socket paths live under it
    token = uuid.uuid4().hex
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    env.update(RAY_AUTH_MODE=mode, RAY_AUTH_TOKEN=token)
    cmd = [RAY, "start", "--head", f"--port={port}", f"--temp-dir={temp}", "--num-cpus=1", "--include-dashboard=false",
           "--disable-usage-stats"]  # fmt: skip
    try:
        for _attempt in range(3):  # on a loaded machine the raylet may give up waiting for its agents (~16 s)
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=500, env=env)
            if proc.returncode == 0:
                break
            kill_cluster(temp, port)
        else:
            pytest.fail(f"could not start the {mode} test cluster: {proc.stderr.strip().splitlines()[-1:]}")
        yield f"127.0.0.1:{port}", token, temp
    finally:
        kill_cluster(temp, port)
        shutil.rmtree(temp, ignore_errors=True)
    assert not pids_with(temp)


@pytest.fixture(scope="module")
def token_cluster():
    yield from start_cluster("token", "auth")


@pytest.fixture(scope="module")
def open_cluster():
    yield from start_cluster("disabled", "open")


def kill_cluster(temp: str, port: int) -> None:
    """Kill this test's cluster only: the processes naming its temp dir or its GCS port."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids_with(temp):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(2)
    cluster.stop(f"127.0.0.1:{port}")


def drive(address: str, home: Path, token_env: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    env.update(HOME=str(home), RAY_py_gcs_connect_timeout_s="20")
    if token_env is not None:
        env["RAY_AUTH_TOKEN"] = token_env
    return subprocess.run([sys.executable, "-c", DRIVER, address], capture_output=True, text=True, timeout=400, env=env)


def test_the_drivers_token_file_is_sent(token_cluster, tmp_path):
    address, token, temp = token_cluster
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text(token)
    proc = drive(address, tmp_path)
    assert proc.returncode == 0 and "CONNECTED 1.0" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("token_env,needle", [(None, "this driver has no token"), ("not-the-token", "was refused")], ids=["none", "wrong"])
def test_a_missing_or_wrong_token_is_an_authentication_failure(token_cluster, tmp_path, token_env, needle):
    address, _, temp = token_cluster
    before = pids_with(temp)
    proc = drive(address, tmp_path, token_env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("USERERROR"))
    assert f"authentication failed at the Ray cluster {address}" in line and needle in line and "cannot reach" not in line
    assert pids_with(temp) == before  # the failed driver left no Ray process behind


def test_a_driver_with_a_token_still_connects_to_a_cluster_without_authentication(open_cluster, tmp_path):
    address, _, _ = open_cluster
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text(uuid.uuid4().hex)
    proc = drive(address, tmp_path)
    assert proc.returncode == 0 and "CONNECTED 1.0" in proc.stdout, proc.stdout + proc.stderr
