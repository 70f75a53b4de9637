"""`RewardPool`: Ray actors, each hosting one `LocalSandbox`, that check code beside decoding.

    pool = RewardPool.start(num_workers=2, cpus_per_worker=1.0)   # fails closed: one UserError line
    pending = pool.submit([CodeCheck(completion, example.answer), ...])  # returns at once
    verdicts = pending.get()                                      # list[Verdict], in order
    verdicts = pool.run(checks)                                   # the same, blocking
    pool.shutdown()

The actors are spread over the cluster's nodes (each asks for `cpus_per_worker` CPUs), so code
checks scale with nodes. A batch is cut into one contiguous shard per actor. An actor that dies
mid-batch is replaced at once and its shard re-run on the replacement (RERUNS times at most; then
its checks are "sandbox_error", counted and never scored). A replacement that does not start
within POOL_DOWN_TIMEOUT_S (the pool is down) stops the run with one UserError line, after a
message: a run never trains on unscored groups. Like `LocalSandbox`, the pool has `run(checks) -> list[Verdict]`.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import ray

from workbench.errors import UserError
from workbench.tasks.sandbox import CodeCheck, Limits, LocalSandbox
from workbench.tasks.types import Verdict

ACTOR_PREFIX = "workbench-reward-"
RERUNS = 2  # a dead actor's shard is re-run on a fresh actor this many times before its checks are sandbox errors
POOL_DOWN_TIMEOUT_S = 600.0  # a replacement actor that is not ready by then: the pool is down, the run fails


class SandboxActor:
    """One Ray actor: a LocalSandbox with one bubblewrap worker (a fork server)."""

    def __init__(self, limits: Limits | None = None):
        self.sandbox = LocalSandbox(workers=1, limits=limits)
        self.problem = ""
        try:
            self.sandbox.start()
        except UserError as e:  # reported by ready(): an actor that raises here gives a long Ray error
            self.problem = str(e)

    def ready(self) -> str:
        """'' when the sandbox works on this node, else the one-line reason."""
        return self.problem

    def run(self, checks: list[CodeCheck]) -> list[Verdict]:
        if self.problem:
            return [Verdict("sandbox_error", 0.0, self.problem) for _ in checks]
        return self.sandbox.run(checks)

    def close(self) -> None:
        self.sandbox.close()


class PendingVerdicts:
    """Verdicts on their way from `RewardPool.submit`; `.get()` waits and returns them in order.
    A shard whose actor died is re-run on a fresh actor (RewardPool.rerun), never scored."""

    def __init__(self, parts: list[tuple[Any, list]], pool: "RewardPool | None" = None):
        self._parts = parts  # (ObjectRef or None, the shard's checks) per actor, in order
        self._pool = pool

    def ready(self) -> bool:
        refs = [ref for ref, _ in self._parts if ref is not None]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        return len(done) == len(refs)

    def get(self) -> list[Verdict]:
        out: list[Verdict] = []
        for k, (ref, shard) in enumerate(self._parts):
            for attempt in range(RERUNS + 1):
                if ref is None:
                    break
                try:
                    out.extend(ray.get(ref))
                    break
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as e:
                    why = f"reward actor died ({type(e).__name__})"
                    if self._pool is None or attempt == RERUNS:
                        out.extend(Verdict("sandbox_error", 0.0, why) for _ in shard)  # counted, never scored
                        break
                    ref = self._pool.rerun(k, shard, why)
        return out


class RewardPool:
    """Ray actors hosting sandboxes; use `RewardPool.start(...)`."""

    def __init__(self, actors: list, cpus_per_worker: float, limits: Limits | None, down_timeout_s: float = POOL_DOWN_TIMEOUT_S):
        self.actors = actors
        self.cpus_per_worker = cpus_per_worker
        self.limits = limits
        self.down_timeout_s = down_timeout_s  # how long a replacement may take to start before the pool is down
        self._dead: set[int] = set()

    @classmethod
    def start(cls, num_workers: int, cpus_per_worker: float = 1.0, limits: Limits | None = None,
              down_timeout_s: float = POOL_DOWN_TIMEOUT_S) -> "RewardPool":  # fmt: skip
        """Start `num_workers` actors and wait until each has a working sandbox; if any node cannot
        run bubblewrap, stop them all and raise that node's one-line UserError (fail closed)."""
        from workbench.errors import as_number

        n = int(as_number("num_workers", num_workers, integer=True))
        cpus = as_number("cpus_per_worker", cpus_per_worker)
        # cpus_per_worker 0: logical slots sharing the cores, where the run's actors hold every CPU (M, issue 22)
        if n < 1 or cpus < 0:
            raise UserError(f"reward pool: need num_workers >= 1 and cpus_per_worker >= 0, got {num_workers}, {cpus_per_worker}")
        pool = cls([cls._spawn(cpus, limits) for _ in range(n)], cpus, limits, down_timeout_s)
        try:
            pool._wait_ready(list(range(n)))
        except BaseException:
            pool.shutdown()
            raise
        return pool

    @staticmethod
    def _spawn(cpus: float, limits: Limits | None):
        cls = ray.remote(SandboxActor)
        name = f"{ACTOR_PREFIX}{uuid.uuid4().hex[:12]}"  # named, so an operator (or a fault test) can find it
        return cls.options(num_cpus=cpus, max_restarts=0, scheduling_strategy="SPREAD", name=name).remote(limits)

    def _wait_ready(self, which: list[int], timeout: float | None = None) -> None:
        try:
            problems = ray.get([self.actors[k].ready.remote() for k in which], timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise UserError(f"the reward pool is down: no sandbox actor started within {timeout:g} s; "
                            "the run stops rather than train on unscored groups") from None
        bad = next((p for p in problems if p), "")
        if bad:
            raise UserError(bad)

    def rerun(self, k: int, checks: list[CodeCheck], why: str) -> Any:
        """Replace dead actor `k` (waiting for it, with a message, up to `down_timeout_s`) and send it `checks`."""
        print(f"reward pool: {why}; re-running its {len(checks)} checks on a fresh actor", file=sys.stderr, flush=True)
        self._dead.add(k)
        self._replace_dead()
        return self.actors[k].run.remote(checks)

    def _replace_dead(self) -> None:
        for k in sorted(self._dead):
            try:
                ray.kill(self.actors[k])
            except Exception:  # noqa: BLE001 - it is already gone
                pass
            self.actors[k] = self._spawn(self.cpus_per_worker, self.limits)
            self._wait_ready([k], timeout=self.down_timeout_s)
        self._dead.clear()

    def submit(self, checks: list[CodeCheck]) -> PendingVerdicts:
        """Send the checks to the actors (one contiguous shard each) and return at once."""
        self._replace_dead()
        n = len(self.actors)
        size, extra = divmod(len(checks), n)
        parts, start = [], 0
        for k, actor in enumerate(self.actors):
            end = start + size + (1 if k < extra else 0)
            shard = list(checks[start:end])
            parts.append((actor.run.remote(shard) if shard else None, shard))
            start = end
        return PendingVerdicts(parts, self)

    def run(self, checks: list[CodeCheck]) -> list[Verdict]:
        """Check every completion; one Verdict per check, in order."""
        return self.submit(checks).get()

    def shutdown(self) -> None:
        for actor in self.actors:
            try:
                ray.get(actor.close.remote(), timeout=10)
            except Exception:  # noqa: BLE001 - a dead or stuck actor is killed below
                pass
            ray.kill(actor)
        self.actors = []
