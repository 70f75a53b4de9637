"""Start-up order of a run's actors: vLLM engines sharing a GPU start after the trainer and one
after another (each sizes its KV cache from the GPU's free memory); otherwise all start at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from workbench.config import run_config_from_dict
from workbench.engine.run.actors import generator_class, start_one_by_one, start_order

ONE_GPU = {"generation.backend": "vllm", "resources.num_gpus": 1, "resources.generator_gpus": 0.5,
           "generation.vllm_gpu_memory_utilization": 0.45, "resources.trainer_gpus": 0.5}  # fmt: skip


@pytest.mark.parametrize(
    "overrides,order",
    [
        (ONE_GPU, "sequential"),  # vLLM generator and trainer on one GPU
        ({**ONE_GPU, "resources.generator_gpus": 0.4, "resources.evaluator_gpus": 0.1,
          "generation.vllm_gpu_memory_utilization": 0.09}, "sequential"),  # fmt: skip
        ({"generation.backend": "vllm", "resources.num_gpus": 3, "resources.generator_gpus": 1, "resources.trainer_gpus": 1,
          "resources.evaluator_gpus": 0.5, "generation.vllm_gpu_memory_utilization": 0.45}, "sequential"),  # a vLLM evaluator on a share  # fmt: skip
        ({"generation.backend": "vllm", "resources.num_gpus": 2, "resources.generator_gpus": 1, "resources.trainer_gpus": 1}, "parallel"),
        ({"generation.backend": "vllm", "resources.generator_gpus": 0}, "parallel"),  # vLLM's CPU engine
        ({"resources.num_gpus": 1, "resources.generator_gpus": 0.3, "resources.trainer_gpus": 0.7}, "parallel"),  # torch generator
        ({}, "parallel"),
    ],
    ids=["vllm-shares-trainer-gpu", "vllm-evaluator-share", "evaluator-share-only", "whole-gpus", "vllm-cpu", "torch-shares", "cpu"],
)
def test_vllm_engines_sharing_a_gpu_start_one_after_another(overrides, order):
    assert start_order(run_config_from_dict({}, overrides)) == order


ENV = {"task.name": "env", "task.env": "workbench.envs.guess:GuessNumberEnv", "recipe.length_control.type": "none"}
GPUS = {"resources.num_gpus": 2, "resources.generator_gpus": 1, "resources.trainer_gpus": 1}


@pytest.mark.parametrize(
    "overrides,evaluator",
    [
        ({**ENV, "generation.backend": "vllm"}, "VllmGenerator"),  # episodes on a CPU run: vLLM's prefix cache serves each turn
        ({"generation.backend": "vllm"}, "Evaluator"),  # one-turn prompts on a CPU run: the torch evaluator, as measured
        (ENV, "Evaluator"),  # generation.backend=torch
        ({**ENV, **GPUS, "generation.backend": "vllm"}, "Evaluator"),  # GPUs, no evaluator share: the CUDA build has no CPU engine
        ({**GPUS, "resources.num_gpus": 3, "resources.evaluator_gpus": 1, "generation.backend": "vllm"}, "VllmGenerator"),
    ],
    ids=["env-cpu-vllm", "one-turn-cpu-vllm", "env-torch", "env-gpus-no-evaluator-share", "evaluator-gpu"],
)
def test_an_environments_evaluator_on_a_cpu_run_is_a_vllm_engine(overrides, evaluator):
    from workbench.engine.plan import plan_for
    from workbench.engine.plan.build import cluster_shape

    qwen = Path(__file__).resolve().parents[2] / "data" / "model_configs" / "qwen2.5-0.5b"  # a shape the plan reads
    cfg = run_config_from_dict({}, {**overrides, "model.path": str(qwen)})
    assert generator_class(cfg, evaluator=True).__name__ == evaluator
    if not overrides.get("resources.num_gpus"):  # the CPU plan counts the engine the run starts
        row = next(r for r in plan_for(cfg, cluster_shape(), prompt=128).roles if r.name == "evaluator")
        vllm_row = "KV cache" in row.terms and "KV cache (HF)" not in row.terms
        assert vllm_row == (evaluator == "VllmGenerator"), row.terms


class Loader:
    """A real actor whose start-up takes a while; it records when it began and finished loading."""

    def __init__(self, seconds: float):
        self.began = time.time()
        time.sleep(seconds)
        self.loaded = time.time()

    def ping(self) -> tuple[float, float]:
        return self.began, self.loaded


def test_each_engine_starts_only_once_the_previous_one_has_loaded(ray_cluster):
    cls = ray_cluster.remote(Loader).options(num_cpus=0)
    created: list = []
    handles = start_one_by_one([lambda: cls.remote(0.5) for _ in range(3)], created)
    try:
        assert handles is created and len(handles) == 3
        spans = ray_cluster.get([h.ping.remote() for h in handles])
        for (_, loaded), (began, _) in zip(spans, spans[1:]):
            assert began >= loaded  # the next actor's constructor ran after the previous had loaded
    finally:
        for h in created:
            ray_cluster.kill(h)


def test_a_failing_engine_stops_the_start_and_leaves_the_started_ones_to_kill(ray_cluster):
    cls = ray_cluster.remote(Loader).options(num_cpus=0)
    created: list = []
    with pytest.raises(Exception):
        start_one_by_one([lambda: cls.remote(0.0), lambda: cls.remote("not seconds"), lambda: cls.remote(0.0)], created)
    try:
        assert len(created) == 2  # the third was never created; the caller kills the first two
    finally:
        for h in created:
            ray_cluster.kill(h)
