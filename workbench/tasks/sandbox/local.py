"""`LocalSandbox`: long-lived bubblewrap fork-server workers in this process's machine, no Ray.

    with LocalSandbox(workers=2) as sandbox:
        verdicts = sandbox.run([CodeCheck(completion, example.answer), ...])   # -> list[Verdict]

Each worker is one `bwrap` process (see bwrap.py) running the fork server (server.py); each check
is a fresh child in its own namespaces, so workers are reused for thousands of checks. Checks are
dealt round-robin to the workers and pipelined (all requests written at once by a writer thread,
responses read as they come). The verdict is decided HERE (spec.judge), not in the sandbox.

A worker that dies or stops answering is killed and replaced at once, and the checks it owed re-run
on the fresh worker (WORKER_RERUNS times at most; then they come back as "sandbox_error", counted
and shown, never scored as a wrong answer). Nothing a check does takes its worker down: the
server and the zygote are outside its PID namespace and its cgroup's reach. Starting
runs `require_sandbox()` first: no bubblewrap, no code checks.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

from workbench.tasks.sandbox.bwrap import drop_root, require_sandbox, worker_argv
from workbench.tasks.sandbox.cgroups import limits_note, worker_cgroups
from workbench.tasks.sandbox.limits import CodeCheck, Limits
from workbench.tasks.sandbox.spec import SpecError, judge, parse_spec, request
from workbench.tasks.types import Verdict

_SAID: set[str] = set()  # limits notes printed by this process
ANSWER_MARGIN_S = 30.0
WORKER_RERUNS = 2  # a dead worker's unanswered checks re-run on a fresh worker this many times, then are sandbox errors  # beyond a check's own wall backstop, how long we wait for the server's answer


class _Worker:
    """One bwrap fork server; `exchange` sends requests and returns the responses (None: no answer).
    It has cgroups of its own where the host allows them (cgroups.py; `limits_note` says)."""

    def __init__(self, limits: Limits):
        self.cgroups, why_not = worker_cgroups(limits)
        self.limits_note = limits_note(why_not)
        argv = worker_argv(limits.wire(), extra=self.cgroups.bwrap_args() if self.cgroups else None)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, bufsize=0,
                                     cwd="/", **drop_root())
        self.buf = b""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def why_dead(self) -> str:
        self.stderr.seek(0)
        tail = self.stderr.read()[-300:].decode("utf-8", "replace").strip().splitlines()
        return f"sandbox worker exited ({self.proc.returncode}){': ' + tail[-1] if tail else ''}"

    def _write_all(self, lines: list[bytes]) -> None:
        try:
            for line in lines:
                self.proc.stdin.write(line)
        except (BrokenPipeError, OSError, ValueError):
            pass  # the reader sees the worker gone

    def _read_line(self, timeout: float) -> bytes | None:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def exchange(self, reqs: list[dict], per_check_s: float) -> tuple[list[dict | None], str]:
        lines = [b"%010d%s" % (len(body), body) for body in (json.dumps(r).encode() for r in reqs)]  # server.read_request
        writer = threading.Thread(target=self._write_all, args=(lines,), daemon=True)
        writer.start()
        out: list[dict | None] = []
        problem = ""
        for req in reqs:
            line = self._read_line(per_check_s + ANSWER_MARGIN_S)
            resp = json.loads(line) if line else None
            if resp is None or resp.get("id") != req["id"]:
                problem = self.why_dead() if not self.alive() else "sandbox worker stopped answering"
                self.close()
                break
            out.append(resp)
        writer.join(timeout=5)
        return out + [None] * (len(reqs) - len(out)), problem

    def close(self) -> None:
        if self.alive():
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        if self.cgroups is not None:
            self.cgroups.close()
            self.cgroups = None


class LocalSandbox:
    """Long-lived sandboxed workers on this machine; `.run(checks) -> list[Verdict]`, in order.
    Use it as a context manager (or call `.close()`); it starts its workers on entry."""

    def __init__(self, workers: int = 1, limits: Limits | None = None):
        from workbench.errors import as_number

        self.num_workers = int(as_number("workers", workers, integer=True))
        if self.num_workers < 1:
            from workbench.errors import UserError

            raise UserError(f"workers must be >= 1, got {workers}")
        self.limits = limits or Limits()
        self._workers: list[_Worker | None] = [None] * self.num_workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> "LocalSandbox":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Check the sandbox works here (fail closed), then start the workers."""
        require_sandbox()
        for i, w in enumerate(self._workers):
            if w is None or not w.alive():
                self._fresh_worker(i)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="sandbox")

    def run(self, checks: list[CodeCheck]) -> list[Verdict]:
        """Check every completion against its spec; one Verdict per check, in order."""
        with self._lock:  # one batch at a time: the workers' pipes are not shared between batches
            self.start()
            verdicts: list[Verdict | None] = [None] * len(checks)
            jobs: list[tuple[int, dict, dict]] = []
            for i, check in enumerate(checks):
                try:
                    spec = parse_spec(check.spec)
                    jobs.append((i, spec, request(spec, check.completion, i)))
                except SpecError as e:
                    verdicts[i] = Verdict("error", 0.0, str(e))
            shards = [jobs[k:: self.num_workers] for k in range(self.num_workers)]
            futures = [self._pool.submit(self._run_shard, k, shard) for k, shard in enumerate(shards) if shard]
            for fut in futures:
                for i, verdict in fut.result():
                    verdicts[i] = verdict
            return verdicts  # type: ignore[return-value]

    def _fresh_worker(self, i: int) -> None:
        if self._workers[i] is not None:
            self._workers[i].close()
        self._workers[i] = worker = _Worker(self.limits)
        if worker.limits_note not in _SAID:  # the run says which limits are in force, once
            _SAID.add(worker.limits_note)
            print(f"sandbox: {worker.limits_note}", file=sys.stderr)

    def _run_shard(self, k: int, shard: list[tuple[int, dict, dict]]) -> list[tuple[int, Verdict]]:
        """Worker k's checks; those a dying worker owed re-run on a fresh one (WORKER_RERUNS times at most)."""
        out, todo, problem = [], shard, ""
        for attempt in range(WORKER_RERUNS + 1):
            if attempt:
                self._fresh_worker(k)
            resps, problem = self._workers[k].exchange([req for _, _, req in todo], self.limits.wall_seconds)
            out += [(i, judge(spec, req, resp, self.limits.cpu_seconds)) for (i, spec, req), resp in zip(todo, resps) if resp]
            todo = [job for job, resp in zip(todo, resps) if resp is None]
            if not todo:
                break
        return out + [(i, Verdict("sandbox_error", 0.0, problem)) for i, _, _ in todo]

    def close(self) -> None:
        for i, w in enumerate(self._workers):
            if w is not None:
                w.close()
                self._workers[i] = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
