"""reward.functions through the batch checks (tasks.base.check_batch) and into groups and validation
(engine/rollout/scoring.py): TRL's arguments for a conversational dataset, the weighted reward, and
the pass function alone deciding val/pass_rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.config import TaskConfig
from workbench.engine.model.sampling import Completion
from workbench.engine.rollout.scoring import validation_metrics, verdict_groups
from workbench.rl.reward_functions import RewardFunctionError, RewardState, load_reward_functions
from workbench.tasks.base import check_batch, load_task

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
SYSTEM = "Answer with a number."


@pytest.fixture(autouse=True)
def _helpers_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))


@pytest.fixture
def chat_task(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": 2 * i, "source": f"s{i}"} for i in range(12)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_task(TaskConfig(name="jsonl", path=str(path), num_val=4, chat_template=True, system_prompt=SYSTEM, answer_format="boxed"))


FUNCTIONS = [{"fn": "trl_rewards:correct_number", "weight": 1.0, "pass": True},
             {"fn": "workbench.rl.reward_functions:format_reward", "weight": 0.5}]  # fmt: skip


def test_functions_get_conversations_and_columns_and_the_verdict_is_theirs(chat_task):
    import trl_rewards

    task = chat_task
    task.reward_functions = load_reward_functions(FUNCTIONS)
    ex = task.val[0]
    right, wrong = ex.answer, str(int(ex.answer) + 1)
    texts = [f"\\boxed{{{right}}}", f"{right}", f"\\boxed{{{wrong}}}", f"{wrong}"]
    trl_rewards.CALLS.clear()
    verdicts = check_batch(task, texts, [ex] * 4, completion_ids=[[1, 2]] * 4, trainer_state=RewardState(7, 20, 0.5))
    call = trl_rewards.CALLS[-1]
    assert call["prompts"][0] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ex.prompt.removeprefix("user: ")}]
    assert call["completions"][0] == [{"role": "assistant", "content": texts[0]}]
    assert call["source"] == [ex.columns["source"]] * 4 and call["answer"] == [int(ex.answer)] * 4  # the dataset's own column
    assert call["task_passed"] == [True, False, False, False]  # the task's checker (math on the boxed answer)
    assert call["completion_ids"] == [[1, 2]] * 4 and call["trainer_state"] == RewardState(7, 20, 0.5)
    # the pass function decides: "2" without the box passes it (the task's checker would not), the format adds 0.5
    assert [v.passed for v in verdicts] == [True, True, False, False]
    assert [v.reward for v in verdicts] == [1.5, 1.0, 0.5, 0.0]
    assert verdicts[0].values == {"correct_number": 1.0, "format_reward": 1.0}  # by name, as TRL's metrics

    outs = [Completion(prompt_tokens=[1], tokens=[2]) for _ in texts]
    groups, dropped = verdict_groups(0, [0], 4, outs, verdicts)
    assert dropped == 0 and groups[0].rewards == [1.5, 1.0, 0.5, 0.0] and groups[0].correct == [True, True, False, False]
    # validation counts the pass verdict only: the format bonus on the third sample does not count
    assert validation_metrics(task.val, [0], 4, verdicts)["val/pass_rate"] == 0.5


def test_validate_with_task_keeps_the_checkers_verdict_for_the_curve(chat_task):
    """reward.validate_with: task: a pass function a trick fools (here: any number passes) decides
    training, the task's checker decides validation; the rewards stay the functions'."""
    chat_task.reward_functions = load_reward_functions(FUNCTIONS)
    ex = chat_task.val[0]
    texts = [f"\\boxed{{{ex.answer}}}", f"{ex.answer}", "\\boxed{-1}"]
    trained = check_batch(chat_task, texts, [ex] * 3)
    validated = check_batch(chat_task, texts, [ex] * 3, task_verdict=True)
    assert [v.passed for v in trained] == [True, True, False]  # the unboxed answer fools the pass function
    assert [v.passed for v in validated] == [True, False, False]  # the checker wants it boxed
    assert [v.reward for v in validated] == [v.reward for v in trained] == [1.5, 1.0, 0.5]
    assert validation_metrics(chat_task.val, [0], 3, validated)["val/pass_rate"] == pytest.approx(1 / 3)


def test_without_functions_the_task_checker_gives_plus_or_minus_one(chat_task):
    ex = chat_task.val[0]
    verdicts = check_batch(chat_task, [f"\\boxed{{{ex.answer}}}", ex.answer], [ex, ex])
    assert [v.passed for v in verdicts] == [True, False] and all(v.reward is None for v in verdicts)
    groups, _ = verdict_groups(0, [0], 2, [Completion(prompt_tokens=[1], tokens=[2])] * 2, verdicts)
    assert groups[0].rewards == [1.0, -1.0]


def test_several_unmarked_functions_leave_the_verdict_to_the_tasks_checker(chat_task):
    chat_task.reward_functions = load_reward_functions([{**f, "pass": False} if "pass" in f else f for f in FUNCTIONS])
    ex = chat_task.val[0]
    verdicts = check_batch(chat_task, [f"\\boxed{{{ex.answer}}}", f"{ex.answer}"], [ex] * 2)
    assert [v.passed for v in verdicts] == [True, False]  # the checker wants it boxed; correct_number would pass both
    assert [v.reward for v in verdicts] == [1.5, 1.0]


def test_a_pass_function_saying_none_makes_the_sample_not_applicable(tmp_path):
    """TRL's accuracy_reward gives None for a gold solution it cannot parse: the sample is
    neither a pass nor a fail, and validation leaves it out of the pass rate."""
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i), "solution": str(2 * i) if i % 2 else "see the figure"} for i in range(12)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = load_task(TaskConfig(name="jsonl", path=str(path), num_val=4, checker="exact"))
    task.reward_functions = load_reward_functions([{"fn": "trl_rewards:accuracy_reward"}])  # alone, no flag
    parsed = next(ex for ex in task.train + task.val if ex.columns["solution"] != "see the figure")
    unparsed = next(ex for ex in task.train + task.val if ex.columns["solution"] == "see the figure")
    verdicts = check_batch(task, [parsed.answer, "0", unparsed.answer, "1"], [parsed, parsed, unparsed, unparsed])
    assert [v.verdict for v in verdicts] == ["pass", "fail", "not_applicable", "not_applicable"]
    assert [v.reward for v in verdicts] == [1.0, 0.0, 0.0, 0.0]  # it adds nothing to the not-applicable ones
    m = validation_metrics([parsed, unparsed], [0, 1], 2, verdicts)
    assert m["val/pass_rate"] == 0.5 and m["val/prompts"] == 1.0 and m["val/verdict/not_applicable"] == 2.0
    assert m["val/rewards/accuracy_reward/mean"] == 0.5 and m["val/rewards/accuracy_reward/none"] == 2.0


def test_a_bad_function_refuses_the_whole_batch(chat_task):
    chat_task.reward_functions = load_reward_functions([FUNCTIONS[0], {"fn": "trl_rewards:gives_nan", "weight": 1.0}])
    ex = chat_task.val[1]
    with pytest.raises(RewardFunctionError, match=rf"trl_rewards:gives_nan returned nan for example {ex.id} \(completion 1"):
        check_batch(chat_task, ["1", "2", "3"], [ex, ex, ex])


def test_an_answer_format_on_a_code_task_is_one_line():
    from workbench.errors import UserError

    with pytest.raises(UserError, match=r"^task.answer_format does not apply to the code task 'pyexpr'"):
        load_task(TaskConfig(name="pyexpr", difficulty=1, num_train=20, num_val=5, answer_format="boxed"))
