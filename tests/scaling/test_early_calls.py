"""Early decisions scored against full runs, on curves drawn from known laws."""

from __future__ import annotations

import pytest

from tests.helpers.drawn_curves import draw_runs
from workbench.errors import UserError
from workbench.scaling.decide.early_calls import cut, early_calls


@pytest.fixture(scope="module")
def five():
    # five recipes 0.06 apart in A, ranked alike at every budget: every pair is separable
    return {f"r{i}": draw_runs(0.40 + 0.06 * i, 2.0, i) for i in range(5)}


def test_an_easy_study_is_called_right_early_by_both_rankings(five):
    calls = early_calls(five, n_boot=100)
    assert [(c.fraction, c.by) for c in calls] == [(0.25, "forecast"), (0.25, "A then B"), (0.5, "forecast"), (0.5, "A then B")]
    for c in calls[2:]:  # half the compute, past C_mid: the order is in the data
        assert c.separable == 10 and c.share == 1.0 and c.winner == "r4" and c.picked, c.sentence()
    assert "100% of 10 separable pairs ordered correctly; the winner r4 picked" in calls[2].sentence()


def test_a_crossing_the_early_cut_cannot_see_is_scored_as_wrong():
    # fast recipe with a low ceiling against a slow one with a high ceiling: at 25% the fast one leads
    study = {"fast": draw_runs(0.50, 3.0, 1, C_mid=0.05), "slow": draw_runs(0.75, 3.0, 2, C_mid=0.6),
             "mid": draw_runs(0.60, 3.0, 3, C_mid=0.2)}
    calls = early_calls(study, fractions=(0.25,), min_pairs=3, n_boot=100)
    forecast = calls[0]
    assert forecast.winner == "slow" and forecast.separable == 3
    assert forecast.correct < 3 and not forecast.picked and forecast.share is not None and forecast.share < 1.0


def test_too_few_separable_pairs_give_no_percentage_and_bad_input_is_one_line(five):
    few = {k: five[k] for k in ("r0", "r2", "r4")}
    call = early_calls(few, fractions=(0.5,), n_boot=100)[0]
    assert call.share is None and "not measurable at this scale (3 separable pairs" in call.sentence()
    with pytest.raises(UserError, match="at least two recipes"):
        early_calls({"r0": five["r0"]})
    with pytest.raises(UserError, match=r"fractions must lie in \(0, 1\)"):
        early_calls(few, fractions=(1.5,))
    c, s = cut(five["r0"][0], 0.5)
    assert c.max() <= 0.5 and len(c) == len(s) == 1 + 25  # compute 0, then 0.02 .. 0.50


def test_stop_early_is_scored_on_the_full_runs_top_three(five):
    from workbench.scaling.decide.early_calls import stop_early_check

    runs = {n: 3 for n in five}
    safe = stop_early_check(five, {"r0": 3, "r1": 1, "r2": 0}, runs, 0.47)
    assert safe.top == ["r4", "r3", "r2"] and safe.dropped == ["r0"] and safe.cut == ["r1"] and safe.stopped_runs == 4
    assert safe.sentence() == ("stop-early on the same grid saved 47% of its compute, stopping 4 of 15 runs; it dropped 1 of 5 "
                               "recipes (every run stopped): r0; it stopped some runs of r1; "
                               "it stopped no run of the full runs' top 3 (r4, r3, r2)")
    cut = stop_early_check(five, {"r3": 1}, runs, 0.2)
    assert cut.cut_top == ["r3"] and not cut.dropped_top and "it dropped none of the full runs' top 3 (r4, r3, r2), but stopped runs of r3" in cut.sentence()
    bad = stop_early_check(five, {"r3": 3}, runs, 0.2)
    assert bad.dropped_top == ["r3"] and "it DROPPED r3, in the full runs' top 3" in bad.sentence()
    with pytest.raises(UserError, match="does not hold: nope"):
        stop_early_check(five, {"nope": 1}, runs, 0.1)
