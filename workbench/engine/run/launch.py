"""Start, find and control runs on Ray: the driver side of the engine.

    cfg = load_run_config("configs/quickstart.yaml")
    handle = launch(cfg)                  # Ray local cluster unless resources.ray_address is set
    handle.start(max_steps=50)            # returns at once; the run goes on in Ray actors
    handle.status(); handle.metrics(since=0); handle.pause(); handle.resume(); handle.stop()
    summary = handle.wait()               # raises RunFailed with a one-line reason on failure
    summary = run_to_end(cfg, resume=False)   # all of the above in one blocking call (benchmarks, tests)

`launch(..., detached=True)` names the `Coordinator` actor `run:<name>` in the `workbench`
namespace and detaches it, so a notebook kernel restart leaves the run going and
`attach(name)` finds it again.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

import ray

from workbench.config import RunConfig
from workbench.engine.run.coordinator import RunCoordinator, RunFailed, _describe
from workbench.errors import UserError

NAMESPACE = "workbench"


def absolute_paths(cfg: RunConfig) -> RunConfig:
    """Ray workers do not share the driver's working directory: make every path absolute."""
    out = str(cfg.output_dir().resolve())
    model = cfg.model
    if not model.path.startswith("builtin:"):
        model = dataclasses.replace(model, path=str(Path(model.path).expanduser().resolve()))
    model = dataclasses.replace(model, cache_dir=str(Path(model.cache_dir).expanduser().resolve()))
    task = cfg.task
    if task.path:
        task = dataclasses.replace(task, path=str(Path(task.path).expanduser().resolve()))
    return dataclasses.replace(cfg, out_dir=out, model=model, task=task)


def required_resources(cfg: RunConfig) -> dict[str, float]:
    r = cfg.resources
    n = cfg.generation.num_generators
    t = r.trainer_workers
    return {
        "CPU": n * r.generator_cpus + t * r.trainer_cpus + r.evaluator_cpus,
        "GPU": n * r.generator_gpus + t * r.trainer_gpus + r.evaluator_gpus,
    }


def init_ray(cfg: RunConfig) -> bool:
    """Connect to `resources.ray_address` (or $RAY_ADDRESS) or start a local cluster.

    An existing cluster may require Ray's token authentication: the driver's token
    ($RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) is sent when there is one (Ray
    sends it on its own only to a cluster it finds by itself). A refused or missing token is
    reported as "authentication failed", not as an unreachable cluster.
    Returns True when this call started Ray (the caller then owns its shutdown).
    """
    from workbench.engine import cluster

    if ray.is_initialized():
        return False
    address = cfg.resources.ray_address or os.environ.get("RAY_ADDRESS")
    kwargs: dict[str, Any] = dict(namespace=NAMESPACE, log_to_driver=True, logging_level="ERROR")
    if address:
        has_token = cluster.token_available()
        if has_token:
            cluster.use_token_auth()
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ray.exceptions.AuthenticationError) as e:
            if _auth_failure(e):
                sent = "the token this driver sent was refused" if has_token else "this driver has no token"
                raise UserError(
                    f"authentication failed at the Ray cluster {address}: {sent}; put the cluster's token in "
                    "~/.ray/auth_token or $RAY_AUTH_TOKEN (on its head node: ray get-auth-token)"
                ) from None
            raise UserError(f"cannot reach the Ray cluster at {address}: {e}") from None
    else:
        need = required_resources(cfg)
        # CPU slots are logical: give the local cluster at least what the run asks for.
        num_cpus = cfg.resources.num_cpus or max(os.cpu_count() or 1, math.ceil(need["CPU"]))
        # address="local": a new cluster of our own, even when `ray start` left one recorded
        _start_local(dict(address="local", num_cpus=num_cpus, num_gpus=cfg.resources.num_gpus,
                          include_dashboard=False, **kwargs))
    return True


LOCAL_START_ATTEMPTS = 3


def _start_local(kwargs: dict[str, Any]) -> None:
    """Start a local cluster; on a loaded machine its node can time out during start-up, so retry."""
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            ray.init(**kwargs)
            return
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception for a start-up time-out
            ray.shutdown()  # a half-started node leaves no process behind
            if attempt == LOCAL_START_ATTEMPTS:
                raise UserError(
                    f"could not start a local Ray cluster ({LOCAL_START_ATTEMPTS} tries): {str(e).splitlines()[0]} "
                    "(is the machine overloaded? try again, or start one with `ray start --head` and set RAY_ADDRESS)"
                ) from None


def _auth_failure(error: BaseException) -> bool:
    """Whether a failed ray.init was refused for authentication (Ray wraps the cause in a ConnectionError)."""
    seen: BaseException | None = error
    while seen is not None:
        text = str(seen).lower()
        if isinstance(seen, ray.exceptions.AuthenticationError) or "unauthenticated" in text or "authentication" in text:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def check_resources(cfg: RunConfig) -> None:
    total = ray.cluster_resources()
    need = required_resources(cfg)
    r = cfg.resources
    if r.trainer_gpus > 0 and r.trainer_workers > 1 and r.trainer_workers > float(total.get("GPU", 0.0)) + 1e-9:
        raise UserError(
            f"resources.trainer_workers={r.trainer_workers} needs one GPU per worker but the Ray cluster "
            f"has {float(total.get('GPU', 0.0)):g} GPUs: lower resources.trainer_workers"
        )
    for kind in ("GPU", "CPU"):
        have = float(total.get(kind, 0.0))
        if need[kind] > have + 1e-9:
            raise UserError(
                f"the run asks for {need[kind]:g} {kind}s ({cfg.generation.num_generators} generators x "
                f"{getattr(cfg.resources, 'generator_' + kind.lower() + 's'):g} + trainer "
                f"{cfg.resources.trainer_workers} x {getattr(cfg.resources, 'trainer_' + kind.lower() + 's'):g} + evaluator "
                f"{getattr(cfg.resources, 'evaluator_' + kind.lower() + 's'):g}) but the Ray cluster has {have:g}"
            )


def preflight(cfg: RunConfig, *, build_model: bool) -> None:
    """Fail fast in the driver on bad tasks and model folders, with a clear message."""
    from workbench.engine.model.load import load_policy
    from workbench.tasks.base import load_task

    task = load_task(cfg.task)
    if build_model or not cfg.model.path.startswith("builtin:"):
        load_policy(cfg.model, task, device="cpu", progress=True)


class Coordinator:
    """Ray actor wrapping RunCoordinator; `run` blocks one thread, the others answer queries."""

    def __init__(self, cfg: RunConfig, resume: bool = True):
        sinks = []
        if cfg.tracking.mlflow and cfg.tracking.run_id:
            from workbench.tracking.mlflow_sink import MlflowSink
            from workbench.tracking.store import default_tracking_uri

            sinks.append(MlflowSink(cfg.tracking.run_id, cfg.tracking.tracking_uri or default_tracking_uri()))
        self.core = RunCoordinator(cfg, resume=resume, sinks=sinks)

    def run(self, max_steps: Optional[int], max_minutes: Optional[float]) -> dict[str, Any]:
        return self.core.run(max_steps=max_steps, max_minutes=max_minutes)

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


class RunHandle:
    def __init__(self, actor: Any, name: str, run_ref: Any = None):
        self.actor = actor
        self.name = name
        self.run_ref = run_ref

    def start(self, max_steps: Optional[int] = None, max_minutes: Optional[float] = None) -> "RunHandle":
        if self.run_ref is not None:
            raise UserError(f"run '{self.name}' was already started")
        self.run_ref = self.actor.run.remote(max_steps, max_minutes)
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
            raise RunFailed(_describe(e)) from None

    def kill(self) -> None:
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def actor_name(name: str) -> str:
    return f"run:{name}"


def launch(cfg: RunConfig, *, detached: bool = False, resume: bool = True, build_model: bool = True) -> RunHandle:
    cfg = absolute_paths(cfg)
    preflight(cfg, build_model=build_model)
    started = init_ray(cfg)
    try:
        check_resources(cfg)
    except UserError:
        if started:  # a cluster this call started for a run it refuses: leave nothing behind
            ray.shutdown()
        raise
    opts: dict[str, Any] = dict(num_cpus=0, max_concurrency=8, max_restarts=0)
    if detached:
        try:
            ray.get_actor(actor_name(cfg.name), namespace=NAMESPACE)
            raise UserError(f"a run named '{cfg.name}' is already live; attach to it or pick another name")
        except ValueError:
            pass
        opts.update(name=actor_name(cfg.name), namespace=NAMESPACE, lifetime="detached")
    actor = ray.remote(Coordinator).options(**opts).remote(cfg, resume)
    try:
        ray.get(actor.status.remote())
    except ray.exceptions.RayError as e:
        ray.kill(actor, no_restart=True)
        raise RunFailed(_describe(e)) from None
    return RunHandle(actor, cfg.name)


def attach(name: str) -> RunHandle:
    """Find a live detached run by name (after a kernel restart)."""
    try:
        actor = ray.get_actor(actor_name(name), namespace=NAMESPACE)
    except ValueError:
        raise UserError(f"no live run named '{name}' in the Ray cluster") from None
    return RunHandle(actor, name)


def run_to_end(cfg: RunConfig, *, resume: bool = True, timeout: Optional[float] = None) -> dict[str, Any]:
    """Launch, run to the end and release the actors; returns the run's summary."""
    handle = launch(cfg, resume=resume)
    try:
        handle.start()
        return handle.wait(timeout=timeout)
    finally:
        handle.kill()


def wait_with_progress(handle: RunHandle, max_steps: int, *, poll: float = 0.5, quiet: bool = False) -> dict[str, Any]:
    """Block until the run ends, showing a progress bar of steps, pass rate and compute."""
    from tqdm.auto import tqdm

    bar = None if quiet else tqdm(
        total=max_steps, desc=handle.name, unit="step", dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 10
    )
    seen, last_val, shown, told = 0, None, 0, 0
    try:
        while not handle.done():
            rows = handle.metrics(seen)
            seen += len(rows)
            for r in rows:
                if "val/pass_rate" in r:
                    last_val = r["val/pass_rate"]
            st = handle.status()
            for event in st.get("events", [])[told:]:  # generator restarts, curriculum warnings
                (tqdm.write if bar is not None else print)(f"{handle.name}: {event}", file=sys.stderr)
            told = len(st.get("events", []))
            if bar is not None:
                if st["step"] > shown:
                    bar.update(st["step"] - shown)
                    shown = st["step"]
                bar.set_postfix(
                    refresh=False,
                    val=f"{last_val:.3f}" if last_val is not None else "-",
                    dev_h=f"{st['compute/device_hours']:.4f}",
                    flops=f"{st['compute/flops']:.2e}",
                )
            time.sleep(poll)
        summary = handle.wait()
        if bar is not None and summary["steps"] > shown:
            bar.update(summary["steps"] - shown)
        return summary
    finally:
        if bar is not None:
            bar.close()
