"""`task: {name: env, ...}` at config load and as a task: a bad factory, a tool environment with no reward,
a factory without a dataset that takes no seed, length control and a too-small episode budget are each
one line before Ray starts; rows reach reset(**row) whole (the prompt column too), with or without an
answer column or a prompt; without a dataset the factory's rows are seeds, train and validation apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.config import run_config_from_dict
from workbench.configtools import ConfigError
from workbench.tasks.base import load_task

HELPERS = Path(__file__).resolve().parents[2] / "helpers"


@pytest.fixture(autouse=True)
def _fixtures_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))


def _cfg(tmp_path, **over):
    rows = tmp_path / "rows.jsonl"
    if not rows.exists():
        rows.write_text("".join(json.dumps({"prompt": f"Add {i} and {i + 1}.", "answer": 2 * i + 1}) + "\n" for i in range(30)))
    base = {"task.name": "env", "task.env": "env_fixtures:AddEnv", "task.path": str(rows), "task.num_val": 5,
            "recipe.length_control.type": "none", "eval.num_prompts": 5}  # fmt: skip
    return run_config_from_dict({}, {**base, **over})


@pytest.mark.parametrize("over,message", [
    ({"task.env": None}, "task.env: name the environment factory"),
    ({"recipe.length_control.type": "interrupt"}, "recipe.length_control.type: interrupt is not applied"),
    ({"env.max_episode_tokens": 64, "generation.max_new_tokens": 64}, "env.max_episode_tokens (64) must exceed"),
    ({"env.max_turns": 0}, "env.max_turns must be a whole number >= 1"),
    ({"env.tool_exceptions": "ignore"}, "env.tool_exceptions: 'ignore' is not one of ['reply', 'drop']"),
])  # fmt: skip
def test_each_bad_setting_is_one_line_at_config_load(tmp_path, over, message):
    with pytest.raises(ConfigError) as e:
        _cfg(tmp_path, **over)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("over,message", [
    ({"task.env": "env_fixtures:Missing"}, "task.env"),
    ({"task.env": "no_such_module:Env"}, "no_such_module"),
    ({"task.env": "env_fixtures:FactoryRaises"}, "constructing FactoryRaises() raised RuntimeError: no licence server"),
    ({"task.env": "env_fixtures:NoReward"}, "NoReward has no get_reward() and reward.functions is empty"),
    ({"task.env": "env_fixtures:NoSeed", "task.path": None}, "NoSeed.reset takes no `seed`"),
])  # fmt: skip
def test_a_bad_factory_is_one_line_before_launch_and_a_saved_config_still_reads(tmp_path, over, message):
    """The factory is imported and constructed by the driver's preflight, before Ray starts; reading the
    config (a finished run's config.json, where the environment may be gone) imports nothing of it."""
    from workbench.engine.run.preflight import preflight
    from workbench.errors import UserError

    cfg = _cfg(tmp_path, **{"out_dir": str(tmp_path / "run"), **over})
    with pytest.raises(UserError) as e:
        preflight(cfg, build_model=False)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_task_env_is_refused_on_another_task(tmp_path):
    with pytest.raises(ConfigError, match="task.env is for task.name env"):
        run_config_from_dict({}, {"task.name": "addition", "task.env": "env_fixtures:AddEnv"})


def test_a_tool_environment_without_get_reward_runs_with_reward_functions(tmp_path):
    cfg = _cfg(tmp_path, **{"task.env": "env_fixtures:NoReward", "reward.functions": [{"fn": "trl_rewards:correct_number"}]})
    assert cfg.task.env == "env_fixtures:NoReward"


def test_rows_reach_reset_whole_and_split_apart(tmp_path):
    task = load_task(_cfg(tmp_path).task)
    assert task.env.name == "AddEnv" and task.chat_template and len(task.val) == 5 and len(task.train) == 25
    ex = task.train[0]
    assert set(ex.columns) == {"prompt", "answer"} and ex.prompt == ex.columns["prompt"]  # the prompt column too, as TRL passes it
    assert not {e.prompt for e in task.train} & {e.prompt for e in task.val}


def test_rows_need_no_answer_nor_prompt(tmp_path):
    rows = tmp_path / "games.jsonl"
    rows.write_text("".join(json.dumps({"target": t, "messages": [{"role": "user", "content": f"game {t}"}]}) + "\n"
                            for t in range(12)))  # fmt: skip
    cfg = _cfg(tmp_path, **{"task.env": "workbench.envs.guess:GuessNumberEnv", "task.path": str(rows), "task.num_val": 2,
                            "task.prompt_key": "messages", "eval.num_prompts": 2})  # fmt: skip
    task = load_task(cfg.task)
    assert len(task.train) == 10 and task.train[0].messages and task.train[0].answer == ""


def test_without_a_dataset_the_rows_are_seeds_never_shared(tmp_path):
    cfg = _cfg(tmp_path, **{"task.env": "workbench.envs.guess:GuessNumberEnv", "task.path": None, "task.num_train": 40,
                            "task.num_val": 8, "eval.num_prompts": 8})  # fmt: skip
    task = load_task(cfg.task)
    train, val = {e.columns["seed"] for e in task.train}, {e.columns["seed"] for e in task.val}
    assert len(train) == 40 and len(val) == 8 and not train & val
    other = load_task(_cfg(tmp_path, **{"task.env": "workbench.envs.guess:GuessNumberEnv", "task.path": None,
                                        "task.seed": 1, "eval.num_prompts": 5}).task)  # fmt: skip
    assert {e.columns["seed"] for e in other.val} != val


def test_the_memory_plan_counts_the_whole_episode(tmp_path):
    """An episode's context is env.max_episode_tokens, not a prompt plus one completion."""
    from tests.helpers.tiny_hf import build_tiny_hf
    from workbench.engine.plan.build import plan_for
    from workbench.engine.plan.memory import Cluster

    model = build_tiny_hf(tmp_path / "m", "qwen2", corpus=["Add 1 and 2."])
    cfg = _cfg(tmp_path, **{"model.path": str(model), "env.max_episode_tokens": 3000, "generation.max_new_tokens": 200})
    plan = plan_for(cfg, Cluster(0, 64 * 2**30, source="test"))
    assert "prompt tokens: 2,800 (env.max_episode_tokens less generation.max_new_tokens" in " ".join(plan.notes)
    bigger = plan_for(_cfg(tmp_path, **{"model.path": str(model), "env.max_episode_tokens": 12000,
                                        "generation.max_new_tokens": 200}), Cluster(0, 64 * 2**30, source="test"))  # fmt: skip
    assert sum(r.need for r in bigger.roles) > sum(r.need for r in plan.roles)


def test_preflight_refuses_an_episode_budget_the_prompts_do_not_leave_a_turn_in(tmp_path):
    from tests.helpers.tiny_hf import build_tiny_hf
    from workbench.engine.run.preflight import check_sequences
    from workbench.errors import UserError

    model = build_tiny_hf(tmp_path / "m", "qwen2", corpus=["Add 1 and 2."], max_positions=4096)

    def check(**over):
        cfg = _cfg(tmp_path, **{"model.path": str(model), "generation.max_new_tokens": 32, **over})
        check_sequences(cfg, load_task(cfg.task))

    check(**{"env.max_episode_tokens": 3000})  # the schema (~1,000 tokens with this tiny vocabulary) and a turn fit
    with pytest.raises(UserError, match=r"the longest prompt, the tools' schema included, is \d+ tokens: .* raise env.max_episode_tokens"):
        check(**{"env.max_episode_tokens": 300})
    with pytest.raises(UserError, match=r"env.max_episode_tokens = 5000 is past the model's context of 4096"):
        check(**{"env.max_episode_tokens": 5000})
    with pytest.raises(UserError, match=r"train.micro_batch_tokens = 2000 is below env.max_episode_tokens = 3000"):
        check(**{"env.max_episode_tokens": 3000, "train.micro_batch_tokens": 2000})


def test_an_environment_takes_a_system_prompt_without_setting_the_chat_template(tmp_path):
    """An episode is a conversation: the chat template is implied, and task.system_prompt is its system turn."""
    task = load_task(_cfg(tmp_path, **{"task.system_prompt": "Use the tools."}).task)
    assert task.chat_template and task.system_prompt == "Use the tools."
