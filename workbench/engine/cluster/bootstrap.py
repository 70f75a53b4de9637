"""How a driver gets its Ray cluster: the one bootstrap of `workbench run`, Session and sweeps.

    started = connect_for_run(cfg)        # `workbench run`, run_to_end: a cluster of its own
    address = connect_for_session(cfg)    # Session: the recorded cluster that outlives the kernel
    address = connect(address=..., start_if_missing=False)   # attach to a live one

Whichever way, the address comes first from `resources.ray_address`, then $RAY_ADDRESS (a
shared cluster: connected to with this driver's token when it has one, never started or
stopped here). Without one, a run gets a Ray local cluster (`ray.init(address="local")`) that
ends with the driver, and a Session gets the recorded `ray start --head` cluster (local.py),
started if none is reachable. A cluster started here has `resources.num_cpus` CPUs, or by
default as many as the machine has and at least what the run's actors ask for (CPU slots are
logical), and `resources.num_gpus` GPUs.
"""

from __future__ import annotations

import math
import os
from typing import Any, Optional

from workbench.config import RunConfig
from workbench.engine.cluster.common import NAMESPACE, auth_failure, token_available, use_token_auth
from workbench.engine.cluster.local import hold, reachable, recorded_address, start, state_dir
from workbench.errors import UserError

LOCAL_START_ATTEMPTS = 3


def required_resources(cfg: RunConfig) -> dict[str, float]:
    """CPUs and GPUs the run's actors ask for (generators, trainer workers, evaluator)."""
    r = cfg.resources
    n = cfg.generation.num_generators
    t = r.trainer_workers
    return {
        "CPU": n * r.generator_cpus + t * r.trainer_cpus + r.evaluator_cpus,
        "GPU": n * r.generator_gpus + t * r.trainer_gpus + r.evaluator_gpus,
    }


def cluster_cpus(cfg: RunConfig) -> int:
    """CPUs of a cluster started for `cfg`: resources.num_cpus, else the machine's and at least
    what the run asks for."""
    return cfg.resources.num_cpus or max(os.cpu_count() or 1, math.ceil(required_resources(cfg)["CPU"]))


def connect_for_run(cfg: RunConfig) -> bool:
    """Connect to the configured cluster or start a Ray local cluster for this driver.
    True when this call started Ray (the caller then owns its shutdown)."""
    import ray

    if ray.is_initialized():
        return False
    connect(cluster_cpus(cfg), cfg.resources.num_gpus, cfg.resources.ray_address, lasting=False)
    return True


def connect_for_session(cfg: RunConfig) -> str:
    """Connect to (or start) the recorded cluster that outlives the kernel, sized for `cfg`, and
    hold it (released, and stopped if idle, when this process exits); returns its address."""
    address = connect(cluster_cpus(cfg), cfg.resources.num_gpus, cfg.resources.ray_address)
    hold(address)
    return address


def connect(
    num_cpus: Optional[int] = None,
    num_gpus: Optional[int] = None,
    address: Optional[str] = None,
    *,
    start_if_missing: bool = True,
    lasting: bool = True,
    log_to_driver: Optional[bool] = None,
) -> str:
    """ray.init against `address`, $RAY_ADDRESS, or else (`lasting`) the recorded local cluster
    or a new one, or (not `lasting`) a Ray local cluster of this process (tests and benchmarks
    too). Returns the address. The actors' output reaches this driver when `log_to_driver`
    (default: only for a cluster of this process).

    An existing cluster may require Ray's token authentication: the driver's token
    ($RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) is sent when there is one (Ray
    sends it on its own only to a cluster it finds by itself). A refused or missing token is
    reported as "authentication failed", not as an unreachable cluster.
    """
    import ray

    if ray.is_initialized():
        return ray.get_runtime_context().gcs_address
    to_driver = (not lasting) if log_to_driver is None else log_to_driver
    kwargs: dict[str, Any] = dict(namespace=NAMESPACE, logging_level="ERROR", log_to_driver=to_driver)
    address = address or os.environ.get("RAY_ADDRESS")
    if address is not None:
        _init_at(address, token_available(), kwargs)
        return address
    if not lasting:
        # address="local": a new cluster of our own, even when `ray start` left one recorded
        _start_local(dict(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, **kwargs))
        return ray.get_runtime_context().gcs_address
    address = recorded_address()
    if address is None or not reachable(address):
        if not start_if_missing:
            raise UserError(
                "no live Ray cluster to attach to (none recorded in "
                f"{state_dir() / 'ray_address'} and RAY_ADDRESS is not set)"
            )
        address = start(num_cpus, num_gpus)
    _init_at(address, True, kwargs)  # our clusters require the token
    return address


def _init_at(address: str, send_token: bool, kwargs: dict[str, Any]) -> None:
    import ray

    if send_token:
        use_token_auth()
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ray.exceptions.AuthenticationError) as e:
        if auth_failure(e):
            sent = "the token this driver sent was refused" if send_token else "this driver has no token"
            raise UserError(
                f"authentication failed at the Ray cluster {address}: {sent}; put the cluster's token in "
                "~/.ray/auth_token or $RAY_AUTH_TOKEN (on its head node: ray get-auth-token)"
            ) from None
        raise UserError(f"cannot reach the Ray cluster at {address}: {e}") from None


def _start_local(kwargs: dict[str, Any]) -> None:
    """Start a local cluster; on a loaded machine its node can time out during start-up, so retry."""
    import ray

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
