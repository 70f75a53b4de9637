"""reward.functions: checked at config load, imported by path, called TRL's way, combined by weight;
TRL's contract (no pass flag needed, None for "not applicable", trainer_state's fields, the
functions' names); each bad return is one line naming the function and the example."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from workbench.config import run_config_from_dict
from workbench.configtools import ConfigError
from workbench.errors import UserError
from workbench.rl.reward_functions import (
    MAX_CULPRIT_CALLS,
    RewardFunctionError,
    RewardState,
    ValueStats,
    correct,
    format_reward,
    load_reward_functions,
    score_batch,
    value_metrics,
)

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
PASS = {"fn": "trl_rewards:correct_number", "weight": 1.0, "pass": True}
BONUS = {"fn": "trl_rewards:short_bonus", "weight": 0.5}


@pytest.fixture(autouse=True)
def _helpers_importable(monkeypatch):
    """tests/helpers on sys.path here, as conftest puts it on the Ray workers' PYTHONPATH."""
    monkeypatch.syspath_prepend(str(HELPERS))


def _score(functions, completions, answers, ids=None, **kw):
    fns = load_reward_functions(functions)
    prompts = [f"q{i}" for i in range(len(completions))]
    return score_batch(fns, prompts, completions, {"answer": answers}, ids or list(range(100, 100 + len(completions))), **kw)


def test_a_trl_reward_function_gets_trl_arguments_and_its_values_are_weighted():
    import trl_rewards

    trl_rewards.CALLS.clear()
    completions = ["it is 7", "it is 8", "maybe 7 or 70"]
    s = _score([PASS, BONUS], completions, ["7", "7", "7"])
    call = trl_rewards.CALLS[-1]
    assert call["prompts"] == ["q0", "q1", "q2"] and call["completions"] == completions and call["answer"] == ["7"] * 3
    assert {"completion_ids", "trainer_state"} <= set(call)  # newer TRL's keywords, accepted through **kwargs
    bonus = [1.0 / (1 + len(c)) for c in completions]
    assert s.values["correct_number"] == [1.0, 0.0, 0.0]  # by the function's name, as TRL names it
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
        ("trl_rewards:raises_on_seven", "reward function trl_rewards:raises_on_seven raised ValueError: cannot score a seven on example 102 (completion 2 of the batch, found in 3 more calls on parts of the batch)"),
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
        ([PASS, {**BONUS, "pass": True}], "at most one function may have pass: true (it decides val/pass_rate; none: the only "
                                          "function, or the task's checker); 2 have (trl_rewards:correct_number, trl_rewards:short_bonus)"),
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
    assert math.isnan(s.values["only_sevens"][0])  # NaN: not applicable
    assert s.values["only_sevens"][1:] == [2.0, -2.0]


def test_the_pass_function_may_say_none_too_the_sample_is_not_applicable():
    """TRL's accuracy_reward gives None for a gold answer it cannot parse: no error, no verdict."""
    s = _score([{"fn": "trl_rewards:only_sevens", "weight": 1.0, "pass": True}, BONUS], ["it is 1", "c 7"], ["1", "7"])
    assert s.passed == [None, True]
    assert s.rewards == pytest.approx([0.5 / 8, 2.0 + 0.5 / 4])  # the pass function adds nothing to the first


def test_a_single_function_decides_without_a_flag_and_several_unmarked_leave_it_to_the_task():
    alone = load_reward_functions([{"fn": "trl_rewards:correct_number"}])
    assert [f.decides_pass for f in alone] == [True]  # TRL has no pass flag: the only function decides
    s = _score([{"fn": "trl_rewards:correct_number"}], ["it is 7", "it is 8"], ["7", "7"])
    assert s.passed == [True, False]
    assert [f.decides_pass for f in load_reward_functions([{"fn": "trl_rewards:correct_number", "pass": False}])] == [False]
    s = _score([{"fn": "trl_rewards:correct_number"}, BONUS], ["it is 7", "it is 8"], ["7", "7"])
    assert s.passed is None  # several, none marked: the task's own checker decides (tasks/base.py)
    assert s.rewards == pytest.approx([1.0 + 0.5 / 8, 0.5 / 8])
    run_config_from_dict({"reward": {"functions": [{"fn": "trl_rewards:correct_number"}, BONUS]}})  # accepted at config load


def test_trainer_state_has_trls_fields():
    import trl_rewards

    trl_rewards.CALLS.clear()
    _score([PASS], ["it is 7"], ["7"], trainer_state=RewardState(global_step=30, max_steps=120, epoch=1.5))
    state = trl_rewards.CALLS[-1]["trainer_state"]
    assert (state.global_step, state.max_steps, state.epoch) == (30, 120, 1.5)
    s = _score([PASS, {"fn": "trl_rewards:progress", "weight": 1.0}], ["it is 7"], ["7"], trainer_state=RewardState(30, 120, 1.5))
    assert s.values["progress"] == [0.25]


def test_functions_are_named_as_trl_names_them_and_a_shared_name_by_its_path():
    fns = load_reward_functions([PASS, {"fn": "workbench.rl.reward_functions:correct"}, {"fn": "trl_rewards:correct"},
                                 {**BONUS, "weight": 0.1}, BONUS])  # fmt: skip
    assert [f.name for f in fns] == ["correct_number", "workbench.rl.reward_functions.correct", "trl_rewards.correct",
                                     "trl_rewards.short_bonus_4", "trl_rewards.short_bonus_5"]  # fmt: skip


def test_a_raising_batch_is_narrowed_in_a_few_calls_not_one_per_sample():
    import trl_rewards

    texts = [f"x {i % 5}" for i in range(64)]
    texts[40] = "x 7"
    trl_rewards.RAISE_CALLS.clear()
    with pytest.raises(RewardFunctionError) as e:
        _score([PASS, {"fn": "trl_rewards:raises_on_seven", "weight": 1.0}], texts, ["1"] * 64)
    assert len(trl_rewards.RAISE_CALLS) == 1 + MAX_CULPRIT_CALLS  # the batch call, then halves: 32, 16, 8, 4 samples
    assert trl_rewards.RAISE_CALLS[1:] == [32, 16, 8, 4]
    assert "on one of examples 140..143 (completions 40..43 of the batch, found in 4 more calls on parts of the batch)" in str(e.value)


def test_a_function_that_fails_only_on_the_whole_batch_is_reported_as_the_batch():
    with pytest.raises(RewardFunctionError) as e:
        _score([PASS, {"fn": "trl_rewards:raises_on_batches_of_three", "weight": 1.0}], ["a", "b", "c"], ["1"] * 3)
    assert "on a batch of 3 completions (examples 100..102; no part of it raised alone in 3 more calls)" in str(e.value)


def test_value_stats_add_up_over_chunks_as_trls_nanmean_and_nanstd():
    xs = [1.0, 0.0, math.nan, 0.5, 1.0, math.nan, 0.25]
    whole = ValueStats.of(xs)
    parts = ValueStats.of(xs[:3]).merged(ValueStats.of(xs[3:]))
    given = np.array([x for x in xs if not math.isnan(x)])
    for s in (whole, parts):
        assert s.mean == pytest.approx(given.mean()) and s.std == pytest.approx(given.std(ddof=1)) and s.none == 2
    m = value_metrics({"acc": whole, "never": ValueStats.of([math.nan])}, "rewards")
    assert m == {"rewards/acc/mean": pytest.approx(given.mean()), "rewards/acc/std": pytest.approx(given.std(ddof=1)),
                 "rewards/acc/none": 2.0, "rewards/never/none": 1.0}  # fmt: skip


def test_booleans_count_as_one_and_zero_as_in_trl():
    s = _score([PASS, {"fn": "trl_rewards:says_seven", "weight": 0.5}], ["it is 1", "c 7"], ["1", "1"])
    assert s.rewards == pytest.approx([1.0, 0.5]) and s.values["says_seven"] == [0.0, 1.0]
    s = _score([{"fn": "trl_rewards:says_seven", "weight": 1.0, "pass": True}], ["a 7", "b 8"], ["7", "7"])
    assert s.passed == [True, False]


def test_an_error_message_of_several_lines_is_still_one_line():
    with pytest.raises(RewardFunctionError) as e:
        _score([PASS, {"fn": "trl_rewards:raises_two_lines", "weight": 1.0}], ["a 1"], ["1"])
    msg = str(e.value)
    assert "\n" not in msg and "raised ValueError: the judge said: status 503 try later on example 100" in msg
