"""Input validation and CSV loading (workbench/scaling/data.py)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import UserError
from workbench.scaling.data import Curve, as_curve, check_curve

from .synthetic import QWEN_TRAIN, QWEN_VAL, curve_path

GOOD_C = [0.0, 1.0, 2.0, 3.0, 4.0]
GOOD_S = [0.1, 0.2, 0.3, 0.35, 0.4]


@pytest.mark.parametrize(
    "compute, score, fragment",
    [
        ([0, 1, float("nan"), 3], [0.1, 0.2, 0.3, 0.4], "NaN/inf"),
        ([0, 1, 2, 3], [0.1, float("inf"), 0.3, 0.4], "NaN/inf"),
        ([0, 2, 1, 3], [0.1, 0.2, 0.3, 0.4], "sorted"),
        ([0, 1, 1, 3], [0.1, 0.2, 0.3, 0.4], "duplicate compute"),
        ([-1, 1, 2, 3], [0.1, 0.2, 0.3, 0.4], "compute must be >= 0"),
        ([0, 1, 2, 3], [0.1, 1.2, 0.3, 0.4], "in [0, 1]"),
        ([0, 1, 2, 3], [0.1, -0.2, 0.3, 0.4], "in [0, 1]"),
        ([0, 1, 2, 3], [0.3, 0.3, 0.3, 0.3], "constant"),
        ([0, 1, 2], [0.1, 0.2, 0.3, 0.4], "has 3 values but score has 4"),
        ([1.0], [0.5], "at least 2 points"),
        ([[0, 1], [2, 3]], [[0.1, 0.2], [0.3, 0.4]], "1-D"),
        (["a", "b"], [0.1, 0.2], "must be numbers"),
    ],
)
def test_bad_input_is_a_user_error_naming_the_problem(compute, score, fragment):
    with pytest.raises(UserError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        check_curve(compute, score)


def test_user_error_is_a_value_error():
    with pytest.raises(ValueError):
        check_curve([0, 1], [0.5, 0.5])


def test_good_curve_becomes_float_arrays():
    c, s = check_curve(GOOD_C, GOOD_S)
    assert c.dtype == float and s.dtype == float and len(c) == 5


def test_csv_guesses_the_usual_columns():
    cv = Curve.from_csv(curve_path(QWEN_VAL))
    assert (cv.x_label, cv.y_label) == ("gpu_hours_est", "val_pass_rate")
    assert len(cv) == 44 and cv.compute[0] == 0.0 and 0 < cv.score.max() < 1
    cv = Curve.from_csv(curve_path(QWEN_TRAIN))
    assert cv.y_label == "train_reward_mean"


def test_csv_named_columns(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("steps,flops,acc\n0,0,0.1\n1,1e18,0.2\n2,2e18,0.3\n")
    cv = Curve.from_csv(p, x="flops", y="acc")
    assert cv.compute[-1] == 2e18 and cv.score.tolist() == [0.1, 0.2, 0.3]


def test_csv_unknown_column_lists_the_columns(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("step,gpu_hours,score\n0,0,0.1\n1,1,0.2\n")
    with pytest.raises(UserError, match=r"unknown column 'nope'.*columns: step, gpu_hours, score"):
        Curve.from_csv(p, y="nope")


def test_csv_cannot_guess(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("a,b,c\n0,0,0.1\n1,1,0.2\n")
    with pytest.raises(UserError, match="pass --x"):
        Curve.from_csv(p)


def test_csv_two_bare_columns(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("t,v\n0,0.1\n1,0.2\n")
    assert Curve.from_csv(p).score.tolist() == [0.1, 0.2]


def test_csv_non_number_names_line_and_column(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("gpu_hours,score\n0,0.1\n1,oops\n")
    with pytest.raises(UserError, match=r"c.csv:3: column 'score' is not a number: 'oops'"):
        Curve.from_csv(p)


def test_csv_missing_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        Curve.from_csv(tmp_path / "none.csv")


def test_csv_nan_cell_is_caught_by_validation(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("gpu_hours,score\n0,0.1\n1,nan\n2,0.3\n")
    with pytest.raises(UserError, match="NaN"):
        Curve.from_csv(p)


def test_until_prefix_and_as_curve():
    cv = Curve(GOOD_C, GOOD_S)
    assert cv.until(2.0).compute.tolist() == [0.0, 1.0, 2.0]
    assert as_curve((GOOD_C, GOOD_S)).score.tolist() == GOOD_S
    assert as_curve({"gpu_hours": np.array(GOOD_C), "score": np.array(GOOD_S)}).x_label == "gpu_hours"
    with pytest.raises(UserError):
        as_curve(42)
