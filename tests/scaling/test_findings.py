"""The leave-one-out findings table on curves drawn from known laws: each verdict follows the truth."""

from __future__ import annotations

import pytest

from tests.helpers.drawn_curves import draw_runs
from workbench.errors import UserError
from workbench.scaling.decide.findings import PAPER_CLAIMS, findings


@pytest.fixture(scope="module")
def table():
    study = {
        "scalerl": draw_runs(0.60, 2.0, 0, C_mid=0.25, points=40, noise=0.008),
        "scalerl-loo-loss-dapo": draw_runs(0.50, 2.0, 1, C_mid=0.25, points=40, noise=0.008),   # A lower: the paper's direction
        "scalerl-loo-no-fp32": draw_runs(0.68, 2.0, 2, C_mid=0.25, points=40, noise=0.008),     # A higher: against it
        "scalerl-loo-agg-token": draw_runs(0.60, 1.0, 3, C_mid=0.25, points=40, noise=0.008),   # same A, slower: the paper's direction
        "scalerl-loo-norm-none": draw_runs(0.60, 2.0, 4, C_mid=0.25, points=40, noise=0.008),   # no difference at all
    }
    return findings(study, left_out={"scalerl-loo-length-penalty": "forced interruption cannot act on the builtin tokenizer"}, n_boot=200)


def test_each_verdict_follows_the_law_the_curves_were_drawn_from(table):
    got = {r.recipe: r.verdict for r in table.rows}
    assert got == {"scalerl-loo-loss-dapo": "agrees", "scalerl-loo-no-fp32": "disagrees", "scalerl-loo-agg-token": "agrees",
                   "scalerl-loo-norm-none": "not separable at this scale", "scalerl-loo-length-penalty": "left out"}


def test_the_deltas_hold_the_truth_and_the_table_names_the_paper(table):
    rows = {r.recipe: r for r in table.rows}
    dapo = rows["scalerl-loo-loss-dapo"]
    assert -0.12 < dapo.dA < -0.08 and dapo.dA_ci[1] < -0.05 and dapo.runs == 3
    assert rows["scalerl-loo-agg-token"].dB < -0.5
    text = str(table)
    assert "CISPO B 2.01 vs DAPO 1.77" in text and "left out: forced interruption cannot act" in text
    assert text.count("\n| ") == 1 + 5  # the header, then one row per choice


def test_every_loo_preset_has_the_papers_claim_and_a_missing_baseline_is_one_line():
    from importlib.resources import files

    presets = {p.name.removesuffix(".yaml") for p in files("workbench.rl.recipes").iterdir() if p.name.startswith("scalerl-loo-")}
    assert presets | {"scalerl-sync"} == set(PAPER_CLAIMS)
    with pytest.raises(UserError, match="the baseline 'scalerl' is not in the study"):
        findings({"x": draw_runs(0.6, 2.0, 0, C_mid=0.25, points=40, noise=0.008)})


def test_the_reason_tells_margin_from_noise(table):
    rows = {r.recipe: r for r in table.rows}
    assert "beyond the +-0.02 margin and the noise" in rows["scalerl-loo-loss-dapo"].why
    assert rows["scalerl-loo-norm-none"].why.endswith("within the +-0.02 margin; dB +0.03 within the noise")
