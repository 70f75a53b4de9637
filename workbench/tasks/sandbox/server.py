"""The fork server that runs INSIDE bubblewrap (stdlib only: it is run by the sandbox's interpreter
as `python3 -I -S -B -c <this file's text> <limits json>`, never imported by workbench code).

Protocol: the parent writes requests, each a 10-digit length then that many bytes of JSON
`{"id", "a": part, "b": part or absent}`, to stdin and reads responses, one JSON line each
`{"id", "status", "cpu", "wall", "out", "rc"}`, from stdout, in order. Part "a" is what the
completion's process gets (`mode` "call" | "stdio" | "serve", `code`, `entry_point`, `inputs`,
`nonce`); part "b", for assert-style tests only, is the harness's (`nonce`, `test`, `prefix`,
`entry_point`; harness.py). `status` is "exited", "killed" (a signal, e.g. the CPU rlimit),
"cpu" (the check's processes together over the CPU limit, where the worker has cgroups),
"memory" (the check's processes together over the memory limit: the cgroup's OOM kill), "wall"
(the wall-time backstop) or "output" (more than the output cap). `out` is everything the check
wrote, capped; the check's own results are the lines that start with its nonce. The server never
judges: the parent compares.

No memory shared between checks: every check is cloned by the ZYGOTE, a process forked from the
server before it read any request, which never reads one (it only receives descriptors). The
server writes each part of a request into its own memfd and hands the zygote those and the
check's output pipe; the clone reads its own request from them. So a check's processes hold no
earlier check's code, test or output, not even freed memory of them.

Each check is one child made by a raw clone() into a NEW PID namespace (CLONE_PARENT: the server
is its parent and reaps it): it is PID 1 there, so when it exits the kernel kills everything it
started (a double-forked daemon included), and `os.kill(-1, 9)` only reaches its own processes.
The zygote holds CAP_SYS_ADMIN in the worker's user namespace only to make that namespace; the
child drops every capability before any check code runs, then sets rlimits (CPU seconds, address
space, processes, open files, file size, no core), stdin /dev/null, stdout+stderr into a pipe the
server reads with a cap, every other descriptor closed but its request's memfds. The server and
the zygote are not dumpable, so a check cannot ptrace them or read their memory through /proc,
and the server empties /tmp after every check.

Whole-check limits: where the parent made cgroups for this worker (v1 memory, pids and cpuacct,
bound at /cg/<controller>; cgroups.py) the zygote is put in them once, so every check's processes
are too: memory and processes are bounded as a total, and the server reads the cgroup's CPU time
(all the check's processes, reaped or not) and kills the check past its limit. Checks run one at
a time per worker, so the cgroup's counters between two reads are one check's.
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
import socket
import sys
import time
import traceback

CLONE_NEWPID = 0x20000000
CLONE_PARENT = 0x00008000
CGROUP_ROOT = "/cg"  # where bwrap.py binds this worker's cgroups, if any
CPU_POLL_S = 0.05  # with cgroups: how often a running check's CPU time is read
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
    """fork() into a new PID namespace, as the server's child (CLONE_PARENT); the child's pid (0 in the child)."""
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = LIBC.syscall(SYS_CLONE, CLONE_NEWPID | CLONE_PARENT | signal.SIGCHLD, 0, 0, 0, 0)
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


def confine(rlimits, out_w, keep):
    """In the child, before any check code runs: no capabilities, rlimits, closed descriptors
    (but `keep`: its request's memfds)."""
    if LIBC.syscall(SYS_CAPSET, CAP_HEADER, CAP_NONE) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    for res, value in rlimits:
        resource.setrlimit(res, (value, value))
    os.dup2(NULL_FD, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
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


def run_one_process(a_fd):
    """Function-call and stdin/stdout checks: one process, which prints its nonce-tagged results."""
    req = read_part(a_fd)  # harness.py
    try:
        {"call": run_call, "stdio": run_stdio}[req["mode"]](req)
    except BaseException as e:  # noqa: B036
        emit(req["nonce"], {"err": error_text(e)})
        traceback.print_exc(limit=3)


def child(fds, rlimits):
    """The check's PID 1: confine, then run the request it reads from its own memfds."""
    out_w, parts = fds[0], fds[1:]
    try:
        confine(rlimits, out_w, parts)
    except BaseException as e:  # noqa: B036
        os.write(out_w, ("sandbox: cannot confine the check: " + error_text(e)).encode())
        os._exit(99)
    try:
        if len(parts) == 1:
            run_one_process(parts[0])
        else:
            run_assert_check(*parts)  # harness.py
        sys.stdout.flush()
    finally:
        os._exit(0)


def zygote(ctl, rlimits):
    """Clone one check per message (its descriptors: the output pipe, then the request's memfds).
    It never reads a request: each clone starts from this clean state and reads its own."""
    os.dup2(NULL_FD, 0)  # never the server's request or response pipes
    os.dup2(NULL_FD, 1)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 8, 4)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        pid = clone_check()
        if pid == 0:
            child(fds, rlimits)
        for fd in fds:
            os.close(fd)
        ctl.send(b"%d" % pid)


class Cgroups:
    """This worker's cgroups at /cg/<controller> (cgroups.py made them), or none: then `cpu()` is None."""

    def __init__(self):
        where = lambda c: os.path.join(CGROUP_ROOT, c)  # noqa: E731
        self.dirs = [where(c) for c in ("memory", "pids", "cpuacct") if os.path.isdir(where(c))]
        self.cpu_fd = os.open(where("cpuacct/cpuacct.usage"), os.O_RDONLY) if where("cpuacct") in self.dirs else None
        self.oom_fd = os.open(where("memory/memory.oom_control"), os.O_RDONLY) if where("memory") in self.dirs else None
        self.ooms = self.oom_kills()

    def admit(self, pid):
        for d in self.dirs:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(pid))

    def cpu(self):
        """The CPU seconds of every process in the cgroup so far (None without the controller)."""
        return None if self.cpu_fd is None else int(os.pread(self.cpu_fd, 64, 0)) / 1e9

    def oom_kills(self):
        if self.oom_fd is None:
            return 0
        for line in os.pread(self.oom_fd, 4096, 0).decode().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def new_oom_kill(self):
        """Whether the memory cgroup killed a process since the last call (the check that just ran)."""
        before, self.ooms = self.ooms, self.oom_kills()
        return self.ooms > before


def start_zygote(limits, cgroups):
    """Fork the zygote (before any request is read) and put it in the worker's cgroups."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        ours.close()
        try:
            zygote(theirs, rlimit_values(limits))
        finally:
            os._exit(0)
    theirs.close()
    cgroups.admit(pid)
    return ours


def memfd(part):
    fd = os.memfd_create("request", os.MFD_CLOEXEC)
    os.write(fd, json.dumps(part).encode())
    return fd


def run_check(ctl, req, limits, cgroups):
    """One check: the zygote clones it with its output pipe and request memfds; supervise it."""
    parts = [memfd(req["a"])] + ([memfd(req["b"])] if req.get("b") else [])
    out_r, out_w = os.pipe()
    cpu0 = cgroups.cpu()
    try:
        socket.send_fds(ctl, [b"c"], [out_w] + parts)
        answer = ctl.recv(32)
    finally:
        for fd in [out_w] + parts:
            os.close(fd)
    if not answer:
        raise SystemExit("sandbox server: the zygote is gone")
    try:
        resp = supervise(int(answer), out_r, limits, cgroups, cpu0)
    finally:
        os.close(out_r)
    if cpu0 is not None:
        resp["cpu"] = max(resp["cpu"], cgroups.cpu() - cpu0)
    if cgroups.new_oom_kill() and resp["status"] in ("exited", "killed"):
        resp["status"] = "memory"
    return resp


def supervise(pid, out_r, limits, cgroups, cpu0):
    """Read the child's output (capped) until EOF, then reap it; kill it on the wall backstop or the
    cap. EOF normally means the check is over: when its PID 1 exits the kernel kills the rest of its
    namespace, which closes every copy of the pipe. (One wake-up per output chunk: no pidfd unless
    the check closed its output and runs on.) With a CPU cgroup (cpu0 not None) it also reads the
    check's CPU time every CPU_POLL_S and kills it once all its processes together are past the limit."""
    chunks, size, status, start, killed = [], 0, "exited", time.monotonic(), False
    next_cpu = start + CPU_POLL_S
    poller = select.poll()
    poller.register(out_r, select.POLLIN)
    while True:
        now = time.monotonic()
        left = limits["wall"] - (now - start)
        if left <= 0 and not killed:
            status, killed = "wall", True
            os.kill(pid, signal.SIGKILL)
        if cpu0 is not None and not killed and now >= next_cpu:
            next_cpu = now + CPU_POLL_S
            if cgroups.cpu() - cpu0 >= limits["cpu"]:
                status, killed = "cpu", True
                os.kill(pid, signal.SIGKILL)
        wait_s = left if cpu0 is None else min(left, next_cpu - now)
        if not poller.poll(None if killed else max(0.0, wait_s) * 1000):
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
        while not killed:
            left = limits["wall"] - (time.monotonic() - start)
            step = left if cpu0 is None else min(left, CPU_POLL_S)
            if select.select([pidfd], [], [], max(0.0, step))[0]:
                break
            over_cpu = cpu0 is not None and cgroups.cpu() - cpu0 >= limits["cpu"]
            if over_cpu or time.monotonic() - start >= limits["wall"]:
                status, killed = ("cpu" if over_cpu else "wall"), True
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
    ast.literal_eval(to_literal(([1, "a"], {"k": (2.5, None)})))  # harness.py
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
    os.chdir("/tmp")
    cgroups = Cgroups()
    ctl = start_zygote(limits, cgroups)
    responses = sys.stdout.buffer
    while True:
        req = read_request()
        if req is None:
            return
        resp = run_check(ctl, req, limits, cgroups)
        empty_tmp()
        resp["id"] = req["id"]
        responses.write(json.dumps(resp).encode() + b"\n")
        responses.flush()


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
