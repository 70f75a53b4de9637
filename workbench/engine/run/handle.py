"""The run as a Ray actor, and the driver's handle on it.

`Coordinator` is the Ray actor around `RunCoordinator` (coordinator.py): `run` blocks one of its
threads, the others answer `status`, `metrics_since`, `pause`, `resume`, `stop`. A detached one
is named `run:<name>` in the `workbench` namespace (`actor_name`), so a notebook kernel restart
leaves the run going and `attach(name)` finds it again. Every run is recorded in the run registry
(registry.py), so `Session.attach` also finds a run whose Coordinator is not detached (`workbench
run`'s, on its driver's private Ray) and follows it from its folder.

    handle = RunHandle(actor, name)
    handle.start(max_minutes=None)        # returns at once; the run goes to train.max_steps
    handle.status(); handle.metrics(since=0); handle.pause(); handle.resume(); handle.stop()
    summary = handle.wait()               # raises RunFailed with a one-line reason on failure
    handle = attach("quickstart")         # a live detached run, by name
"""

from __future__ import annotations

from typing import Any, Optional

import ray

from workbench.config import RunConfig
from workbench.engine.cluster import NAMESPACE, kill_actors
from workbench.engine.failures import RunFailed, describe_error, held_errors, record_failure
from workbench.engine.run.coordinator import RunCoordinator
from workbench.errors import UserError
from workbench.tracking.wandb_sink import wandb_sinks


class Coordinator:
    """Ray actor wrapping RunCoordinator; `run` blocks one thread, the others answer queries."""

    def __init__(self, cfg: RunConfig, resume: bool = True):
        sinks = []
        if cfg.tracking.mlflow and cfg.tracking.run_id:
            from workbench.tracking.mlflow_sink import MlflowSink
            from workbench.tracking.store import default_tracking_uri

            sinks.append(MlflowSink(cfg.tracking.run_id, cfg.tracking.tracking_uri or default_tracking_uri()))
        sinks += wandb_sinks(cfg)  # tracking.wandb: W&B beside MLflow
        self.core = RunCoordinator(cfg, resume=resume, sinks=sinks)

    def run(self, max_minutes: Optional[float]) -> dict[str, Any]:
        return self.core.run(max_minutes=max_minutes)

    def status(self) -> dict[str, Any]:
        return self.core.status_dict()

    def metrics_since(self, index: int) -> list[dict[str, Any]]:
        return self.core.metrics_since(index)

    def checkpoint_state(self) -> dict[str, Any]:
        """The loop state a checkpoint would hold now (step, sampler, counters)."""
        return self.core.checkpoint_state()

    def pause(self) -> None:
        self.core.pause()

    def resume(self) -> None:
        self.core.resume()

    def stop(self) -> None:
        self.core.request_stop()


def actor_name(name: str) -> str:
    return f"run:{name}"


def start_coordinator(cfg: RunConfig, *, detached: bool, resume: bool) -> "RunHandle":
    """The Coordinator actor for `cfg` (named and detached when `detached`), once it answers."""
    opts: dict[str, Any] = dict(num_cpus=0, max_concurrency=8, max_restarts=0)
    if detached:
        try:
            ray.get_actor(actor_name(cfg.name), namespace=NAMESPACE)
            raise UserError(f"a run named '{cfg.name}' is already live; attach to it or pick another name")
        except ValueError:
            pass
        opts.update(name=actor_name(cfg.name), namespace=NAMESPACE, lifetime="detached")
    try:
        actor = ray.remote(held_errors(Coordinator, cfg.output_dir())).options(**opts).remote(cfg, resume)
    except ray.exceptions.ActorAlreadyExistsError:  # starting or shutting down: get_actor did not see it yet
        raise UserError(f"a run named '{cfg.name}' is still registered with Ray (starting, or ending); attach to it "
                        "(Session.attach) or wait for it to end, then try again") from None
    try:
        ray.get(actor.status.remote())
    except ray.exceptions.RayError as e:  # its constructor failed (held: failures.held_errors)
        kill_actors([actor])
        record_failure(cfg.output_dir(), e)
        raise RunFailed(describe_error(e)) from None
    from workbench.engine.run.registry import register

    register(cfg, detached=detached)  # Session.attach finds it by name (registry.py)
    return RunHandle(actor, cfg.name)


class RunHandle:
    """The driver's handle on one run's Coordinator actor; see the module docstring."""

    def __init__(self, actor: Any, name: str, run_ref: Any = None):
        self.actor = actor
        self.name = name
        self.run_ref = run_ref

    def start(self, max_minutes: Optional[float] = None) -> "RunHandle":
        """Start the loop; it trains to train.max_steps, or stops after `max_minutes`."""
        if self.run_ref is not None:
            raise UserError(f"run '{self.name}' was already started")
        self.run_ref = self.actor.run.remote(max_minutes)
        return self

    def status(self) -> dict[str, Any]:
        return ray.get(self.actor.status.remote())

    def metrics(self, since: int = 0) -> list[dict[str, Any]]:
        return ray.get(self.actor.metrics_since.remote(since))

    def pause(self) -> None:
        ray.get(self.actor.pause.remote())

    def resume(self) -> None:
        ray.get(self.actor.resume.remote())

    def stop(self) -> None:
        ray.get(self.actor.stop.remote())

    def done(self) -> bool:
        if self.run_ref is None:
            return False
        ready, _ = ray.wait([self.run_ref], timeout=0)
        return bool(ready)

    def wait(self, timeout: Optional[float] = None) -> dict[str, Any]:
        if self.run_ref is None:
            raise UserError(f"run '{self.name}' was not started")
        try:
            return ray.get(self.run_ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"run '{self.name}' still going after {timeout} s") from None
        except ray.exceptions.RayError as e:
            raise RunFailed(describe_error(e)) from None

    def kill(self) -> None:
        kill_actors([self.actor])


def attach(name: str) -> RunHandle:
    """Find a live detached run by name (after a kernel restart)."""
    try:
        actor = ray.get_actor(actor_name(name), namespace=NAMESPACE)
    except ValueError:
        raise UserError(f"no live run named '{name}' in the Ray cluster") from None
    return RunHandle(actor, name)
