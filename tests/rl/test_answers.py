"""Answer formats (task.answer_format): where the answer sits in a completion."""

from __future__ import annotations

import pytest

from workbench.config import TaskConfig
from workbench.rl.answers import ANSWER_FORMATS, find_answer, follows_format, written_answer


@pytest.mark.parametrize(
    "fmt, text, answer",
    [
        ("last_number", "3 apples and 4 more make 7.", "7"),
        ("last_number", "It costs 1,250 dollars", "1250"),
        ("last_number", "about -2.50 now", "-2.5"),
        ("last_number", "12.0", "12"),
        ("boxed", "first \\boxed{1} then \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
        ("boxed", "so \\boxed{ 42 }", "42"),
        ("hash", "3 + 4 = 7\n#### 7\nthanks", "7"),
        ("hash", "#### 1,000", "1000"),
        ("answer_tag", "<think>2*3</think> <answer> (1 + 2) * 3 </answer>", "(1 + 2) * 3"),
        ("answer_tag", "<answer>1</answer> no, <answer>2</answer>", "2"),
    ],
)
def test_each_format_finds_the_last_answer(fmt, text, answer):
    assert find_answer(text, fmt) == answer
    assert follows_format(text, fmt)


@pytest.mark.parametrize(
    "fmt, text",
    [
        ("last_number", "no digits here"),
        ("boxed", "\\boxed{unclosed"),
        ("boxed", "the answer is 7"),
        ("hash", "the answer is 7"),
        ("hash", "#### "),
        ("answer_tag", "<answer>7"),
        ("answer_tag", "<answer>  </answer>"),
    ],
)
def test_no_answer_in_the_format_is_none(fmt, text):
    assert find_answer(text, fmt) is None
    assert not follows_format(text, fmt)


def test_the_config_offers_exactly_these_formats_and_a_written_answer_reads_back():
    import typing

    hint = typing.get_type_hints(TaskConfig)["answer_format"]
    (literal,) = [a for a in typing.get_args(hint) if a is not type(None)]
    assert typing.get_args(literal) == ANSWER_FORMATS
    for fmt in ANSWER_FORMATS:
        assert find_answer("work... " + written_answer("36", fmt), fmt) == "36"


@pytest.mark.parametrize("fmt", ANSWER_FORMATS)
def test_a_degenerate_run_of_thousands_of_digits_is_read_not_raised(fmt):
    # a policy collapsing into "1111..." writes numbers past Python's 4300-digit int-to-str limit;
    # reading its answer must not raise (a raising checker stops the run)
    digits = "1" * 5000
    text = "so " + written_answer(digits, fmt)
    assert find_answer(text, fmt) == digits
    assert find_answer(f"so {digits}.50", "last_number") == digits + ".5"  # exact: no rounding to 28 digits


@pytest.mark.parametrize("text, answer", [("-0.0", "0"), ("it is .5", "0.5"), ("it is -.50", "-0.5"), ("007", "7")])
def test_plain_numbers_read_canonically(text, answer):
    assert find_answer(text, "last_number") == answer
