"""A local Ray cluster that outlives the notebook kernel, so runs survive kernel restarts.

A cluster that `ray.init()` starts inside a kernel dies with that kernel, and so do the run's
actors, detached or not. Sessions therefore connect to (or start) a cluster of its own, via
`ray start --head`, and record its address in
`<project>/.workbench/ray_address` (or $WORKBENCH_STATE_DIR/ray_address), where the next kernel
finds it:

    address = connect(num_cpus=2)     # RAY_ADDRESS / recorded cluster / a new one, then ray.init
    hold(address)                     # this process runs on it: release it when the process ends
    live_runs()                       # [{name, status, step, max_steps}] of the runs on the cluster
    stop(address)                     # shut that cluster down (only that one; `ray stop` stops all)
    cluster_pids(address)             # its processes still alive (by the marker each one carries)

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

from workbench.errors import UserError

NAMESPACE = "workbench"
GOING = ("created", "starting", "running", "paused")  # a run in one of these is live
CLUSTER_ENV = "WORKBENCH_RAY_CLUSTER"  # carried by every process of a cluster started here: its port


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
    port = _free_port()
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


def use_token_auth() -> None:
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
            use_token_auth()  # our clusters require the token
    if address is None or (address != "auto" and not _reachable(address)):
        if not start_if_missing:
            raise UserError(
                "no live Ray cluster to attach to (none recorded in "
                f"{state_dir() / 'ray_address'} and RAY_ADDRESS is not set)"
            )
        address = start(num_cpus, num_gpus)
        use_token_auth()
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError) as e:
        raise UserError(f"cannot reach the Ray cluster at {address}: {e}") from None
    return address


def _port(address: str) -> str:
    return address.rpartition(":")[2]


def cluster_pids(address: str) -> list[int]:
    """Live processes of the cluster at `address`: those carrying its CLUSTER_ENV marker, and
    (for clusters started before the marker existed) those naming its GCS port on their command line."""
    port = _port(address)
    marker = f"{CLUSTER_ENV}={port}".encode()
    mark = re.compile(rb"(gcs_server_port=|gcs-address=[0-9.]+:|--address=[0-9.]+:)%s(\b|$)" % port.encode())
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ")
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark.search(cmd) or marker in env:
            pids.append(int(p.name))
    return pids


def stop(address: str, timeout: float = 15.0) -> None:
    """Shut down the cluster at `address` only (`ray stop` would stop every cluster on the machine)."""
    pids = cluster_pids(address)
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
    path = state_dir() / "ray_address"
    if path.is_file() and path.read_text().strip() == address:
        path.unlink()


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
    code = "import sys; from workbench.engine.cluster import stop; stop(sys.argv[1])"
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


# ---------------------------------------------------------------- `workbench cluster status|stop`
def add_parser(subparsers, name: str):
    p = subparsers.add_parser(name, help="the local Ray cluster of interactive sessions: list its runs, or stop it",
                              description="status: the runs on the recorded local cluster; stop: shut that cluster down.")
    sub = p.add_subparsers(dest="cluster_command", metavar="ACTION")
    sub.add_parser("status", help="list the runs on the cluster (name, status, step)")
    st = sub.add_parser("stop", help="shut the cluster down (refused while a run is going, unless --force)")
    st.add_argument("--force", action="store_true", help="stop it even with runs going (they stop at once, mid-step)")
    return p


def run(args) -> int:
    action = getattr(args, "cluster_command", None)
    if action not in ("status", "stop"):
        raise UserError("say what to do: `workbench cluster status` or `workbench cluster stop`")
    address = recorded_address()
    if address is None or not _reachable(address):
        print(f"no workbench Ray cluster is running (none recorded in {state_dir() / 'ray_address'} is reachable)")
        if address is not None:
            (state_dir() / "ray_address").unlink(missing_ok=True)
        return 0
    use_token_auth()  # our clusters require the token
    connect(address=address, start_if_missing=False)
    runs = live_runs()
    if action == "status":
        print(f"Ray cluster {address}: {len(runs)} run(s)")
        for r in runs:
            print(f"  {r['name']}  {r['status']}  step {r['step']}/{r['max_steps']}")
        return 0
    going = [r["name"] for r in runs if r["status"] in GOING]
    if going and not args.force:
        raise UserError(f"runs still going on {address}: {going}; stop them first (Session.attach(name).stop()) or use --force")
    import ray

    ray.shutdown()
    stop(address)
    print(f"stopped the Ray cluster at {address}" + (f" (runs stopped: {going})" if going else ""))
    return 0
