"""reasoning-gym's datasets as tasks: any registered name loads, train and validation never overlap,
the dataset's own scorer decides (graded, passed at 1.0), bad names and configs are one line, and a
scorer that would run the model's text as code is refused when the task loads."""

from __future__ import annotations

import pytest

from workbench.config import TaskConfig, run_config_from_dict
from workbench.errors import UserError
from workbench.tasks.base import check_batch, load_task
from workbench.tasks.chat import chat_prompt

pytest.importorskip("reasoning_gym")


def _task(dataset: str, config: dict | None = None, **kw):
    return load_task(TaskConfig(name="reasoning_gym", dataset=dataset, config=config, num_train=kw.pop("num_train", 60),
                                num_val=kw.pop("num_val", 20), seed=kw.pop("seed", 0), **kw))  # fmt: skip


@pytest.mark.parametrize(("dataset", "config"), [("leg_counting", {"min_animals": 2, "max_animals": 3}),
                                                 ("chain_sum", {"min_terms": 2, "max_terms": 3})])  # fmt: skip
def test_a_dataset_is_a_task_scored_by_its_own_scorer(dataset, config):
    task = _task(dataset, config)
    assert task.checker_name == f"reasoning_gym:{dataset}" and task.answer_format == "answer_tag"
    assert {e.prompt for e in task.train}.isdisjoint(e.prompt for e in task.val)
    assert len({e.id for e in task.train + task.val}) == 80
    ex = task.val[0]
    assert ex.prompt.endswith("<answer> </answer> tags.") and ex.columns["question"] in ex.prompt
    right, wrong, bare = f"I count... <answer>{ex.answer}</answer>", "<answer>999999</answer>", ex.answer
    verdicts = check_batch(task, [right, wrong, bare], [ex, ex, ex])
    assert [v.verdict for v in verdicts] == ["pass", "fail", "fail"]  # no tag, no answer: reasoning-gym's extract_answer
    assert task.checker.score(right, ex) == 1.0 and task.checker.score(wrong, ex) < 1.0


def test_train_and_validation_come_from_different_seeds_and_repeat_with_the_seed():
    a, b, c = _task("leg_counting", seed=1), _task("leg_counting", seed=1), _task("leg_counting", seed=2)
    assert [e.prompt for e in a.val] == [e.prompt for e in b.val]
    assert [e.prompt for e in a.train] != [e.prompt for e in c.train]
    assert [e.prompt for e in a.train[:20]] != [e.prompt for e in a.val]


def test_another_answer_format_reads_the_answer_where_that_format_says():
    task = _task("chain_sum", {"min_terms": 2, "max_terms": 2}, answer_format="last_number")
    ex = task.val[0]
    assert ex.prompt.endswith("End your reply with the answer as a number.")
    assert [v.passed for v in check_batch(task, [f"so it is {ex.answer}", "no idea"], [ex, ex])] == [True, False]


def test_the_chat_template_and_system_prompt_apply_as_for_other_tasks():
    task = _task("leg_counting", chat_template=True, system_prompt="You count legs.")
    messages = chat_prompt(task, task.val[0])
    assert messages[0] == {"role": "system", "content": "You count legs."}
    assert messages[-1]["role"] == "user" and messages[-1]["content"] == task.val[0].prompt


def test_an_unknown_dataset_is_one_line_naming_the_close_ones():
    with pytest.raises(UserError, match=r"unknown reasoning-gym dataset 'leg_count' \(did you mean leg_counting"):
        _task("leg_count")
    with pytest.raises(UserError, match=r"task.config for reasoning_gym dataset 'leg_counting': TypeError: .*'no_such'"):
        _task("leg_counting", {"no_such": 1})
    # accepted by the dataset's own check, failing only as rows are drawn: still one line, not a traceback
    with pytest.raises(UserError, match=r"dataset 'simple_equations': ValueError: The number of weights"):
        _task("simple_equations", {"operators": ["+", "-"]})


def test_a_scorer_that_evaluates_the_answer_as_code_is_refused_at_load():
    # countdown's scorer runs sympy.parse_expr (eval) on the answer: model text as code, in our process
    with pytest.raises(UserError, match=r"'countdown': its scorer evaluates the answer as code"):
        _task("countdown", {})


def test_the_config_takes_a_mapping_for_reasoning_gym_and_a_name_for_hf():
    cfg = run_config_from_dict({"task": {"name": "reasoning_gym", "dataset": "leg_counting", "config": {"max_animals": 4}}})
    assert cfg.task.config == {"max_animals": 4}
    assert run_config_from_dict({"task": {"name": "hf", "path": "x", "config": "main"}}).task.config == "main"


def test_a_small_question_space_still_gets_its_validation_questions_from_fresh_draws():
    # reasoning-gym seeds row i with seed + i: redraws one seed apart repeated all but one row each, so
    # this space of ~5,000 sums (most mass on 1-digit terms) found only 34 new questions of 64
    config = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}
    task = _task("chain_sum", config, num_train=4000, num_val=64)
    assert len(task.val) == 64 and {e.prompt for e in task.train}.isdisjoint(e.prompt for e in task.val)
    with pytest.raises(UserError, match="only .* validation questions differ"):  # a space that is truly too small
        _task("chain_sum", {**config, "max_digits": 1}, num_train=4000, num_val=64)
