"""Escape tests: model-written code that attacks the sandbox gets no pass, harms nothing outside, leaves
no process behind, and stays within its limits.

Every attack defines the right `add` only IF its escape worked, so a broken sandbox shows up as a
pass. After each attack: the verdict is not a pass, the canary file (outside the sandbox) is
intact, no process carrying the attack's unique marker is left in the host's process table, and
the check took no longer than the limits allow. No attack may yield `sandbox_error` either: that
verdict drops its group, so it would dodge the -1. These run in CI (the Makefile installs bubblewrap):
they must pass, never skip.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from workbench.tasks.sandbox import CodeCheck, Limits, LocalSandbox, code_spec

LIMITS = Limits(cpu_seconds=1.0, wall_seconds=8.0, memory_bytes=512 << 20, processes=16, output_bytes=1 << 20)
SLACK_S = 10.0  # start-up and teardown on a loaded 2-core machine, beyond the wall backstop
ADD = code_spec(entry_point="add", cases=[{"args": [1, 2], "expected": 3}, {"args": [20, 22], "expected": 42}])
RIGHT_ADD = "def add(a, b):\n    return a + b\n"
SECRET = "wb-secret-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def sandbox():
    with LocalSandbox(workers=1, limits=LIMITS) as sb:
        yield sb


@pytest.fixture
def canary(tmp_path) -> Path:
    path = tmp_path / "canary.txt"
    path.write_text("intact")
    return path


def marked_processes(marker: str) -> list[int]:
    """Host pids whose command line or name carries `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            text = (entry / "cmdline").read_bytes() + (entry / "comm").read_bytes()
        except OSError:
            continue
        if marker.encode() in text:
            found.append(int(entry.name))
    return found


def name_me(marker: str) -> str:
    """Code that puts the marker into this process's name (prctl PR_SET_NAME, 15 bytes)."""
    return f"import ctypes\nctypes.CDLL(None).prctl(15, {marker[:15].encode()!r}, 0, 0, 0)\n"


def attack(sandbox: LocalSandbox, canary: Path, code: str, marker: str, spec: str = ADD, processes: int = 1):
    """Run one attack; `processes`: how many processes it may spread its CPU time over (the CPU
    rlimit is per process, and the check's CPU time counts all of them)."""
    os.environ["WB_SANDBOX_SECRET"] = SECRET  # our process has a secret; the check must not see it
    start = time.monotonic()
    verdict = sandbox.run([CodeCheck(code, spec)])[0]
    wall = time.monotonic() - start
    time.sleep(0.2)
    assert verdict.verdict in ("fail", "error", "timeout"), verdict  # never a pass, never a sandbox_error
    assert canary.read_text() == "intact"
    assert marked_processes(marker) == [], f"processes left behind: {marked_processes(marker)}"
    assert wall <= LIMITS.wall_seconds + SLACK_S, wall
    assert verdict.seconds <= processes * (LIMITS.cpu_seconds + 1.0), verdict  # the CPU rlimit is whole seconds
    return verdict


def marker() -> str:
    return "wbm" + uuid.uuid4().hex[:12]


def test_no_network_even_to_a_listener_on_localhost(sandbox, canary):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port, m = server.getsockname()[1], marker()
    code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\ns.sendall(b'{m}')\n"
            + RIGHT_ADD)
    v = attack(sandbox, canary, code, m)
    server.settimeout(0.5)  # a connection that got through would be waiting in the backlog by now
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()
    assert v.verdict == "error" and "Connection refused" in v.detail  # the sandbox has its own, empty loopback


def test_cannot_write_or_read_outside(sandbox, canary):
    code = f"open({str(canary)!r}, 'w').write('pwned')\n" + RIGHT_ADD
    assert attack(sandbox, canary, code, marker()).verdict == "error"
    code = f"assert open({str(canary)!r}).read() == 'intact'\n" + RIGHT_ADD
    assert attack(sandbox, canary, code, marker()).verdict == "error"
    code = "import os\nassert os.path.exists('/work') or os.path.exists('/root') or os.path.exists('/home/runner')\n" + RIGHT_ADD
    assert attack(sandbox, canary, code, marker()).verdict == "error"


def test_cannot_read_an_environment_secret(sandbox, canary):
    code = f"import os\nassert os.environ.get('WB_SANDBOX_SECRET') == {SECRET!r}\n" + RIGHT_ADD
    assert attack(sandbox, canary, code, marker()).verdict == "error"


@pytest.mark.slow
def test_fork_bomb_is_contained_and_leaves_nothing(sandbox, canary):
    m = marker()
    code = name_me(m) + "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    assert attack(sandbox, canary, code, m, processes=LIMITS.processes).verdict in ("timeout", "error")


def test_allocating_10_gb_fails(sandbox, canary):
    code = "x = bytearray(10 * 2**30)\n" + RIGHT_ADD
    assert attack(sandbox, canary, code, marker()).verdict == "error"


@pytest.mark.slow
def test_endless_loop_is_a_timeout_by_cpu_time(sandbox, canary):
    v = attack(sandbox, canary, "def add(a, b):\n    while True:\n        pass\n", marker())
    assert v.verdict == "timeout" and v.seconds >= LIMITS.cpu_seconds * 0.9


def test_double_forked_daemon_dies_with_the_check(sandbox, canary):
    m = marker()
    code = (
        "import os, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', "
        f"'import time\\nopen(\\'/tmp/up\\', \\'w\\').close()\\nwhile True: time.sleep(1)  # {m}'])\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "import time\nfor _ in range(100):\n    if os.path.exists('/tmp/up'):\n        break\n    time.sleep(0.05)\n"
        "def add(a, b):\n    assert os.path.exists('/tmp/up'), 'the daemon did not start'\n    return None\n"
    )
    assert attack(sandbox, canary, code, m).verdict == "fail"  # "fail", not "error": the daemon was up


def test_the_process_check_sees_a_marked_process():
    m = marker()
    proc = subprocess.Popen([sys.executable, "-c", f"import time\ntime.sleep(30)  # {m}"])
    try:
        deadline = time.monotonic() + 10
        while not marked_processes(m) and time.monotonic() < deadline:  # until it has exec'd
            time.sleep(0.05)
        assert marked_processes(m) == [proc.pid]
    finally:
        proc.kill()
        proc.wait()


def test_kill_minus_one_reaches_nothing_outside(sandbox, canary):
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        code = "import os\ntry:\n    os.kill(-1, 9)\nexcept OSError:\n    pass\n"
        attack(sandbox, canary, code, marker())
        assert bystander.poll() is None, "a process outside the sandbox was killed"
        assert sandbox.run([CodeCheck(RIGHT_ADD, ADD)])[0].passed  # the worker itself survived
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait()


def test_a_gigabyte_of_output_is_cut_off(sandbox, canary):
    code = "import os\nfor _ in range(1024):\n    os.write(1, b'x' * (1 << 20))\n" + RIGHT_ADD
    v = attack(sandbox, canary, code, marker())
    assert v.verdict == "error" and "output" in v.detail


@pytest.mark.parametrize("exit_code", ["import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"])
def test_early_exit_is_not_a_pass(sandbox, canary, exit_code):
    assert attack(sandbox, canary, exit_code, marker()).verdict == "error"
    humaneval_like = code_spec(entry_point="add", test="def check(candidate):\n    assert candidate(1, 2) == 3\n")
    assert attack(sandbox, canary, exit_code, marker(), humaneval_like).verdict == "error"


def test_printed_fake_pass_is_not_a_pass(sandbox, canary):
    code = ("print('{\"i\": 0, \"r\": \"3\"}')\nprint('{\"i\": 1, \"r\": \"42\"}')\nprint('PASSED', 'ok', 'All tests passed')\n"
            "import os\nos._exit(0)\n")
    assert attack(sandbox, canary, code, marker()).verdict == "error"


def test_always_equal_objects_and_a_patched_harness_do_not_pass(sandbox, canary):
    eq = "class Yes:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Yes()\n"
    assert attack(sandbox, canary, eq, marker()).verdict == "error"  # not JSON: the parent never calls __eq__
    int_eq = "class Yes(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Yes(0)\n"
    assert attack(sandbox, canary, int_eq, marker()).verdict == "fail"  # serialised as 0, compared here
    # the harness (the fork server's module) patched to report 42 for every case: judged here, case 0 fails
    patched = ("import sys\nh = sys.modules['__main__']\nreal = h.emit\n"
               "h.emit = lambda nonce, obj: real(nonce, {'i': obj.get('i'), 'r': '42'})\n"
               "def add(a, b):\n    return 0\n")
    assert attack(sandbox, canary, patched, marker()).verdict == "fail"
    patched_json = "import json\njson.dumps = lambda *a, **k: '3'\ndef add(a, b):\n    return 0\n"
    assert attack(sandbox, canary, patched_json, marker()).verdict in ("fail", "error")


def whole_check_limits(sandbox: LocalSandbox) -> None:
    """Skip, saying why, on a host where the worker has no cgroups (only per-process limits there)."""
    worker = sandbox._workers[0]
    if worker is None or worker.cgroups is None:
        pytest.skip(f"no whole-check limits on this host: {worker.limits_note if worker else 'no worker'}")


def test_a_fork_bomb_of_cpu_burners_ends_within_one_cpu_limit(sandbox, canary):
    whole_check_limits(sandbox)
    m = marker()
    code = name_me(m) + "import os\nfor _ in range(12):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n"
    v = attack(sandbox, canary, code, m)  # processes=1: the CPU of all 13 processes counts as one total
    assert v.verdict == "timeout" and LIMITS.cpu_seconds <= v.seconds <= LIMITS.cpu_seconds + 0.5, v


def test_memory_is_bounded_over_all_of_a_checks_processes(sandbox, canary):
    whole_check_limits(sandbox)
    each = LIMITS.memory_bytes * 3 // 4  # under the address-space limit of one process; 3 of them are over the total
    code = (f"import os, time\nfor _ in range(2):\n    if os.fork() == 0:\n        break\nx = bytearray({each})\n"
            "x[::4096] = b'x' * len(x[::4096])\ntime.sleep(2)\n" + RIGHT_ADD)
    v = attack(sandbox, canary, code, marker())
    assert v.verdict == "error" and "memory" in v.detail, v
    assert sandbox.run([CodeCheck(RIGHT_ADD, ADD)])[0].passed  # the worker is fine afterwards
