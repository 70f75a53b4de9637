"""Start-up order of a run's actors: vLLM engines sharing a GPU start after the trainer and one
after another (each sizes its KV cache from the GPU's free memory); otherwise all start at once."""

from __future__ import annotations

import time

import pytest

from workbench.config import run_config_from_dict
from workbench.engine.run.actors import start_one_by_one, start_order

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
