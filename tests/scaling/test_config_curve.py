"""predict_config: a configuration's curve from runs that differ in one setting, on synthetic
ladders whose parameters move by known laws (so the truth at the unseen value is known)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.scaling.synthetic import synth
from workbench.errors import UserError
from workbench.scaling import fit_sigmoid, predict_config

WIDTHS = [32, 64, 128, 256, 512]


def law(w: float, *, flat: bool = False) -> dict[str, float]:
    """The generating law: A linear in ln w, C_mid a power law, B and R0 constant (flat: nothing moves)."""
    if flat:
        return {"R0": 0.1, "A": 0.45, "C_mid": 400.0, "B": 1.5}
    return {"R0": 0.1, "A": 0.3 + 0.06 * np.log(w / 32), "C_mid": 200.0 * (w / 32) ** 0.7, "B": 1.5}


def curve(w: float, seed: int, flat: bool = False, noise: float = 0.015):
    p = law(w, flat=flat)
    return synth(n=30, lo=p["C_mid"] / 10, hi=p["C_mid"] * 20, noise=noise, seed=seed, params=p)


@pytest.fixture(scope="module")
def ladder():
    """Fits of the four smaller widths, and the largest width's measured curve (never seen by the fit)."""
    fits = {w: fit_sigmoid(*curve(w, seed=i)) for i, w in enumerate(WIDTHS[:-1])}
    return fits, curve(WIDTHS[-1], seed=99)


@pytest.fixture(scope="module")
def prediction(ladder):
    return predict_config(ladder[0], at=WIDTHS[-1], key="model.n_embd")


def test_the_prediction_recovers_the_generating_law_within_its_band(ladder, prediction):
    truth = law(WIDTHS[-1])
    for p in ("A", "B", "C_mid", "R0"):
        lo, hi = getattr(prediction, f"{p}_ci")
        assert lo <= truth[p] <= hi, (p, truth[p], lo, hi)
    # the unseen run's measured points: inside the prediction band, and closer than the naive answer
    c, y = ladder[1]
    c, y = c[1:], y[1:]
    lo, hi = prediction.band(c, kind="prediction")
    assert np.mean((y >= lo) & (y <= hi)) >= 0.8
    rmse = np.sqrt(np.mean((prediction.predict(c) - y) ** 2))
    largest = ladder[0][WIDTHS[-2]]
    naive = np.sqrt(np.mean((largest.predict(c) - y) ** 2))  # "the same curve as the largest run seen"
    assert rmse < naive / 2 and rmse < 0.03


def test_the_forms_are_chosen_by_backtest_and_the_rejected_ones_are_listed(prediction):
    # C_mid moves as a power law and B not at all: the backtest keeps those, the table holds all 36 combinations
    assert prediction.forms["C_mid"] == "power law" and prediction.forms["B"] == "constant"
    assert prediction.forms["A"] != "constant" and prediction.forms["R0"] == "constant"
    assert len(prediction.backtest) == 36 + 1 and sum(r["chosen"] for r in prediction.backtest) == 1  # + "carried over"
    rejected = [r for r in prediction.backtest if r["C_mid"] == "constant"]
    assert min(r["loo_rmse"] for r in rejected) > 2 * prediction.chosen["loo_rmse"]


def test_compute_to_reach_and_worth_it(ladder, prediction):
    truth = law(WIDTHS[-1])
    target = 0.4  # the true law reaches it at C_mid * (f / (1 - f))^(1/B), f = (target - R0) / (A - R0)
    f = (target - truth["R0"]) / (truth["A"] - truth["R0"])
    true_c = truth["C_mid"] * (f / (1 - f)) ** (1 / truth["B"])
    r = prediction.compute_to_reach(target)
    assert r.reachable and r.lo <= true_c <= r.hi
    assert not prediction.compute_to_reach(0.99).reachable  # above every draw's A
    w = prediction.worth_it()
    assert w.worth is True and w.gain_lo > 0.01 and "worth it" in w.verdict
    assert w.budget == pytest.approx(ladder[0][WIDTHS[-2]].compute.max())


def test_a_setting_that_moves_nothing_is_not_worth_it():
    fits = {w: fit_sigmoid(*curve(w, seed=10 + i, flat=True)) for i, w in enumerate(WIDTHS[:-1])}
    p = predict_config(fits, at=WIDTHS[-1], key="train.prompts_per_step")
    assert p.A_ci[0] <= 0.45 <= p.A_ci[1]
    w = p.worth_it(min_gain=0.05)
    assert w.worth is False and w.verdict.startswith("not worth it")


@pytest.mark.slow  # the chart imports Altair (seconds)
def test_curves_are_fitted_and_the_json_carries_the_parameters_with_intervals():
    runs = {w: curve(w, seed=20 + i) for i, w in enumerate(WIDTHS[:3])}
    p = predict_config(runs, at=256, key="model.n_embd", n_draws=100)
    d = json.loads(json.dumps(p.to_dict()))
    for k in ("A", "B", "C_mid", "R0"):
        assert d[f"{k}_ci"][0] <= d[k] <= d[f"{k}_ci"][1]
    assert [r["value"] for r in d["runs"]] == [32, 64, 128] and d["forms"] == p.forms
    lo, hi = p.band([1e2, 1e3, 1e4])
    assert np.all(lo <= p.predict([1e2, 1e3, 1e4]) + 1e-9) and np.all(hi >= lo)
    chart = p.chart().to_dict()  # the smaller runs' points and fits with the predicted band
    assert len(chart["layer"]) >= 3


def test_bad_input_is_one_line(ladder):
    fits = ladder[0]
    two = {w: fits[w] for w in WIDTHS[:2]}
    with pytest.raises(UserError, match=r"runs at 2 value\(s\) of the setting given: .* 3 or more values"):
        predict_config(two, at=512)
    flat_noise = (np.r_[0, np.geomspace(10, 1e4, 30)], np.r_[0.3, 0.3 + np.random.default_rng(1).normal(0, 0.01, 30)])
    with pytest.raises(UserError, match="run 16 was not fitted with a sigmoid"):
        predict_config({**two, 16: fit_sigmoid(*flat_noise)}, at=512)
    unsampled = fit_sigmoid(*curve(128, seed=3), n_boot=0)
    with pytest.raises(UserError, match="without bootstrap samples"):
        predict_config({**two, 128: unsampled}, at=512)
    with pytest.raises(UserError, match="finite and > 0"):
        predict_config({**two, 0: fits[128]}, at=512)
    with pytest.raises(UserError, match="at must be a number"):
        predict_config(fits, at="big")
    with pytest.raises(UserError, match="SigmoidFit or a \\(compute, score\\) pair"):
        predict_config({**two, 128: "curve.csv"}, at=512)

