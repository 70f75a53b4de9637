"""The fork server that runs INSIDE bubblewrap (stdlib only: it is run by the sandbox's interpreter
as `python3 -I -S -B -c <this file's text> <limits json>`, never imported by workbench code).

Protocol: the parent writes requests, each a 10-digit length then that many bytes of JSON
`{"id", "nonce", "mode": "call"|"stdio"|"assert", "code", "entry_point", "inputs", "test"}`, to
stdin and reads responses, one JSON line each `{"id", "status", "cpu", "wall", "out", "rc"}`,
from stdout, in order.
`status` is "exited", "killed" (a signal, e.g. the CPU rlimit), "wall" (the wall-time backstop) or
"output" (more than the output cap). `out` is everything the check wrote, capped; the check's own
results are the lines that start with its nonce. The server never judges: the parent compares.

Each check is one child made by a raw clone() into a NEW PID namespace: it is PID 1 there, so
when it exits the kernel kills everything it started (a double-forked daemon included), and
`os.kill(-1, 9)` only reaches its own processes. The server holds CAP_SYS_ADMIN in the worker's
user namespace only to make that namespace; the child drops every capability before any check
code runs, then sets rlimits (CPU seconds, address space, processes, open files, file size, no
core), stdin /dev/null, stdout+stderr into a pipe the server reads with a cap, every other
descriptor closed (the check cannot write to the server's response pipe). The server is not
dumpable, so a check cannot ptrace it or read its memory through /proc, and it empties /tmp after
every check. (A fresh user + mount namespace per check, with its own /tmp and /proc, was tried
and dropped for speed: its uid/gid maps and mounts cost about 0.4 ms of CPU per check here.)
"""

import ctypes
import io
import json
import math
import os
import resource
import select
import shutil
import signal
import sys
import time
import traceback

CLONE_NEWPID = 0x20000000
ARCH = os.uname().machine
SYS_CLONE = {"x86_64": 56, "aarch64": 220}[ARCH]
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}[ARCH]
LIBC = ctypes.CDLL(None, use_errno=True)
# capset(2) arguments, built once: _LINUX_CAPABILITY_VERSION_3 for this thread; effective,
# permitted and inheritable all zero
CAP_HEADER = (ctypes.c_uint32 * 2)(0x20080522, 0)
CAP_NONE = (ctypes.c_uint32 * 6)()
NULL_FD = os.open("/dev/null", os.O_RDONLY)  # opened once; each check's stdin
HEADER_BYTES = 10  # a request's length, zero-padded decimal (local.py writes it)
RLIMITS = ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CORE")


def clone_check():
    """fork() into a new PID namespace; returns the child's pid (0 in the child)."""
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = LIBC.syscall(SYS_CLONE, CLONE_NEWPID | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    err = ctypes.get_errno()
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, "clone(CLONE_NEWPID) failed: " + os.strerror(err))
    return pid


def rlimit_values(limits):
    """(resource, value) pairs, in RLIMITS order; the CPU limit in whole seconds (its SIGKILL is a timeout)."""
    values = (math.ceil(limits["cpu"]), limits["mem"], limits["nproc"], limits["nofile"], limits["fsize"], 0)
    return [(getattr(resource, name), value) for name, value in zip(RLIMITS, values)]


def confine(rlimits, out_w):
    """In the child, before any check code runs: no capabilities, rlimits, closed descriptors."""
    if LIBC.syscall(SYS_CAPSET, CAP_HEADER, CAP_NONE) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    for res, value in rlimits:
        resource.setrlimit(res, (value, value))
    os.dup2(NULL_FD, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    os.closerange(3, 1 << 16)
    # sys.stdin/stdout/stderr are the server's objects, now over these descriptors; their buffers
    # are empty (the server reads with os.read and flushes every response)


def emit(nonce, obj):
    os.write(1, (nonce + " " + json.dumps(obj) + "\n").encode())


def error_text(exc):
    return (type(exc).__name__ + ": " + str(exc))[:300]


def run_call(req):
    """Function-call form: one result line per case, the value JSON-serialised (or the error)."""
    nonce, env = req["nonce"], {"__name__": "__main__"}
    exec(compile(req["code"], "<completion>", "exec"), env)
    fn = env.get(req["entry_point"])
    if not callable(fn):
        raise NameError("the code defines no function " + repr(req["entry_point"]))
    for i, case in enumerate(req["inputs"]):
        try:
            value = fn(*case.get("args", []), **case.get("kwargs", {}))
            text = json.dumps(value)
        except BaseException as e:  # noqa: B036 - SystemExit inside the function is an error too
            emit(nonce, {"i": i, "err": error_text(e)})
            continue
        emit(nonce, {"i": i, "r": text})


def run_stdio(req):
    """stdin/stdout form: the program runs once per case with fresh globals and the case's stdin."""
    nonce, code = req["nonce"], compile(req["code"], "<completion>", "exec")
    real_stdin, real_stdout = sys.stdin, sys.stdout
    for i, stdin in enumerate(req["inputs"]):
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
        buf = io.BytesIO()
        sys.stdout = io.TextIOWrapper(buf, encoding="utf-8", write_through=True)
        err = None
        try:
            exec(code, {"__name__": "__main__"})
        except SystemExit as e:  # a program may end with sys.exit(); a non-zero code is a crash
            if e.code not in (None, 0):
                err = "SystemExit: " + str(e.code)
        except BaseException as e:  # noqa: B036
            err = error_text(e)
        try:
            sys.stdout.flush()
            out = buf.getvalue().decode("utf-8", "replace")
        except BaseException:  # noqa: B036 - the program closed or replaced it
            out, err = "", err or "the program closed its stdout"
        sys.stdin, sys.stdout = real_stdin, real_stdout
        emit(nonce, {"i": i, "out": out, **({"err": err} if err else {})})


def run_assert(req):
    """HumanEval form: the code, then the test's `check(candidate)`; one "ok" line if it returns."""
    env = {"__name__": "__main__"}
    exec(compile(req["code"], "<completion>", "exec"), env)
    exec(compile(req["test"], "<test>", "exec"), env)
    env["check"](env[req["entry_point"]])
    emit(req["nonce"], {"ok": True})


def child(req, rlimits, out_w):
    try:
        confine(rlimits, out_w)
    except BaseException as e:  # noqa: B036
        os.write(out_w, ("sandbox: cannot confine the check: " + error_text(e)).encode())
        os._exit(99)
    try:
        {"call": run_call, "stdio": run_stdio, "assert": run_assert}[req["mode"]](req)
    except AssertionError as e:
        emit(req["nonce"], {"fail": error_text(e) or "AssertionError"})
    except BaseException as e:  # noqa: B036
        emit(req["nonce"], {"err": error_text(e)})
        traceback.print_exc(limit=3)
    try:
        sys.stdout.flush()
    finally:
        os._exit(0)


def supervise(pid, out_r, limits):
    """Read the child's output (capped) until EOF, then reap it; kill it on the wall backstop or the
    cap. EOF normally means the check is over: when its PID 1 exits the kernel kills the rest of its
    namespace, which closes every copy of the pipe. (One wake-up per output chunk: no pidfd unless
    the check closed its output and runs on.)"""
    chunks, size, status, start, killed = [], 0, "exited", time.monotonic(), False
    poller = select.poll()
    poller.register(out_r, select.POLLIN)
    while True:
        left = limits["wall"] - (time.monotonic() - start)
        if left <= 0 and not killed:
            status, killed = "wall", True
            os.kill(pid, signal.SIGKILL)
        if not poller.poll(None if killed else max(0.0, left) * 1000):
            continue
        data = os.read(out_r, 1 << 16)
        if not data:
            break
        if size <= limits["out"]:
            chunks.append(data)
            size += len(data)
            if size > limits["out"] and not killed:
                status, killed = "output", True
                os.kill(pid, signal.SIGKILL)
    done, wstatus, usage = os.wait4(pid, os.WNOHANG)
    if done == 0:  # still exiting, or it closed its output and runs on: wait, within the backstop
        pidfd = os.pidfd_open(pid)
        left = limits["wall"] - (time.monotonic() - start)
        if not killed and not select.select([pidfd], [], [], max(0.0, left))[0]:
            status = "wall"
            os.kill(pid, signal.SIGKILL)
        os.close(pidfd)
        _, wstatus, usage = os.wait4(pid, 0)
    if status == "exited" and os.WIFSIGNALED(wstatus):
        status = "killed"
    rc = os.waitstatus_to_exitcode(wstatus)
    cpu = usage.ru_utime + usage.ru_stime
    wall = time.monotonic() - start
    out = b"".join(chunks)[: limits["out"]].decode("utf-8", "replace")
    return {"status": status, "rc": rc, "cpu": cpu, "wall": wall, "out": out}


def read_exactly(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_request():
    """One request, read exactly (a fixed-width length, then that many bytes): no read-ahead, so
    the next checks' requests are still in the pipe, not in the memory a check's child inherits."""
    head = read_exactly(HEADER_BYTES)
    body = read_exactly(int(head)) if head else None
    return json.loads(body) if body else None


def warm_up():
    """The first compile / exec / json in a fresh process costs ~1 ms of CPU; pay it once here,
    not in every forked check (which inherits the warmed state), and keep the GC off shared pages."""
    env = {}
    exec(compile("def f(a, b):\n    return [a + b, str(a), {'k': (a, b)}]\n", "<warm-up>", "exec"), env)
    json.loads(json.dumps(env["f"](1, 2)))
    import gc

    gc.collect()
    gc.freeze()


def inside_worker():
    """True only inside the bwrap worker (bwrap.py): PID 2 under bwrap's init, and a root with no
    /etc and no /home (only /usr and friends are bound). The server deletes what is in /tmp and
    runs code: it must never run on a real system."""
    return os.getpid() == 2 and not os.path.exists("/etc") and not os.path.exists("/home")


def empty_tmp():
    """Remove what the last check left in /tmp (the worker's private tmpfs), so no check sees another's files."""
    if not inside_worker():
        raise SystemExit("sandbox server: not inside its bwrap worker; refusing to empty /tmp")
    with os.scandir("/tmp") as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass


def serve(limits):
    if not inside_worker():
        raise SystemExit("sandbox server: not inside its bwrap worker (see workbench/tasks/sandbox/bwrap.py); refusing to run")
    LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no check can ptrace or read the server's memory
    warm_up()
    rlimits = rlimit_values(limits)
    os.chdir("/tmp")
    responses = sys.stdout.buffer
    while True:
        req = read_request()
        if req is None:
            return
        out_r, out_w = os.pipe()
        pid = clone_check()
        if pid == 0:
            os.close(out_r)
            child(req, rlimits, out_w)
        os.close(out_w)
        try:
            resp = supervise(pid, out_r, limits)
        finally:
            os.close(out_r)
        empty_tmp()
        resp["id"] = req["id"]
        responses.write(json.dumps(resp).encode() + b"\n")
        responses.flush()


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
