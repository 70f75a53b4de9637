"""The default forecast (method="auto"): sigmoids and a trend weighted by the prefix's rolling-origin backtest."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.errors import UserError
from workbench.scaling import SigmoidFit, fit_sigmoid
from workbench.scaling.data import Curve
from workbench.scaling.forecast.blend import MIN_POINTS_BLEND

from .synthetic import EXAMPLE_CURVES, synth


def test_blend_weights_follow_the_backtest_and_trust_it_more_on_a_clean_curve():
    # the same saturating shape, measured with little and with much noise
    clean = fit_sigmoid(*synth(n=60, noise=0.002, seed=1, lo=1500, hi=200000), n_boot=50)
    noisy = fit_sigmoid(*synth(n=60, noise=0.05, seed=2, lo=1500, hi=200000), n_boot=0)
    for fit in (clean, noisy):
        fc = fit.forecast
        assert fc is not None and fit.method == "auto"
        assert sum(fc.weights.values()) == pytest.approx(1.0)
        assert set(fc.weights) == {"sigmoid", "paper", "trend"}
        # a smaller rolling-origin rmse never gets a smaller weight
        ranked = sorted(fc.weights, key=lambda k: fc.inner_rmse[k])
        assert all(fc.weights[a] >= fc.weights[b] - 1e-12 for a, b in zip(ranked, ranked[1:]))
    # clean: the line, whose backtest error is far above the noise, gets almost nothing;
    # noisy: every candidate's error is mostly noise, so the weights stay near equal
    assert clean.forecast.inner_rmse["trend"] > 5 * clean.forecast.inner_rmse["sigmoid"]
    assert clean.forecast.weights["trend"] < 0.05
    assert all(0.2 < w < 0.5 for w in noisy.forecast.weights.values())
    assert "rolling-origin" in clean.forecast_used and "forecast:" in clean.summary()


def test_predict_is_the_fit_inside_the_data_and_the_blend_beyond():
    c, y = synth(n=40, noise=0.01, seed=2)
    blended, plain = fit_sigmoid(c, y, n_boot=0), fit_sigmoid(c, y, n_boot=0, method="sigmoid")
    inside = c[1:-1]
    assert np.allclose(blended.predict(inside), plain.predict(inside))
    far = c[-1] * np.array([1.0, 2.0, 5.0])  # from the last fitted compute itself (exp(ln C) may round above it)
    assert np.allclose(blended.predict(far), blended.forecast.predict(far))
    # the paper's A, B, C_mid are reported either way: the blend changes only the forecast
    assert (blended.A, blended.B, blended.C_mid) == (plain.A, plain.B, plain.C_mid)


def test_far_forecasts_hand_over_to_the_sigmoids():
    c, y = synth(n=60, noise=0.01, seed=3)
    fit = fit_sigmoid(c, y, n_boot=0)
    w_near, w_far = fit.forecast.weights_at(np.array([c[-1] * 2, c[-1] * 1e8]))["trend"]
    assert w_far < w_near
    sig = fit.forecast.sigmoids
    lo, hi = min(v[0] for v in sig.values()), max(v[0] for v in sig.values())
    assert lo - 0.05 <= fit.predict(c[-1] * 1e30) <= hi + 0.05  # saturates near the sigmoids' A


def test_band_and_json_round_trip_with_a_blend():
    c, y = synth(n=40, noise=0.01, seed=4)
    fit = fit_sigmoid(c, y, n_boot=60)
    far = np.geomspace(c[-1], c[-1] * 20, 5)
    lo, hi = fit.band(far, kind="prediction")
    mlo, mhi = fit.band(far)
    mid = fit.predict(far)
    assert np.all(lo <= mid + 1e-12) and np.all(mid <= hi + 1e-12)
    assert np.all(lo <= mlo + 1e-12) and np.all(mhi <= hi + 1e-12)  # the prediction band holds the mean band
    assert np.all(np.diff(hi - lo) >= -1e-9)  # widens with the horizon
    back = SigmoidFit.from_json(fit.to_json())
    json.loads(fit.to_json())
    assert back.forecast == fit.forecast
    assert np.array_equal(back.predict(far), fit.predict(far))
    assert back.to_dict() == fit.to_dict()


def test_short_prefix_uses_the_sigmoid_alone_and_says_so():
    c, y = synth(n=MIN_POINTS_BLEND - 2, noise=0.01, seed=5)
    fit = fit_sigmoid(c, y, n_boot=0)
    assert fit.forecast is None and "too few for a rolling-origin backtest" in fit.forecast_used


def test_unknown_method_is_a_user_error():
    c, y = synth(n=20)
    with pytest.raises(UserError, match="unknown forecast method 'magic'"):
        fit_sigmoid(c, y, method="magic")


def test_paper_method_keeps_the_sigmoid_on_flat_data():
    rng = np.random.default_rng(6)
    c = np.r_[0.0, np.geomspace(10, 1000, 30)]
    y = np.r_[0.5, 0.5 + rng.normal(0, 0.02, 30)]
    assert fit_sigmoid(c, y, n_boot=0).no_gain
    paper = fit_sigmoid(c, y, n_boot=0, method="paper")
    assert not paper.no_gain and paper.forecast is None and "paper's procedure" in paper.forecast_used
    assert round(paper.A / 0.005) * 0.005 == pytest.approx(paper.A)  # on the paper's A grid


def test_blend_beats_last_value_and_paper_on_a_real_validation_run():
    # qwen2.5-0.5B validation (examples/curves), fitted on its first half: it has bent and still creeps up
    cv = Curve.from_csv(EXAMPLE_CURVES / "qwen2.5-0.5b-instruct_gsm8k_ppo__val.csv")
    until = 0.5 * cv.compute[-1]
    fit = fit_sigmoid(cv.compute, cv.score, fit_until=until)
    test = cv.compute > until
    err = np.sqrt(np.mean((fit.predict(cv.compute[test]) - cv.score[test]) ** 2))
    last = np.sqrt(np.mean((cv.score[~test][-1] - cv.score[test]) ** 2))
    paper = fit_sigmoid(cv.compute, cv.score, fit_until=until, method="paper", n_boot=0)
    err_paper = np.sqrt(np.mean((paper.predict(cv.compute[test]) - cv.score[test]) ** 2))
    assert err < last and err < err_paper


def test_a_blend_above_the_sigmoids_ceiling_is_explained_in_reach_and_gain():
    # the 0.5B validation run: the prefix trend carries the blend past the sigmoid's A
    cv = Curve.from_csv(EXAMPLE_CURVES / "qwen2.5-0.5b-instruct_gsm8k_ppo__val.csv")
    fit = fit_sigmoid(cv.compute, cv.score, r0="first", n_boot=0)
    last = float(cv.compute[-1])
    above = float(fit.predict(10 * last))
    assert above > fit.A  # the situation explained below
    target = (fit.A + above) / 2
    reach = fit.compute_to_reach(target)
    assert not reach.reachable and "blended forecast (predict) passes it" in reach.note and "trust A" in reach.note
    assert fit.compute_to_reach(fit.A + 0.2).note == ""  # neither reaches it: nothing to explain
    from workbench.scaling import scaling_gain

    # the forecast starts from the fit at the last compute (just under A) and its trend carries it past A
    verdict = scaling_gain(fit, factor=10).verdict
    assert "passes the sigmoid's A" in verdict and "headroom" not in verdict


def test_the_forecast_continues_from_the_fit_with_no_jump_at_the_last_fitted_compute():
    """Issue 24: the line and the band beyond the data start where the fit's end (the demo's chart
    dropped 0.015 and its band jumped wide at the last fitted compute, where the blend took over)."""
    import math

    from workbench.scaling.forecast.blend import ANCHOR_HORIZONS

    cv = Curve.from_csv(EXAMPLE_CURVES / "qwen2.5-0.5b-instruct_gsm8k_ppo__val.csv")
    fit = fit_sigmoid(cv.compute, cv.score, fit_until=0.5 * cv.compute[-1])
    b = fit.forecast
    o = b.origin
    before, at, after = o * (1 - 1e-6), o, o * (1 + 1e-6)
    gap = abs(float(b._raw(np.array([o]))[0]) - fit.predict(before))
    assert gap > 0.005  # the candidates mixed at the origin do differ from the fit there...
    assert abs(fit.predict(at) - fit.predict(before)) < 1e-4 and abs(fit.predict(after) - fit.predict(before)) < 1e-4  # ...yet no jump
    for kind in ("mean", "prediction"):
        lo, hi = fit.band(np.array([before, at, after]), kind=kind)
        assert np.ptp(lo) < 0.01 and np.ptp(hi) < 0.01, (kind, lo, hi)
    far = o * math.exp(1.01 * ANCHOR_HORIZONS * b.horizon)  # past the fade: the blend itself
    assert fit.predict(far) == pytest.approx(float(b._raw(np.array([far]))[0]))
