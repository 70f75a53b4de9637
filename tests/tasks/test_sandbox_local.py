"""The sandbox as a user relies on it: the three test forms are judged right, verdicts come back in
order across workers, HumanEval's canonical solutions pass and blanked bodies fail, a dead worker
gives "sandbox_error" (not "fail"), and where bubblewrap cannot run, nothing runs (fail closed)."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

from workbench.errors import UserError
from workbench.tasks.sandbox import CodeCheck, Limits, LocalSandbox, code_spec, require_sandbox
from workbench.tasks.sandbox import bwrap

ADD = code_spec(entry_point="add", cases=[{"args": [1, 2], "expected": 3}, {"args": [0.1, 0.2], "expected": 0.3}])
ECHO_SUM = code_spec(cases=[{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "5 5\n", "stdout": "10"}])
ASSERTS = code_spec(entry_point="inc", test="def check(candidate):\n    assert candidate(1) == 2\n")


@pytest.fixture(scope="module")
def sandbox():
    with LocalSandbox(workers=2, limits=Limits(cpu_seconds=1.0, wall_seconds=8.0)) as sb:
        yield sb


def verdicts(sandbox, *pairs):
    return [v.verdict for v in sandbox.run([CodeCheck(c, s) for c, s in pairs])]


def test_each_form_passes_right_code_and_fails_wrong_code(sandbox):
    got = verdicts(
        sandbox,
        ("Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\nDone.", ADD),  # fenced block, floats within 1e-6
        ("def add(a, b):\n    return a - b\n", ADD),
        ("import sys\na, b = map(int, sys.stdin.buffer.read().split())\nprint(a + b)\n", ECHO_SUM),
        ("a, b = map(int, input().split())\nprint(a * b)\n", ECHO_SUM),
        ("print(sum(map(int, input().split())))\nimport sys\nsys.exit(0)\n", ECHO_SUM),  # sys.exit ends a program
        ("    return x + 1\n", code_spec(entry_point="inc", test="def check(c):\n    assert c(1) == 2\n", prefix="def inc(x):\n")),
        ("def inc(x):\n    return x\n", ASSERTS),
        ("def add(a, b) return", ADD),
    )
    assert got == ["pass", "fail", "pass", "fail", "pass", "pass", "fail", "error"]


def test_types_are_compared_strictly_as_json(sandbox):
    spec = code_spec(entry_point="f", cases=[{"args": [], "expected": [1, "a", None, True]}])
    assert verdicts(sandbox, ("def f():\n    return (1, 'a', None, True)\n", spec),  # a tuple is a JSON list
                    ("def f():\n    return [1, 'a', None, 1]\n", spec),  # 1 is not true
                    ("def f():\n    return [1.0, 'a', None, True]\n", spec)) == ["pass", "fail", "pass"]


def test_many_checks_come_back_in_order_across_workers(sandbox):
    specs = [code_spec(entry_point="f", cases=[{"args": [], "expected": i}]) for i in range(60)]
    out = sandbox.run([CodeCheck(f"def f():\n    return {i if i % 3 else -1}\n", s) for i, s in enumerate(specs)])
    assert [v.passed for v in out] == [i % 3 != 0 for i in range(60)]
    assert all(v.seconds < 1.0 for v in out)


def test_a_bad_spec_is_an_error_verdict_not_a_crash(sandbox):
    out = sandbox.run([CodeCheck("x = 1", "not json"), CodeCheck("def add(a, b):\n    return a + b\n", ADD)])
    assert [v.verdict for v in out] == ["error", "pass"] and "code spec" in out[0].detail


def test_checks_do_not_see_each_others_files(sandbox):
    spec = code_spec(entry_point="f", cases=[{"args": [], "expected": []}])
    writer = "open('/tmp/note', 'w').write('x')\ndef f():\n    return []\n"
    reader = "import os\ndef f():\n    return os.listdir('/tmp')\n"
    single = LocalSandbox(workers=1)
    with single:
        assert verdicts(single, (writer, spec), (reader, spec)) == ["pass", "pass"]


@pytest.mark.slow
def test_humaneval_canonical_solutions_pass_and_blanked_bodies_fail():
    from workbench.tasks.code import humaneval_problems, humaneval_rows

    problems, rows = humaneval_problems(), humaneval_rows()
    assert len(problems) == len(rows) == 164
    start = time.monotonic()
    with LocalSandbox(workers=2) as sb:
        good = sb.run([CodeCheck(p["canonical_solution"], spec) for p, (_, _, spec) in zip(problems, rows)])
        blank = sb.run([CodeCheck("    pass\n", spec) for _, _, spec in rows])
    elapsed = time.monotonic() - start
    assert [p["task_id"] for p, v in zip(problems, good) if not v.passed] == []
    assert [v for v in blank if v.passed] == []
    assert elapsed < 60, f"HumanEval in the sandbox took {elapsed:.1f}s (the issue's limit is 60 s)"


def test_a_worker_dying_mid_batch_is_replaced_and_its_checks_rerun(monkeypatch):
    from workbench.tasks.sandbox import local

    slow = CodeCheck("import time\ntime.sleep(1)\ndef add(a, b):\n    return a + b\n", ADD)
    with LocalSandbox(workers=1) as sb:
        worker = sb._workers[0]
        killer = threading.Timer(0.3, worker.proc.kill)  # the worker dies under us (an OOM kill, say)
        killer.start()
        out = sb.run([slow, slow])
        killer.join()
        assert [v.verdict for v in out] == ["pass", "pass"] and sb._workers[0] is not worker  # re-run, not scored
        with monkeypatch.context() as m:  # every fresh worker dies too: sandbox errors, never wrong answers
            m.setattr(local._Worker, "exchange", lambda self, reqs, s: ([None] * len(reqs), "sandbox worker exited (-9)"))
            out = sb.run([slow])
        assert out[0].verdict == "sandbox_error" and "worker" in out[0].detail
        assert sb.run([slow])[0].passed


@pytest.fixture
def open_dir():
    """A folder anyone can read: as root, bwrap is started as nobody (pytest's tmp_path is root's only)."""
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)
        yield Path(d)


def _fake_bwrap(folder: Path, script: str) -> str:
    path = folder / "bwrap"
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(0o755)
    return str(folder)


@pytest.mark.parametrize("script, words", [
    (None, ["not installed", "apt-get install bubblewrap"]),
    ("echo 'bwrap: No permissions to creating new namespace' >&2; exit 1", ["seccomp", "Docker", "unsandboxed"]),
])
def test_no_working_bwrap_fails_closed_in_one_line(open_dir, monkeypatch, script, words):
    real_path = os.environ["PATH"]
    monkeypatch.setenv("PATH", _fake_bwrap(open_dir, script) if script else str(open_dir))
    bwrap._probe.cache_clear()
    try:
        with pytest.raises(UserError) as e:
            require_sandbox()
        assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
        with pytest.raises(UserError):
            LocalSandbox().start()
    finally:
        monkeypatch.setenv("PATH", real_path)
        bwrap._probe.cache_clear()


def test_limits_are_checked():
    with pytest.raises(UserError):
        Limits(cpu_seconds=5, wall_seconds=1)
    with pytest.raises(UserError):
        Limits(processes=0)


def test_the_fork_server_refuses_to_run_outside_its_worker():
    """It empties /tmp and runs code: started by hand on a real system, it must do nothing."""
    import subprocess
    import sys

    server = Path(bwrap.__file__).with_name("server.py")
    done = subprocess.run([sys.executable, "-I", "-S", str(server), "{}"], input=b"", capture_output=True, timeout=60)
    assert done.returncode != 0 and b"refusing" in done.stderr


def test_a_check_that_closes_its_output_and_sleeps_hits_the_wall_backstop():
    quiet_sleeper = "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)\n"
    start = time.monotonic()
    with LocalSandbox(limits=Limits(cpu_seconds=1.0, wall_seconds=2.0)) as sb:
        v = sb.run([CodeCheck(quiet_sleeper, ADD)])[0]
    assert v.verdict == "timeout" and "wall" in v.detail and time.monotonic() - start < 15
