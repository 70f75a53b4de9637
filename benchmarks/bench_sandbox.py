"""Sandboxed code checks per second: trivial function-call, stdin/stdout and assert-style checks through
`LocalSandbox` with 1 and 2 bubblewrap workers (issue 22's target: function-call and stdin/stdout at
least 1,000/s with 2 workers on a 2-core machine; issue 37's: assert-style, two processes per
check, at least half that), side by side with
the issue's reference design measured at the same moment: a bare fork server in the same bwrap
(os.fork per check, rlimits in the child, the result over a pipe; no per-check PID namespace, no
nonce, no judging), so the cost of the isolation shows as a ratio even on a busy machine.

    /work/bin/quiet .venv/bin/python benchmarks/bench_sandbox.py [--checks 4000] [--repeats 3]

Each figure is the best of `--repeats` batches of `--checks` checks (the first batch of a fresh
sandbox warms it up and is not counted). Every check must pass, or the script exits 1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.tasks.sandbox import CodeCheck, LocalSandbox, code_spec  # noqa: E402

COMPLETION = "```python\ndef add(a, b):\n    return a + b\n```"
FORMS = {  # form -> (spec, completion): the same trivial function in each test form
    "function-call": (code_spec(entry_point="add", cases=[{"args": [1, 2], "expected": 3}]), COMPLETION),
    "stdin/stdout": (code_spec(cases=[{"stdin": "1 2\n", "stdout": "3\n"}]),
                     "a, b = map(int, input().split())\nprint(a + b)\n"),
    "assert-style": (code_spec(entry_point="add", test="def check(candidate):\n    assert candidate(1, 2) == 3\n"), COMPLETION),
}


def sandbox_rate(workers: int, checks: int, repeats: int, form: str = "function-call") -> float:
    spec, completion = FORMS[form]
    batch = [CodeCheck(completion, spec)] * checks
    best = 0.0
    with LocalSandbox(workers=workers) as sb:
        sb.run(batch[: 50 * workers])  # warm-up
        for _ in range(repeats):
            start = time.perf_counter()
            verdicts = sb.run(batch)
            rate = checks / (time.perf_counter() - start)
            bad = [v for v in verdicts if not v.passed]
            if bad:
                sys.exit(f"{len(bad)} of {checks} trivial checks did not pass, e.g. {bad[0]}")
            best = max(best, rate)
    return best


# The reference design, for a like-for-like figure at the same moment on the same machine:
# a bare fork server inside the same bwrap (one os.fork per check, rlimits in the child, the
# result over a pipe), with no PID namespace per check, no nonce, no judging, no parent protocol.
BARE_SERVER = """
import os, resource, sys, time
n = int(sys.argv[1])
code = compile("def add(a, b):\\n    return a + b\\n", "<c>", "exec")
start = time.perf_counter()
for _ in range(n):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        resource.setrlimit(resource.RLIMIT_CPU, (2, 2))
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        env = {}
        exec(code, env)
        os.write(w, repr(env["add"](1, 2)).encode())
        os._exit(0)
    os.close(w)
    os.read(r, 100)
    os.close(r)
    os.waitpid(pid, 0)
print(n / (time.perf_counter() - start))
"""


def bare_rate(workers: int, checks: int) -> float:
    """Checks/s of `workers` bare fork servers in bwrap running `checks` checks between them."""
    from workbench.tasks.sandbox.bwrap import drop_root, worker_argv
    from workbench.tasks.sandbox.limits import Limits

    argv = worker_argv(Limits().wire())
    argv = argv[: argv.index("-c") + 1] + [BARE_SERVER, str(checks // workers)]
    start = time.perf_counter()
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, cwd="/", **drop_root()) for _ in range(workers)]
    for p in procs:
        p.communicate()
    return checks / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checks", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} at the start; os.cpu_count()={os.cpu_count()}")
    bare = {w: max(bare_rate(w, args.checks) for _ in range(args.repeats)) for w in (1, 2)}
    print(f"{'checks/s':34s} {'LocalSandbox':>12s} {'bare fork server':>17s} {'ratio':>6s}")
    for form in FORMS:
        for w in (1, 2):
            rate = sandbox_rate(w, args.checks, args.repeats, form)
            label = f"{form}, {w} worker{'s' if w > 1 else ''}"
            print(f"{label:34s} {rate:12.0f} {bare[w]:17.0f} {rate / bare[w]:6.2f}")
    print(f"targets with 2 workers: function-call and stdin/stdout >= 1000/s, assert-style >= 500/s; "
          f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
