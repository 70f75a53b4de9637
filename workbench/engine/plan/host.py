"""A CPU run's host beyond the actors' tensors: each process's runtime, and the line Ray's OOM killer draws.

    terms = runtime_terms(*process_counts(settings, evaluator_on_vllm))   # {"runtime: ...": bytes}
    budget, note = host_budget(host_bytes)                        # 0.95 x the host (RAY_memory_usage_threshold)

The plan's roles count tensors: weights, optimizer states, activations, KV caches. A process holds
more: the interpreter, torch's (and vLLM's) libraries and allocator pools, Ray's worker runtime;
and a run has processes with no role: the driver (`workbench run` or a notebook), the coordinator,
Ray's own daemons. On a GPU cluster that is host memory the plan does not bound; on a CPU run it
shares the one budget with everything else. The figures are proportional set sizes (PSS: a library
mapped by several processes split among them, as the kernel's used memory counts it; `Pss` of
/proc/PID/smaps_rollup), measured 2026-12-07 during a run of configs/smollm2-tools.yaml's calculator
in fp32 (benchmarks/bench_env_vs_trl.py's workbench side; 2 cores, 24 GB):

- a vLLM-CPU engine (its actor runs the engine in-process): 3.5 GB PSS two minutes in, 4.2 GB at its
  highest over 20 minutes, where the plan counts 1.89 GB of weights, KV cache and runtime peak:
  RUNTIME_VLLM 2.4 GB beside them;
- a torch actor (the trainer, a torch generator or evaluator): the coordinator, a Ray actor that
  imports torch and holds no model, 0.53 GB: RUNTIME_TORCH 0.5 GB;
- the driver (`workbench run`, 0.52 GB), the coordinator and Ray's daemons (GCS, raylet, dashboard,
  agents: 0.41 GB) together, 1.46 GB: RUNTIME_DRIVER 1.5 GB.

Ray's memory monitor stops a worker once the node's used memory passes `RAY_memory_usage_threshold`
(default 0.95) of its total ("Memory usage 24256688128B exceeded threshold of 24012374016B (95.0% of
25276182528B limit)", the smollm2-tools run it stopped at micro_batch_tokens 4096): the host's
budget is that share, not all of it.
"""

from __future__ import annotations

import os

from workbench.engine.plan.memory import GB, Settings

RAY_THRESHOLD = 0.95  # Ray's default memory_usage_threshold
RUNTIME_TORCH = 0.5 * GB
RUNTIME_VLLM = 2.4 * GB
RUNTIME_DRIVER = 1.5 * GB


def ray_threshold() -> float:
    """The share of the host Ray lets workers use: RAY_memory_usage_threshold where set (0 < x <= 1)."""
    try:
        x = float(os.environ.get("RAY_memory_usage_threshold", RAY_THRESHOLD))
    except ValueError:
        return RAY_THRESHOLD
    return x if 0 < x <= 1 else RAY_THRESHOLD


def host_budget(host_bytes: float) -> tuple[float, str]:
    """The actors' budget on a CPU host, and the note that says where it comes from."""
    x = ray_threshold()
    return x * host_bytes, (f"budget {x:.0%} of host memory: past it Ray's memory monitor stops a worker "
                            "(RAY_memory_usage_threshold)")  # fmt: skip


def process_counts(s: Settings, evaluator_on_vllm: bool) -> tuple[int, int]:
    """(torch processes, vLLM-CPU engines) of a CPU run with Settings `s`: the trainer workers, the
    generators of its backend, and the evaluator (none with `s.evaluates` off) on vLLM or torch."""
    evaluator = int(s.evaluates)
    vllm = s.num_generators * (s.backend == "vllm") + evaluator * evaluator_on_vllm
    torch = s.trainer_workers + s.num_generators * (s.backend != "vllm") + evaluator * (not evaluator_on_vllm)
    return torch, vllm


def runtime_terms(torch_processes: int, vllm_processes: int) -> dict[str, float]:
    """The processes' runtimes beside their tensors (bytes), one term per kind present."""
    terms = {"runtime: driver, coordinator, Ray": RUNTIME_DRIVER}
    if torch_processes:
        terms[f"runtime: {torch_processes} torch process{'es' if torch_processes > 1 else ''}"] = torch_processes * RUNTIME_TORCH
    if vllm_processes:
        terms[f"runtime: {vllm_processes} vLLM-CPU engine{'s' if vllm_processes > 1 else ''}"] = vllm_processes * RUNTIME_VLLM
    return terms
