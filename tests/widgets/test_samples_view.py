"""The dashboard's Samples tab and health banner on a real samples folder (Parquet written by
workbench.runs.samples' SampleWriter, tests/helpers/samples_folder.py): the filters, the group
view, two evaluations side by side, the curve's evaluation selector and the banner's button,
first as the pure functions' typed values, then through the widget itself (no browser)."""

from __future__ import annotations

import pytest

from tests.helpers.samples_folder import COLLAPSE, LAST, LONG, write_samples_run
from workbench.errors import UserError
from workbench.runs.health import HealthFlag
from workbench.runs.view import RunView
from workbench.widgets.dashboard import Dashboard
from workbench.widgets.samples_data import (
    SampleFrame, SampleQuery, eval_points, filter_samples, group_at, groups, groups_matching, health_flags,
    nearest_step, side_by_side, val_steps,
)  # fmt: skip
from workbench.widgets.samples_view import fold


@pytest.fixture
def run(tmp_path):
    return write_samples_run(tmp_path / "run")


@pytest.fixture
def frame(run):
    return SampleFrame.read(RunView.open(run))


def test_filters_select_by_step_range_verdict_kind_domain_and_text(frame):
    df = frame.df
    assert len(df) == 14 * 8 + 8 * 8  # 14 train steps of 2x4, 8 evaluations of 4x2
    failed = filter_samples(df, SampleQuery(steps=(20, 30), passed=False))
    # train steps 20, 25, 30: group 1's three failures each; evaluations 20, 30: prompts 2 and 3 fail, twice each
    assert len(failed) == 3 * 3 + 2 * 4 and not failed["passed"].any()
    assert failed["step"].between(20, 30).all() and failed["step"].is_monotonic_decreasing  # newest first
    val_count = filter_samples(df, SampleQuery(kind="val", domain="count"))
    assert set(val_count["prompt_id"]) == {1, 3} and (val_count["kind"] == "val").all()
    hits = filter_samples(df, SampleQuery(text="KEEP COUNTING"))  # case-insensitive, in the completion
    assert len(hits) == 14 and (hits["completion"] == LONG).all()
    assert filter_samples(df, SampleQuery(steps=(1, 4))).empty


def test_a_group_shows_every_completion_with_its_rewards_and_advantages(frame):
    g = group_at(frame.df, 40, "train", 1)
    assert g.prompt_id == 81 and len(g.completions) == 4 and g.n_passed == 1
    assert [c.reward for c in g.completions] == [1.0, -1.0, -1.0, -1.0]
    assert [c.advantage for c in g.completions] == [1.5, -0.5, -0.5, -0.5]  # the trainer's, as written
    assert all(c.trained for c in g.completions) and [c.loss_weight for c in g.completions] == [0.25] * 4
    easy = group_at(frame.df, 40, "train", 0)  # all passed: zero variance, left out by the trainer
    assert [(c.trained, c.advantage, c.loss_weight) for c in easy.completions] == [(False, None, None)] * 4
    assert g.completions[0].rewards == {"format": 0.5} and g.completions[3].truncated
    assert g.completions[0].version == 39 and g.completions[0].staleness == 1  # trained_version 40 - sampled by 39
    val = group_at(frame.df, 40, "val", 2)
    assert all(c.advantage is None and c.trained is None for c in val.completions)  # validation: never trained on
    with pytest.raises(UserError, match="no train group 5 kept at step 40"):
        group_at(frame.df, 40, "train", 5)


def test_a_filter_picks_groups_and_the_group_view_keeps_them_whole(frame):
    failed = filter_samples(frame.df, SampleQuery(steps=(40, 40), passed=False, kind="train"))
    assert [len(g.completions) for g in groups(failed)] == [3]  # the matches only
    whole = groups_matching(frame.df, failed)
    assert [(g.step, g.kind, g.group, len(g.completions), g.n_passed) for g in whole] == [(40, "train", 1, 4, 1)]
    assert whole[0].label.endswith("· 1/4 passed")  # the header counts the whole group, not the 0/3 matched


def test_two_evaluations_side_by_side_biggest_change_first(frame, tmp_path):
    s = side_by_side(frame.df, 0, frame.df, LAST)
    assert (s.label_a, s.label_b, s.gained, s.lost) == ("step 0", "step 70", 3, 0)
    assert [p.prompt_id for p in s.pairs] == [1, 2, 3, 0] and [p.change for p in s.pairs] == [2, 2, 2, 0]
    assert [p.prompt_id for p in side_by_side(frame.df, 0, frame.df, LAST, only={0, 3}).pairs] == [3, 0]
    p1 = s.pairs[0]
    assert [c.text for c in p1.a] == ["wrong 1"] * 2 and [c.text for c in p1.b] == ["2"] * 2
    # two runs: the other run's evaluation at step 0 beside this one's at 70
    other = SampleFrame.read(RunView.open(write_samples_run(tmp_path / "other"))).df
    two = side_by_side(other, 0, frame.df, 70, label_a="other @ 0", label_b="run @ 70")
    assert two.label_a == "other @ 0" and two.gained == 3
    with pytest.raises(UserError, match="no validation samples kept at step 5; evaluations kept: 0, 10, 20"):
        side_by_side(frame.df, 5, frame.df, 70)


def test_eval_points_are_the_curves_with_whether_their_samples_were_kept(run):
    view = RunView.open(run)
    df = SampleFrame.read(view).df
    points = eval_points(view, df)
    assert [p.step for p in points] == list(range(0, LAST + 1, 10)) == val_steps(df)
    assert all(p.has_samples for p in points) and points[-1].pass_rate == pytest.approx(view.curve["val_pass_rate"].iloc[-1])
    for f in (run / "samples").glob("val-000010*"):
        f.unlink()
    assert [p.has_samples for p in eval_points(view, SampleFrame.read(view).df)][:3] == [True, False, True]
    assert "(no samples kept)" in eval_points(view, SampleFrame.read(view).df)[1].label
    assert nearest_step([0, 20, 30], 10) == 0 and nearest_step([0, 20, 30], 26) == 30 and nearest_step([], 3) is None


def test_health_flags_from_the_summary_else_from_the_rows(run):
    view = RunView.open(run)
    flags = health_flags(view)
    assert [(f.rule, f.step, f.metric) for f in flags] == [("entropy", COLLAPSE, "train/entropy")]
    assert "entropy fell" in flags[0].message
    view.summary = {"status": "running"}  # a live run: no summary yet, the same rules over the rows so far
    assert health_flags(view) == flags
    view.summary = {"status": "finished", "health": []}  # the engine's record wins
    assert health_flags(view) == []


def test_fold_keeps_short_texts_and_folds_long_ones_whole_behind_a_click_with_the_end_shown():
    assert "<details" not in fold("short <b>") and "short &lt;b&gt;" in fold("short <b>")
    long = fold(LONG)  # 31 lines: 4 shown, 25 behind the click, the last 2 (the answer) shown
    assert long.startswith("<details class='wb-fold'>") and "25 more lines" in long
    assert long.index("step 3: keep") < long.index("</summary>") < long.index("step 4: keep") < long.index("</details>")
    assert long.index("</details>") < long.index("step 29: keep") < long.index("ANSWER 41")  # the end stays in sight
    assert fold("x" * 300).count("x") == 300 and "<details" not in fold("x" * 300)  # 5 lines of 60


def test_the_terminal_and_the_dashboard_fold_by_one_rule():
    from workbench.commands.samples import folded
    from workbench.widgets.samples_data import fold_text

    f = fold_text(LONG, width=80, keep=6)
    assert (len(f.head), len(f.hidden), len(f.tail)) == (4, 25, 2) and f.tail[-1] == "ANSWER 41"
    assert fold_text("a\nb", width=80, keep=6).hidden == [] and fold_text("a\nb", width=80, keep=None).head == ["a", "b"]
    out = folded(LONG, 6)
    assert "[... 25 more lines; --full shows them ...]" in out and out.rstrip().endswith("ANSWER 41")


def test_the_dashboard_banner_opens_the_samples_at_the_flags_step_and_the_tab_drives_all_views(run):
    d = Dashboard(RunView.open(run))
    assert d.error is None and d._banner.layout.display == "flex"
    banner = d._banner._text.value
    assert "entropy</b> from step 40" in banner and "<code>train/entropy</code>" in banner and "entropy fell 94%" in banner
    assert d._tabs.selected_index == 0
    d._banner._buttons.children[0].click()
    tab = d.samples
    assert d._tabs.selected_index == 1 and tab.steps.value == (40, 40)
    assert tab.out.value.count("class='wb-sample'") == 16  # step 40: 2 train groups of 4, 4 validation prompts x 2
    tab.verdict.value = "failed"
    assert tab.out.value.count("data-passed='false'") == 3 + 2 and "data-passed='true'" not in tab.out.value
    tab.mode.value = "Group view"
    assert tab.group.value == (40, "train", 1) and tab.out.value.count("class='wb-completion'") == 4
    assert "adv +1.50 · weight 0.25" in tab.out.value and "adv -0.50" in tab.out.value and "1/4 passed" in tab.out.value
    tab.verdict.value = "passed"  # the all-pass group: shown as not trained
    tab.group.value = (40, "train", 0)
    assert tab.out.value.count("data-trained='false'") == 4 and "adv " not in tab.out.value
    tab.verdict.value = "failed"
    tab.mode.value = "Side by side"
    assert (tab.eval_a.value, tab.eval_b.value) == (0, 70) and tab.out.value.count("class='wb-pair'") == 4
    tab.domain.value = "count"  # the domain and text filters pick the prompts compared
    assert tab.out.value.count("class='wb-pair'") == 2 and "prompt 2 ·" not in tab.out.value
    tab.domain.value = "all"
    # the curve's evaluation selector: an evaluation's validation samples
    d._tabs.selected_index = 0
    d._evals.value = 20
    d._evals_open.click()
    assert d._tabs.selected_index == 1 and tab.steps.value == (20, 20) and tab.kind.value == "val"
    assert tab.mode.value == "Table" and tab.out.value.count("data-step='20'") == 4  # failed only (the filter stays): prompts 2, 3


def test_a_healthy_run_without_samples_shows_no_banner_and_says_none_were_kept(run_folder):
    d = Dashboard(RunView.open(run_folder(5)))
    assert d._banner.layout.display == "none" and d._banner.flags == []
    assert "kept no samples" in d.samples.out.value
    d.open_samples(10)
    assert d.error is None and d._tabs.selected_index == 1 and tab_note(d) == ""


def tab_note(d: Dashboard) -> str:
    return d.samples.note


def test_a_step_written_while_the_dashboard_is_open_appears_at_the_next_refresh(run):
    from tests.helpers.samples_folder import train_records
    from workbench.config import SamplesConfig
    from workbench.runs.samples import SampleWriter

    d = Dashboard(RunView.open(run))
    tab = d.samples
    assert tab.steps.value == (0, LAST)
    SampleWriter(run, SamplesConfig()).write(LAST + 5, "train", train_records(LAST + 5), trained_version=LAST + 5)
    d.refresh()
    assert tab.steps.max == LAST + 5 and tab.steps.value == (0, LAST + 5)  # the whole range stays the whole range
    tab.steps.value = (10, 20)
    SampleWriter(run, SamplesConfig()).write(LAST + 10, "train", train_records(LAST + 10), trained_version=LAST + 10)
    d.refresh()
    assert tab.steps.value == (10, 20) and tab.steps.max == LAST + 10  # a narrowed range is kept
    assert "data-step='80'" not in tab.out.value
