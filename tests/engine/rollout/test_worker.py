"""The rollout worker's side of reward.functions, in-process (no Ray): TRL's trainer_state from the
weights' versions it is sent, and each function's values summed per chunk for the step's metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.engine.rollout.torch_backend import Generator
from workbench.engine.run.actors import generator_parts

HELPERS = Path(__file__).resolve().parents[2] / "helpers"


def test_reward_functions_get_the_trainers_step_max_steps_and_epoch(tiny_config, monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))
    import trl_rewards

    fns = [{"fn": "trl_rewards:correct_number", "pass": True}, {"fn": "trl_rewards:progress", "weight": 0.0}]
    cfg = tiny_config({"reward.functions": fns, "train.max_steps": 8}, name="state", for_actors=True)
    gen = Generator(**generator_parts(cfg))
    trl_rewards.CALLS.clear()
    chunk = gen.generate(0, [0, 1], 2, seed=0)
    state = trl_rewards.CALLS[-1]["trainer_state"]
    assert (state.global_step, state.max_steps, state.epoch) == (0, 8, 0.0)
    assert chunk.reward_values["progress"].mean == 0.0 and chunk.reward_values["correct_number"].count == 4
    # the trainer took 3 optimizer steps: its weights arrive as version 3 (engine/run/weight_sync.py)
    gen.set_weights({k: v.clone() for k, v in gen.model.state_dict().items()}, 3)
    chunk = gen.generate(1, [2, 3], 2, seed=1)
    state = trl_rewards.CALLS[-1]["trainer_state"]
    assert state.global_step == 3 and state.max_steps == 8
    assert state.epoch == pytest.approx(3 * cfg.train.prompts_per_step / cfg.task.num_train)  # prompts trained / training prompts
    assert chunk.reward_values["progress"].mean == pytest.approx(3 / 8) and chunk.reward_values["progress"].none == 0
