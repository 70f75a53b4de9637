"""A local Ray cluster that outlives the notebook kernel, so runs survive kernel restarts.

A cluster that `ray.init()` starts inside a kernel dies with that kernel, and so do the run's
actors, detached or not. Sessions therefore connect to (or start) a cluster of its own, via
`ray start --head`, and record its address in
`<project>/.workbench/ray_address` (or $WORKBENCH_STATE_DIR/ray_address), where the next kernel
finds it:

    address = connect(num_cpus=2)     # RAY_ADDRESS / recorded cluster / a new one, then ray.init
    stop(address)                     # shut that cluster down (the CLI: `ray stop` stops all)
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from workbench.errors import UserError

NAMESPACE = "workbench"


def state_dir() -> Path:
    env = os.environ.get("WORKBENCH_STATE_DIR")
    if env:
        return Path(env)
    from workbench.tracking.store import project_root

    return project_root() / ".workbench"


def recorded_address() -> Optional[str]:
    path = state_dir() / "ray_address"
    return path.read_text().strip() if path.is_file() else None


def _reachable(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))  # free on every interface: Ray binds the node's address, not loopback
        return s.getsockname()[1]


def _ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def start(num_cpus: Optional[int] = None, num_gpus: Optional[int] = None) -> str:
    """Start a head node in the background; record and return its address.

    Ray binds its own services to the node's address (it ignores a loopback --node-ip-address);
    the dashboard, which would be an HTTP server, is left off.
    """
    port = _free_port()
    cmd = [_ray_executable(), "start", "--head", f"--port={port}", "--include-dashboard=false", "--disable-usage-stats"]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if num_gpus is not None:
        cmd.append(f"--num-gpus={num_gpus}")
    # token authentication on (the services listen on the node's address, not only loopback)
    env = dict(os.environ, RAY_AUTH_MODE="token")
    subprocess.run([_ray_executable(), "get-auth-token", "--generate"], capture_output=True, env=env, timeout=60)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    if proc.returncode != 0:
        raise UserError(f"could not start a local Ray cluster: {proc.stderr.strip().splitlines()[-1:]}")
    found = re.search(r"connect to the new instance at ([0-9.]+:%d)" % port, proc.stdout + proc.stderr)
    address = found.group(1) if found else f"{socket.gethostbyname(socket.gethostname())}:{port}"
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ray_address").write_text(address)
    with open(folder / "started", "a") as fh:  # every cluster started from here, for clean-up
        fh.write(address + "\n")
    return address


def started_addresses() -> list[str]:
    path = state_dir() / "started"
    return path.read_text().split() if path.is_file() else []


def _use_token_auth() -> None:
    """Send the cluster token (~/.ray/auth_token) from this driver, even if Ray is imported already."""
    os.environ["RAY_AUTH_MODE"] = "token"
    try:  # Ray reads its config once at import; this refreshes it (Ray >= 2.52)
        from ray._private.authentication.authentication_token_setup import _enable_token_auth

        _enable_token_auth()
    except ImportError:  # older Ray: no token authentication to enable
        pass


def token_available() -> bool:
    """True when this driver has a Ray auth token: $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    path = Path(path).expanduser() if path else Path.home() / ".ray" / "auth_token"
    try:
        return path.is_file() and bool(path.read_text().strip())
    except OSError:
        return False


def use_token_auth() -> None:
    """Public form of `_use_token_auth` for `launch.init_ray`: send this driver's token."""
    _use_token_auth()


def connect(
    num_cpus: Optional[int] = None,
    num_gpus: Optional[int] = None,
    address: Optional[str] = None,
    *,
    start_if_missing: bool = True,
) -> str:
    """ray.init against `address`, $RAY_ADDRESS, the recorded local cluster, or a new one."""
    import ray

    if ray.is_initialized():
        return ray.get_runtime_context().gcs_address
    address = address or os.environ.get("RAY_ADDRESS")
    if address is None:
        address = recorded_address()
        if address is not None:
            _use_token_auth()  # our clusters require the token
    if address is None or (address != "auto" and not _reachable(address)):
        if not start_if_missing:
            raise UserError(
                "no live Ray cluster to attach to (none recorded in "
                f"{state_dir() / 'ray_address'} and RAY_ADDRESS is not set)"
            )
        address = start(num_cpus, num_gpus)
        _use_token_auth()
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError) as e:
        raise UserError(f"cannot reach the Ray cluster at {address}: {e}") from None
    return address


def stop(address: str, timeout: float = 15.0) -> None:
    """Shut down the cluster at `address` only (`ray stop` would stop every cluster on the machine)."""
    port = address.rpartition(":")[2]
    mark = re.compile(rb"(gcs_server_port=|gcs-address=[0-9.]+:|--address=[0-9.]+:)%s(\b|$)" % port.encode())
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if mark.search(cmd):
                pids.append(int(p.name))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + timeout
        while time.time() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
            time.sleep(0.2)
    path = state_dir() / "ray_address"
    if path.is_file() and path.read_text().strip() == address:
        path.unlink()
