"""reward.functions: checked at config load, imported by path, called TRL's way, combined by weight;
each bad return is one line naming the function and the example."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.config import run_config_from_dict
from workbench.configtools import ConfigError
from workbench.errors import UserError
from workbench.rl.reward_functions import (
    RewardFunctionError,
    correct,
    format_reward,
    load_reward_functions,
    score_batch,
)

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
PASS = {"fn": "trl_rewards:correct_number", "weight": 1.0, "pass": True}
BONUS = {"fn": "trl_rewards:short_bonus", "weight": 0.5}


@pytest.fixture(autouse=True)
def _helpers_importable(monkeypatch):
    """tests/helpers on sys.path here, as conftest puts it on the Ray workers' PYTHONPATH."""
    monkeypatch.syspath_prepend(str(HELPERS))


def _score(functions, completions, answers, ids=None):
    fns = load_reward_functions(functions)
    prompts = [f"q{i}" for i in range(len(completions))]
    return score_batch(fns, prompts, completions, {"answer": answers}, ids or list(range(100, 100 + len(completions))))


def test_a_trl_reward_function_gets_trl_arguments_and_its_values_are_weighted():
    import trl_rewards

    trl_rewards.CALLS.clear()
    completions = ["it is 7", "it is 8", "maybe 7 or 70"]
    s = _score([PASS, BONUS], completions, ["7", "7", "7"])
    call = trl_rewards.CALLS[-1]
    assert call["prompts"] == ["q0", "q1", "q2"] and call["completions"] == completions and call["answer"] == ["7"] * 3
    assert {"completion_ids", "trainer_state"} <= set(call)  # newer TRL's keywords, accepted through **kwargs
    bonus = [1.0 / (1 + len(c)) for c in completions]
    assert s.values["trl_rewards:correct_number"] == [1.0, 0.0, 0.0]
    assert s.rewards == pytest.approx([1.0 + 0.5 * bonus[0], 0.5 * bonus[1], 0.5 * bonus[2]])
    assert s.passed == [True, False, False]  # the pass function alone: the bonus (> 0 everywhere) never passes a sample


def test_the_pass_function_alone_decides_even_when_another_scores_higher():
    s = _score([{"fn": "trl_rewards:always_one", "weight": 5.0}, {**PASS, "weight": 0.1}], ["x 1", "x 2"], ["2", "2"])
    assert s.passed == [False, True]
    assert s.rewards == pytest.approx([5.0, 5.1])


@pytest.mark.parametrize(
    "fn, said",
    [
        ("trl_rewards:one_short", "reward function trl_rewards:one_short returned 2 values for 3 completions (examples 100..102)"),
        ("trl_rewards:gives_nan", "reward function trl_rewards:gives_nan returned nan for example 101 (completion 1 of the batch)"),
        ("trl_rewards:gives_text", "reward function trl_rewards:gives_text returned a str ('high') for example 100"),
        ("trl_rewards:gives_none", "reward function trl_rewards:gives_none returned a NoneType, not a list of 3 numbers"),
        ("trl_rewards:raises_on_seven", "reward function trl_rewards:raises_on_seven raised ValueError: cannot score a seven on example 102 (completion 2 of the batch)"),
    ],
)  # fmt: skip
def test_each_bad_return_is_one_line_naming_the_function_and_the_example(fn, said):
    with pytest.raises(RewardFunctionError) as e:
        _score([PASS, {"fn": fn, "weight": 1.0}], ["a 1", "b 2", "c 7"], ["1", "2", "7"])
    msg = str(e.value)
    assert "\n" not in msg and said in msg and "the batch is not trained on" in msg


@pytest.mark.parametrize(
    "functions, said",
    [
        ([BONUS], "exactly one function must have pass: true (it decides val/pass_rate); none has"),
        ([PASS, {**BONUS, "pass": True}], "exactly one function must have pass: true (it decides val/pass_rate); 2 have"),
        ([{"fn": "no_colon_here", "pass": True}], "reward.functions[0].fn: 'no_colon_here' is not package.module:function"),
        ([{**PASS, "weight": "big"}], "reward.functions[0].weight: 'big' is not a finite number"),
        ([{**PASS, "passes": True}], "reward.functions[0]: unknown key 'passes'"),
    ],
)
def test_bad_function_lists_are_refused_at_config_load(functions, said):
    with pytest.raises(ConfigError, match="reward.functions") as e:
        run_config_from_dict({"reward": {"functions": functions}})
    assert said in str(e.value)


@pytest.mark.parametrize(
    "fn, said",
    [
        ("trl_rewards:no_such_function", "reward.functions: cannot import 'trl_rewards:no_such_function': AttributeError"),
        ("no_such_module_xyz:f", "reward.functions: cannot import 'no_such_module_xyz:f': ModuleNotFoundError"),
        ("trl_rewards:NOT_CALLABLE", "reward.functions: 'trl_rewards:NOT_CALLABLE' is not callable"),
    ],
)
def test_a_bad_path_is_one_line_when_imported(fn, said):
    with pytest.raises(UserError) as e:
        load_reward_functions([{"fn": fn, "pass": True}])
    assert str(e.value).startswith(said) and "\n" not in str(e.value)


def test_shipped_functions_read_the_format_and_the_tasks_verdict():
    conv = [[{"role": "assistant", "content": "so <answer>3</answer>"}], [{"role": "assistant", "content": "3"}]]
    assert format_reward(conv, answer_format=["answer_tag", "answer_tag"]) == [1.0, 0.0]
    assert format_reward(["#### 3", "#### 3"], answer_format=["hash", None]) == [1.0, 0.0]  # no format: nothing to follow
    assert correct(["a", "b"], task_passed=[True, False]) == [1.0, -1.0]
    cfg = run_config_from_dict({"reward": {"functions": [{"fn": "workbench.rl.reward_functions:correct", "pass": True},
                                                         {"fn": "workbench.rl.reward_functions:format_reward", "weight": 0.2}]}})  # fmt: skip
    assert [f.spec for f in load_reward_functions(cfg.reward.functions)] == ["workbench.rl.reward_functions:correct", "workbench.rl.reward_functions:format_reward"]


def test_none_for_a_sample_means_not_applicable_as_in_trl():
    # TRL turns a None value into NaN and sums the weighted values with nansum: the function adds
    # nothing to that sample's reward (multi-task reward functions rely on it)
    s = _score([PASS, {"fn": "trl_rewards:only_sevens", "weight": 0.5}], ["it is 1", "c 7", "c 8"], ["1", "7", "7"])
    assert s.rewards == pytest.approx([1.0, 1.0 + 0.5 * 2.0, 0.5 * -2.0])
    assert s.passed == [True, True, False]
    assert s.values["trl_rewards:only_sevens"][0] != s.values["trl_rewards:only_sevens"][0]  # NaN: not applicable
    assert s.values["trl_rewards:only_sevens"][1:] == [2.0, -2.0]


def test_the_pass_function_must_score_every_sample():
    with pytest.raises(RewardFunctionError) as e:
        _score([{"fn": "trl_rewards:only_sevens", "weight": 1.0, "pass": True}], ["it is 1", "c 7"], ["1", "7"])
    msg = str(e.value)
    assert "\n" not in msg and "reward function trl_rewards:only_sevens returned None for example 100" in msg
    assert "the pass function decides every sample's verdict" in msg and "the batch is not trained on" in msg


def test_booleans_count_as_one_and_zero_as_in_trl():
    s = _score([PASS, {"fn": "trl_rewards:says_seven", "weight": 0.5}], ["it is 1", "c 7"], ["1", "1"])
    assert s.rewards == pytest.approx([1.0, 0.5]) and s.values["trl_rewards:says_seven"] == [0.0, 1.0]
    s = _score([{"fn": "trl_rewards:says_seven", "weight": 1.0, "pass": True}], ["a 7", "b 8"], ["7", "7"])
    assert s.passed == [True, False]


def test_an_error_message_of_several_lines_is_still_one_line():
    with pytest.raises(RewardFunctionError) as e:
        _score([PASS, {"fn": "trl_rewards:raises_two_lines", "weight": 1.0}], ["a 1"], ["1"])
    msg = str(e.value)
    assert "\n" not in msg and "raised ValueError: the judge said: status 503 try later on example 100" in msg
