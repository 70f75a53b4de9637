"""Verdicts into training groups and validation metrics: names, definitions, sandbox errors."""

from __future__ import annotations

import math

import pytest

from workbench.engine.model.sampling import Completion
from workbench.engine.rollout.scoring import chunk_verdict_metrics, validation_metrics, verdict_groups
from workbench.errors import UserError
from workbench.tasks.types import Example, Verdict

P, F, E, S = Verdict("pass"), Verdict("fail"), Verdict("error"), Verdict("sandbox_error", 0.0, "worker died")


def comp() -> Completion:
    return Completion(prompt_tokens=[1], tokens=[2], logprobs=[-0.1], versions=[0], sampled=[True], finished=True, interrupted=False)


def test_single_task_validation_keeps_todays_names():
    val = [Example(i, f"p{i}", "a") for i in range(3)]
    m = validation_metrics(val, [0, 1, 2], 2, [P, P, P, F, F, F])
    assert m["val/pass_rate"] == pytest.approx(0.5)
    assert m["val/pass_at_k"] == pytest.approx(2 / 3) and m["val/prompts"] == 3.0
    assert m["val/pass_rate_se"] == pytest.approx(0.5 / math.sqrt(3))
    assert not any(k.startswith("val/pass_rate/") for k in m)
    assert m["val/verdict/pass"] == 3.0 and m["val/verdict/fail"] == 3.0 and m["val/verdict/sandbox_error"] == 0.0


def test_mixed_validation_is_per_domain_and_overall_is_the_mean_over_domains():
    val = [Example(0, "a", "", "math"), Example(1, "b", "", "math"), Example(2, "c", "", "math"), Example(3, "d", "", "code")]
    m = validation_metrics(val, [0, 1, 2, 3], 2, [P, P, P, P, F, F, F, F])
    assert m["val/pass_rate/math"] == pytest.approx(2 / 3) and m["val/pass_rate/code"] == 0.0
    assert m["val/prompts/math"] == 3.0 and m["val/prompts/code"] == 1.0
    assert m["val/pass_rate"] == pytest.approx(1 / 3)  # (2/3 + 0) / 2, not 4/8 over samples
    se_math = m["val/pass_rate_se/math"]
    assert m["val/pass_rate_se"] == pytest.approx(math.sqrt(se_math**2 + 0.0) / 2)


def test_a_sandbox_error_is_never_a_wrong_answer():
    val = [Example(0, "a", "", "code"), Example(1, "b", "", "code")]
    m = validation_metrics(val, [0, 1], 4, [P, S, P, P, F, F, F, P])
    assert m["val/pass_rate/code"] == pytest.approx((1.0 + 0.25) / 2)  # the errored sample is left out
    assert m["val/verdict/sandbox_error"] == 1.0
    groups, dropped = verdict_groups(7, [0, 1], 2, [comp() for _ in range(4)], [P, S, F, P])
    assert dropped == 1 and [g.prompt_id for g in groups] == [1] and groups[0].rewards == [-1.0, 1.0]
    assert chunk_verdict_metrics([P, S, F, P, E]) == {
        "reward/verdict/pass": 2.0, "reward/verdict/fail": 1.0, "reward/verdict/timeout": 0.0,
        "reward/verdict/error": 1.0, "reward/verdict/sandbox_error": 1.0, "reward/verdict/not_applicable": 0.0,
        "reward/verdict/env_error": 0.0,
    }  # fmt: skip


def test_a_sample_the_pass_function_does_not_apply_to_is_left_out_of_the_pass_rate_and_counted():
    """TRL's None from the pass function (e.g. a gold answer it cannot parse): in validation the
    sample is left out of its prompt's mean, a prompt with none applicable out of val/pass_rate and
    val/prompts; in training it keeps the reward the other functions gave it (here 0.5)."""
    nan = float("nan")
    a = lambda ok, fmt: Verdict("pass" if ok else "fail", reward=float(ok) + 0.5 * fmt, values={"acc": float(ok), "fmt": fmt})  # noqa: E731
    na = Verdict("not_applicable", reward=0.5, values={"acc": nan, "fmt": 1.0})
    val = [Example(i, f"p{i}", "a") for i in range(3)]
    m = validation_metrics(val, [0, 1, 2], 2, [a(1, 1.0), na, na, na, a(0, 0.0), a(1, 0.0)])
    assert m["val/pass_rate"] == pytest.approx((1.0 + 0.5) / 2) and m["val/prompts"] == 2.0  # prompt 1: not applicable
    assert m["val/verdict/not_applicable"] == 3.0 and m["val/verdict/pass"] == 2.0
    # each function's mean over the samples it gave a value (TRL's nanmean), its std Bessel-corrected (TRL's nanstd)
    assert m["val/rewards/acc/mean"] == pytest.approx(2 / 3) and m["val/rewards/acc/none"] == 3.0
    assert m["val/rewards/acc/std"] == pytest.approx(math.sqrt(1 / 3))
    assert m["val/rewards/fmt/mean"] == pytest.approx(4 / 6) and m["val/rewards/fmt/none"] == 0.0
    groups, _ = verdict_groups(0, [0], 2, [comp(), comp()], [a(1, 0.0), na])
    assert groups[0].rewards == [1.0, 0.5] and groups[0].correct == [True, False]
    assert not any(k.startswith("val/rewards/") for k in validation_metrics(val, [0], 2, [P, F]))  # no functions, no rows


def test_a_broken_sandbox_stops_the_run_in_one_line():
    with pytest.raises(UserError, match="the sandbox failed on 3 of 4 code checks of chunk 2") as e:
        verdict_groups(2, [0, 1], 2, [comp() for _ in range(4)], [S, S, S, P])
    assert "worker died" in str(e.value) and "\n" not in str(e.value)
