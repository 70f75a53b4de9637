"""The bubblewrap command line of a sandbox worker, and the fail-closed probe `require_sandbox`.

    require_sandbox()          # returns, or raises one UserError line: why bwrap cannot run, and the fix
    argv = worker_argv(limits)  # bwrap ... python3 -I -S -B -c <server source> <limits json>

What a worker sees: the interpreter and its libraries read-only (/usr, and the interpreter's own
prefix when it lives elsewhere), a minimal /dev, /proc of its own PID namespace, a private small
tmpfs on /tmp (emptied after every check), nothing else: no home, no project, no run folders, no
/etc. It has
no network (--unshare-net), its own PID, IPC, UTS and user namespaces (uid/gid 65534; started as
nobody when we are root, see `drop_root`), a new
session (no terminal injection), a cleared environment, and it dies with its parent.

There is no unsandboxed fallback: a code check either runs inside this or does not run.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from workbench.errors import UserError

SERVER_SOURCES = [Path(__file__).with_name(name) for name in ("harness.py", "server.py")]  # sent as one -c text
PYTHON_ENV = "WORKBENCH_SANDBOX_PYTHON"  # the interpreter checks run with (default: the system python3)
NOBODY = "65534"
FIX = "install it: `apt-get install bubblewrap` (root) or `make sandbox`"


def sandbox_python() -> str:
    """The interpreter of the checks: $WORKBENCH_SANDBOX_PYTHON, else the system python3, else ours.
    A system interpreter is preferred: ours may live under the home folder, which checks must not see."""
    for cand in (os.environ.get(PYTHON_ENV), "/usr/bin/python3", "/usr/local/bin/python3", sys.executable):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise UserError(f"no python3 for the sandbox; set {PYTHON_ENV}=/path/to/python3")


def _interpreter_binds(python: str) -> list[str]:
    """Read-only binds for the interpreter: /usr (with the merged-/usr links), and the real prefix
    of an interpreter that lives outside /usr (a pyenv or conda install)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for link in ("lib", "lib64", "bin", "sbin"):
        target = Path("/") / link
        if target.is_symlink():
            args += ["--symlink", os.readlink(target), str(target)]
        elif target.is_dir():
            args += ["--ro-bind", str(target), str(target)]
    real = Path(os.path.realpath(python))
    if not str(real).startswith("/usr/"):
        prefix = real.parent.parent  # <prefix>/bin/python3.x
        args += ["--ro-bind", str(prefix), str(prefix)]
    return args


def worker_argv(wire_limits: dict, python: str | None = None, extra: list[str] | None = None) -> list[str]:
    """The full command of one long-lived fork-server worker (`extra`: more bwrap arguments, the
    worker's cgroup binds from cgroups.py)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise UserError(f"code checks need bubblewrap (bwrap), which is not installed; {FIX}")
    python = python or sandbox_python()
    return [
        bwrap, "--unshare-all", "--unshare-user", "--uid", NOBODY, "--gid", NOBODY,
        # inside the worker's own user namespace only: the fork server needs it to give each check a
        # PID namespace; every check drops all capabilities first (server.py)
        "--cap-add", "CAP_SYS_ADMIN",
        "--die-with-parent", "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
        *_interpreter_binds(python),
        "--dev", "/dev", "--proc", "/proc", "--size", str(wire_limits["tmp_kb"] * 1024), "--tmpfs", "/tmp", "--chdir", "/tmp",
        *(extra or []),
        python, "-I", "-S", "-B", "-c", server_source(), json.dumps(wire_limits),
    ]


def server_source() -> str:
    """The fork server's program: harness.py's functions, then server.py (both stdlib only)."""
    return "\n".join(path.read_text() for path in SERVER_SOURCES)


def drop_root() -> dict:
    """subprocess.Popen arguments that start bwrap as nobody when we are root. Root's processes are
    exempt from RLIMIT_NPROC (a fork bomb would not stop) and root should not own the checks' files."""
    if os.geteuid() != 0:
        return {}
    return {"user": int(NOBODY), "group": int(NOBODY), "extra_groups": []}


def _why(stderr: str) -> str:
    text = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
    low = stderr.lower()
    if "operation not permitted" in low or "permission denied" in low or "no permissions" in low:
        return (
            f"bubblewrap cannot create namespaces here ({text}). User namespaces are blocked: in Docker "
            "the default seccomp profile blocks them (run the container with --security-opt seccomp=unconfined "
            "or a profile that allows clone/unshare of namespaces); on Ubuntu 24.04+ AppArmor restricts them "
            "(sysctl kernel.apparmor_restrict_unprivileged_userns=0); elsewhere check "
            "sysctl user.max_user_namespaces > 0. Code tasks do not run unsandboxed."
        )
    return f"the code sandbox (bubblewrap) does not start here: {text}. Code tasks do not run unsandboxed."


@functools.lru_cache(maxsize=1)
def _probe() -> str:
    """'' when a worker starts and runs one confined check, else the reason (cached per process)."""
    from workbench.tasks.sandbox.limits import Limits

    try:
        argv = worker_argv(Limits().wire())
    except UserError as e:
        return str(e)
    req = {"id": 0, "a": {"mode": "serve", "code": "def f():\n    return 1\n", "entry_point": "f"},
           "b": {"nonce": "probe", "test": "def check(c):\n    assert c() == 1\n", "prefix": "", "entry_point": "f"}}
    try:
        body = json.dumps(req)
        done = subprocess.run(argv, input=f"{len(body.encode()):010d}{body}", capture_output=True, text=True, timeout=60,
                              cwd="/", **drop_root())
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"the code sandbox (bubblewrap) does not start here: {e}. Code tasks do not run unsandboxed."
    if done.returncode != 0 or not done.stdout.strip():
        return _why(done.stderr)
    resp = json.loads(done.stdout.splitlines()[0])
    if 'probe {"ok": true}' not in resp.get("out", ""):
        return _why(resp.get("out", ""))
    return ""


def require_sandbox() -> None:
    """Return if sandboxed code checks work on this machine; else raise one UserError line saying why
    and how to fix it. Code tasks call this before they start: they never fall back to running
    model-written code unsandboxed."""
    why = _probe()
    if why:
        raise UserError(why)
