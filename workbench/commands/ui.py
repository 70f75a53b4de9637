"""`workbench ui`: the MLflow web UI over the project's tracking store.

    workbench ui                         # http://127.0.0.1:5000, store = default_tracking_uri()
    workbench ui --port 5001 --host 0.0.0.0 --tracking-uri sqlite:////data/mlflow.db
    workbench ui --tracking-uri runs/mlflow.db   # a path to an SQLite file works too

Runs `mlflow server` with this store as its backend (and, for a SQLite store, artifacts served
from the `mlartifacts/` folder next to it) in the foreground until Ctrl-C. Bound to 127.0.0.1 by
default: the UI has no login, so expose it on a network (--host 0.0.0.0) only where that is safe.
Other processes (notebooks, sweeps, Ray actors on other machines) can then log to it by setting
MLFLOW_TRACKING_URI=http://HOST:PORT.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import subprocess
import sys

from workbench.errors import UserError
from workbench.tracking.store import check_reachable, resolve_tracking_uri, server_problem, sqlite_path


def server_command(tracking_uri: str, host: str = "127.0.0.1", port: int = 5000, workers: int = 1) -> list[str]:
    """The `mlflow server` command line for this store."""
    if tracking_uri.startswith(("http://", "https://")):
        raise UserError(f"{tracking_uri} is already a tracking server: open it in a browser instead of `workbench ui`")
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri,
           "--host", host, "--port", str(port), "--workers", str(workers)]
    db = sqlite_path(tracking_uri)
    if db is not None:
        # Experiments created from the UI keep their artifacts next to the database too.
        cmd += ["--artifacts-destination", str(db.resolve().parent / "mlartifacts")]
    if host not in ("127.0.0.1", "localhost"):
        cmd += ["--allowed-hosts", "*"]  # reached by other names than localhost
    return cmd


def check_bindable(host: str, port: int) -> None:
    """UserError unless a server can listen on host:port: the host must resolve to an address of
    this machine, and the port must be free (and allowed: ports below 1024 need root)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host or "0.0.0.0", port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise UserError(f"cannot bind to host {host}: {e.strerror}; give an address of this machine with --host") from None
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does: TIME_WAIT is no obstacle
        try:
            s.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise UserError(f"port {port} on {host} is in use: pick another with --port") from None
            if e.errno == errno.EACCES:
                raise UserError(f"cannot bind to port {port} on {host}: {e.strerror} (ports below 1024 need root)") from None
            raise UserError(f"cannot bind to host {host}: {e.strerror}; give an address of this machine with --host") from None


def add_parser(subparsers, name: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help="start the MLflow UI on the project's tracking store", description=__doc__.split("\n\n")[0],
                              epilog="examples:\n  workbench ui\n  workbench ui --port 5001 --tracking-uri runs/other/mlflow.db",
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--tracking-uri", help="backend store, a URI or SQLite file (default: $MLFLOW_TRACKING_URI or the project's mlflow.db)")
    p.add_argument("--workers", type=int, default=1, help="server worker processes (default 1)")
    return p


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be in 1..65535, got {args.port}")
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1, got {args.workers}")
    uri = resolve_tracking_uri(args.tracking_uri)
    if uri.startswith(("http://", "https://")):
        problem = server_problem(uri)
        if problem is not None:
            raise UserError(f"nothing answers at {uri} ({problem}): `workbench ui` serves a store it opens itself; "
                            "give --tracking-uri PATH.db (or sqlite:///PATH), or unset MLFLOW_TRACKING_URI")
    cmd = server_command(uri, args.host, args.port, args.workers)
    check_reachable(uri)
    check_bindable(args.host, args.port)
    print(f"MLflow UI on http://{args.host}:{args.port}  (store: {uri}; Ctrl-C stops it)", flush=True)
    env = dict(os.environ)
    # MLflow 3's server-side job runner (GenAI evaluation jobs) is unused here and slows start/stop.
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    proc = subprocess.Popen(cmd, env=env)
    # A SIGTERM to us must not orphan the server: turn it into the same clean stop as Ctrl-C.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
