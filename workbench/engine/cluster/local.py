"""The recorded local Ray cluster that outlives the notebook kernel, so runs survive kernel restarts.

A cluster that `ray.init()` starts inside a kernel dies with that kernel, and so do the run's
actors, detached or not. Sessions therefore connect to (or start) a cluster of their own, via
`ray start --head`, and record its address in
`<project>/.workbench/ray_address` (or $WORKBENCH_STATE_DIR/ray_address), where the next kernel
finds it (bootstrap.connect does the finding and connecting):

    address = start(num_cpus=2)       # `ray start --head`, recorded
    hold(address)                     # this process runs on it: release it when the process ends
    live_runs()                       # [{name, status, step, max_steps}] of the runs on the cluster
    stop(address)                     # shut that cluster down (only that one; `ray stop` stops all)
    cluster_pids(address)             # its processes still alive (by the marker each one carries)
    pids_with_env(STATE_DIR_ENV, d)   # every process started with that environment entry
    terminate(pids)                   # SIGTERM, then SIGKILL what is still alive

Every process of a cluster started here (GCS, raylet, agents, workers) carries the environment
variable WORKBENCH_RAY_CLUSTER=<port>, so `stop` and the tests find exactly that cluster's
processes, never another user's.

Who stops it: a cluster that outlives the kernel is the point (a run survives a kernel restart),
but batch work (papermill, `workbench sweep`) must leave no Ray process behind. So a process
that runs sessions on the recorded cluster `hold`s it, and when that process exits (a kernel
shut down or restarted, a papermill execution ending) it stops the cluster if no other holder
is alive and no run on it is still going. A kernel restart mid-run therefore keeps the cluster
and its run; `workbench cluster stop` ends it by hand, `workbench cluster status` lists its runs.
Clusters named by RAY_ADDRESS or resources.ray_address (shared ones) are never stopped.
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

from workbench.engine.cluster.common import NAMESPACE, free_port
from workbench.errors import UserError

GOING = ("created", "starting", "running", "paused")  # a run in one of these is live
CLUSTER_ENV = "WORKBENCH_RAY_CLUSTER"  # carried by every process of a cluster started here: its port
STATE_DIR_ENV = "WORKBENCH_STATE_DIR"  # where the cluster's address is recorded, when not <project>/.workbench


def state_dir() -> Path:
    env = os.environ.get(STATE_DIR_ENV)
    if env:
        return Path(env)
    from workbench.tracking.store import project_root

    return project_root() / ".workbench"


def recorded_address() -> Optional[str]:
    path = state_dir() / "ray_address"
    return path.read_text().strip() if path.is_file() else None


def reachable(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def start(num_cpus: Optional[int] = None, num_gpus: Optional[int] = None, attempts: int = 3) -> str:
    """`_start_head`, tried `attempts` times: on a busy machine Ray's raylet can miss its 30 s
    start-up window ("The current node timed out during startup"); a later try usually makes it."""
    for i in range(attempts):
        try:
            return _start_head(num_cpus, num_gpus)
        except UserError as e:
            if i == attempts - 1 or "timed out" not in str(e):
                raise
    raise AssertionError("unreachable")


def _start_head(num_cpus: Optional[int] = None, num_gpus: Optional[int] = None) -> str:
    """Start a head node in the background; record and return its address.

    Its processes carry CLUSTER_ENV=<port> (see the module doc).

    Ray binds its own services to the node's address (it ignores a loopback --node-ip-address);
    the dashboard, which would be an HTTP server, is left off.
    """
    port = free_port()
    cmd = [_ray_executable(), "start", "--head", f"--port={port}", "--include-dashboard=false", "--disable-usage-stats"]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if num_gpus is not None:
        cmd.append(f"--num-gpus={num_gpus}")
    # token authentication on (the services listen on the node's address, not only loopback)
    env = dict(os.environ, RAY_AUTH_MODE="token", **{CLUSTER_ENV: str(port)})
    env.setdefault("RAY_agent_register_timeout_ms", "120000")  # agents start slowly on a loaded machine
    subprocess.run([_ray_executable(), "get-auth-token", "--generate"], capture_output=True, env=env, timeout=180)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    except subprocess.TimeoutExpired:
        proc = subprocess.CompletedProcess(cmd, 1, "", "`ray start --head` timed out after 180 s")
    if proc.returncode != 0:
        stop(f"127.0.0.1:{port}")  # a head that timed out may have left its GCS and agents running
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


def _port(address: str) -> str:
    return address.rpartition(":")[2]


def _processes():
    """(pid, command line, environment entries) of every other process this user may read."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            yield int(p.name), (p / "cmdline").read_bytes().replace(b"\0", b" "), (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue


def cluster_pids(address: str) -> list[int]:
    """Live processes of the cluster at `address`: those carrying its CLUSTER_ENV marker, and
    (for clusters started before the marker existed) those naming its GCS port on their command line."""
    port = _port(address)
    marker = f"{CLUSTER_ENV}={port}".encode()
    mark = re.compile(rb"(gcs_server_port=|gcs-address=[0-9.]+:|--address=[0-9.]+:)%s(\b|$)" % port.encode())
    return [pid for pid, cmd, env in _processes() if mark.search(cmd) or marker in env]


def pids_with_env(name: str, value: str) -> list[int]:
    """Live processes (other than this one) whose environment sets `name` to `value`: all a
    process started with it started in turn, e.g. a sweep point's papermill, kernel and Ray."""
    entry = f"{name}={value}".encode()
    return [pid for pid, _, env in _processes() if entry in env]


def stop(address: str, timeout: float = 15.0) -> None:
    """Shut down the cluster at `address` only (`ray stop` would stop every cluster on the machine)."""
    terminate(cluster_pids(address), timeout)
    path = state_dir() / "ray_address"
    if path.is_file() and path.read_text().strip() == address:
        path.unlink()


def terminate(pids: list[int], timeout: float = 15.0) -> None:
    """SIGTERM the processes `pids`, and SIGKILL those still alive `timeout` seconds later."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + timeout
        while time.time() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
            time.sleep(0.2)
        pids = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        if not pids:
            break


def live_runs() -> list[dict]:
    """The runs on the connected cluster: name, status, step, max_steps (a run whose actor does
    not answer is listed with status 'unreachable')."""
    import ray

    out = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry.get("namespace") != NAMESPACE or not str(entry.get("name", "")).startswith("run:"):
            continue
        name = entry["name"][len("run:"):]
        try:
            st = ray.get(ray.get_actor(entry["name"], namespace=NAMESPACE).status.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - the actor died or hangs
            st = {"status": "unreachable"}
        out.append({"name": name, "status": st.get("status"), "step": st.get("step"), "max_steps": st.get("max_steps")})
    return out


def _holders() -> Path:
    return state_dir() / "holders"


def hold(address: str) -> bool:
    """Mark this process as running sessions on the workbench-started cluster `address`; when it
    exits, `release` stops that cluster unless another holder lives or a run is still going.
    False (nothing held) for clusters this project did not start (RAY_ADDRESS, shared ones)."""
    import atexit

    if address not in started_addresses() or getattr(hold, "_held", None) == address:
        return False
    folder = _holders()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(os.getpid())).write_text(address)
    hold._held = address  # type: ignore[attr-defined]
    atexit.register(release, address)  # registered after ray.init: runs before Ray's own exit handler
    return True


def release(address: str) -> bool:
    """This process is done with `address`: stop the cluster if nobody else holds it and no run
    on it is going. Returns True when it stopped the cluster. Why it kept one goes to
    <state dir>/release.log."""
    me = _holders() / str(os.getpid())
    me.unlink(missing_ok=True)
    for other in _holders().glob("*") if _holders().is_dir() else []:
        if other.read_text().strip() == address and Path(f"/proc/{other.name}").exists():
            return _kept(address, f"process {other.name} still uses it")
        other.unlink(missing_ok=True)  # a holder that died without releasing
    try:
        import ray

        if not ray.is_initialized():
            return _kept(address, "Ray is not initialised here: cannot see its runs")
        going = [r["name"] for r in live_runs() if r["status"] in GOING]
        if going:  # a run outlives this process (a kernel restart): keep its cluster
            return _kept(address, f"runs still going: {going}")
        ray.shutdown()
    except Exception as e:  # noqa: BLE001 - cannot tell: keep the cluster rather than lose a run
        return _kept(address, f"cannot list its runs: {type(e).__name__}: {e}")
    # In a process of its own: a kernel being shut down is killed a few seconds later (papermill,
    # Jupyter), sooner than a loaded machine's GCS takes to exit; the stopper outlives it.
    code = "import sys; from workbench.engine.cluster.local import stop; stop(sys.argv[1])"
    subprocess.Popen([sys.executable, "-c", code, address], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return True


def _kept(address: str, why: str) -> bool:
    try:
        with open(state_dir() / "release.log", "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()} kept {address}: {why}\n")
    except OSError:
        pass
    return False
