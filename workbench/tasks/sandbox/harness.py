"""Assert-style tests (HumanEval, MBPP, APPS-style) with the test OUTSIDE the completion's process.

Stdlib only, like server.py: bwrap.py sends this file's text in front of server.py's as the fork
server's source; workbench code never imports it.

A check of this form is two processes in its own PID namespace, both confined (server.py):

    harness  (PID 1 of the check)   the spec's prefix (the prompt's own helpers), the test, the nonce
       |  one socket: arguments out, results back, as text that `ast.literal_eval` reads
    completion (forked first)       the prefix + the completion; serves `candidate(...)` calls

The harness forks the completion's process BEFORE it reads its own part of the request, so the
nonce and the test's code and constants are never in the completion's memory (the request's two
parts come in two memfds, server.py). In the test, `candidate` (and the entry point's name) is a
proxy: each call sends `(args, kwargs)` as a literal, and the answer comes back as a literal that
the harness reads with `ast.literal_eval`: numbers, strings, bytes, tuples, lists, dicts, sets,
None and booleans, nothing else. So no object of the completion's (an always-true `__eq__`, an
`int` subclass) reaches the test's comparisons, and nothing the completion patches (builtins, a
trace function, the frames it walks) is in the harness's process. Whatever the completion's
process does, the harness decides:
- a result that is not plain data, over RESULT_CAP bytes, or nested too deep: `fail`, at once
  (no `except` in the test can swallow it);
- an exception inside the call: raised in the test as the same builtin type (a test may expect
  it; uncaught it is an `error`; an AssertionError is a `fail`, as in one process);
- SystemExit / KeyboardInterrupt inside the call, or the process ending (an early exit, a kill,
  its CPU limit): `error` (and the CPU limit makes it a `timeout`, judged by CPU time in spec.py).
The completion's process cannot signal the harness (PID 1 of its namespace ignores signals it has
no handler for; SIGINT's handler is removed) nor read its memory (not dumpable).

A test that passes something that is not plain data to `candidate` (a function, an object) cannot
cross: that check is an `error` saying so. HumanEval's 164 tests pass only plain data.
"""

import ast
import builtins
import json
import math
import os
import signal
import socket

RESULT_CAP = 1 << 20  # bytes of one call's result (or arguments) as a literal
DEPTH_CAP = 64  # nesting of containers in one result
FRAME_DIGITS = 10


class NotPlain(Exception):
    """A value that is not plain data (only exact builtin literal types cross between the processes)."""


class CheckOver(BaseException):
    """The harness's verdict is decided (`fail` or `err`); no `except Exception` in the test catches it."""

    def __init__(self, key, text):
        super().__init__(text)
        self.key, self.text = key, text


def to_literal(value, depth=0):
    """`value` as text that `ast.literal_eval` reads back to an equal value of the same types; raises NotPlain."""
    if depth > DEPTH_CAP:
        raise NotPlain("nested deeper than %d" % DEPTH_CAP)
    kind = type(value)
    if value is None or kind in (bool, int, str, bytes, complex):
        return repr(value)
    if kind is float:
        if math.isnan(value):
            raise NotPlain("nan")
        return repr(value) if math.isfinite(value) else ("1e999" if value > 0 else "-1e999")
    if kind in (list, tuple):
        inner = ", ".join(to_literal(v, depth + 1) for v in value)
        return "[" + inner + "]" if kind is list else "(" + inner + ("," if len(value) == 1 else "") + ")"
    if kind is set:
        return "{" + ", ".join(to_literal(v, depth + 1) for v in value) + "}" if value else "set()"
    if kind is dict:
        return "{" + ", ".join(to_literal(k, depth + 1) + ": " + to_literal(v, depth + 1) for k, v in value.items()) + "}"
    raise NotPlain(kind.__name__)


def send_frame(sock, text):
    data = text.encode("utf-8", "surrogatepass")
    sock.sendall(b"%010d" % len(data) + data)


def recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(min(n - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return data


def recv_frame(sock, cap):
    """The next frame's text; None at EOF; raises CheckOver(fail) when over `cap` or garbled."""
    head = recv_exactly(sock, FRAME_DIGITS)
    if head is None:
        return None
    if not head.isdigit():
        raise CheckOver("fail", "the completion's process sent a garbled reply")
    size = int(head)
    if size > cap:
        raise CheckOver("fail", "a result of %d bytes (the cap is %d): not plain data of a sane size" % (size, cap))
    data = recv_exactly(sock, size)
    return None if data is None else data.decode("utf-8", "surrogatepass")


def error_name(exc):
    return (type(exc).__name__ + ": " + str(exc))[:300]


def read_part(fd):
    """One part of the request, from its memfd (server.py writes it whole before the check starts)."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0)
    os.close(fd)
    return json.loads(data)


# -- the completion's process --------------------------------------------------------------------
def serve_candidate(part, sock):
    """Run the completion, then answer calls until the harness closes the socket."""
    env = {"__name__": "__main__"}
    try:
        exec(compile(part["code"], "<completion>", "exec"), env)
        fn = env.get(part["entry_point"])
        if not callable(fn):
            raise NameError("the code defines no function " + repr(part["entry_point"]))
    except BaseException as e:  # noqa: B036 - SystemExit at load is the completion's error too
        send_frame(sock, "X" + error_name(e))
        return
    send_frame(sock, "L")
    while True:
        text = recv_frame(sock, 1 << 62)
        if text is None:
            return
        args, kwargs = ast.literal_eval(text)
        try:
            value = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - sent to the test as the same builtin type
            send_frame(sock, "E" + json.dumps([type(e).__name__, str(e)[:300]]))
            continue
        except BaseException as e:  # noqa: B036 - SystemExit, KeyboardInterrupt: the check is an error
            send_frame(sock, "X" + error_name(e))
            return
        try:
            send_frame(sock, "R" + to_literal(value))
        except NotPlain as e:
            send_frame(sock, "N" + str(e))
        except RecursionError:
            send_frame(sock, "N" + "nested too deep")


# -- the harness's process -----------------------------------------------------------------------
class Candidate:
    """The test's `candidate`: a call crosses to the completion's process as plain data."""

    def __init__(self, sock, pid, name):
        self.sock, self.pid, self.__name__ = sock, pid, name

    def ended(self):
        """The completion's process has ended: reap it (its CPU time then counts) and say how."""
        _, status = os.waitpid(self.pid, 0)
        how = ("killed by signal %d" % os.WTERMSIG(status)) if os.WIFSIGNALED(status) else "exited"
        return CheckOver("err", "the completion's process ended during the test (" + how + ")")

    def reply(self):
        text = recv_frame(self.sock, RESULT_CAP)
        if text is None:
            raise self.ended()
        return text[:1], text[1:]

    def __call__(self, *args, **kwargs):
        try:
            request = to_literal((list(args), kwargs))
        except NotPlain as e:
            raise CheckOver("err", "the test passes a %s to the candidate: only plain data crosses to the completion" % e)
        try:
            send_frame(self.sock, request)
        except OSError:
            raise self.ended() from None
        kind, payload = self.reply()
        if kind == "R":
            return read_literal(payload)
        if kind == "E":
            name, text = json.loads(payload)
            raise builtin_exception(name, text)
        if kind == "N":
            raise CheckOver("fail", "the candidate returned a %s: not plain data" % payload[:100])
        raise CheckOver("err", payload[:300] or "the completion's process broke the protocol")


def builtin_exception(name, text):
    """The completion's exception as the builtin type of that name (RuntimeError for any other)."""
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(text)
        except Exception:  # noqa: BLE001 - a type whose constructor needs more arguments
            pass
    return RuntimeError(name + ": " + text)


def read_literal(text):
    try:
        value = ast.literal_eval(text)
        to_literal(value)  # the depth cap, on what the harness got
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, NotPlain) as e:
        raise CheckOver("fail", "the candidate returned something that is not plain data (" + type(e).__name__ + ")")
    return value


def harness(part, sock, pid):
    """The test, run against the proxy: one nonce-tagged line (`ok`, `fail` or `err`)."""
    nonce = part["nonce"]
    candidate = Candidate(sock, pid, part["entry_point"])
    try:
        kind, payload = candidate.reply()  # the completion's code has run (or failed) at the top level
        if kind != "L":
            raise CheckOver("err", payload[:300] or "the completion's process broke the protocol")
        env = {"__name__": "__main__"}
        try:
            exec(compile(part["prefix"], "<prompt>", "exec"), env)  # the prompt's helpers (HumanEval: poly, ...)
        except SyntaxError:
            pass  # a prefix that is only the start of a function: nothing of it is needed by the test
        env[part["entry_point"]] = candidate
        exec(compile(part["test"], "<test>", "exec"), env)
        env["check"](candidate)
        result = {"ok": True}
    except CheckOver as e:
        result = {e.key: e.text}
    except AssertionError as e:
        result = {"fail": error_name(e) or "AssertionError"}
    except BaseException as e:  # noqa: B036
        result = {"err": error_name(e)}
    os.write(1, (nonce + " " + json.dumps(result) + "\n").encode())


def run_assert_check(a_fd, b_fd):
    """In the check's PID 1, confined: fork the completion's process, then be the harness. The
    exec() calls of this file run model-written code and the spec's test: only here, inside the
    bubblewrap worker, whose root has no /etc and no /home (never in a workbench process)."""
    if os.path.exists("/etc") or os.path.exists("/home"):
        raise SystemExit("sandbox harness: not inside its bwrap worker; refusing to run code")
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # PID 1 with no handler: its namespace cannot signal it
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        os.close(b_fd)
        ours.close()
        try:
            serve_candidate(read_part(a_fd), theirs)
        finally:
            os._exit(0)
    os.close(a_fd)
    theirs.close()
    harness(read_part(b_fd), ours, pid)
