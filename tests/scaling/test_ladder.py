"""workbench.scaling.forecast.ladder: the leave-largest-out backtest and the rule that stops a ladder."""

from __future__ import annotations

import pytest

from tests.scaling.test_config_curve import WIDTHS, curve
from workbench.errors import UserError
from workbench.scaling import fit_sigmoid
from workbench.scaling.forecast.ladder import leave_largest_out, next_rung


@pytest.fixture(scope="module")
def rising():
    return {w: fit_sigmoid(*curve(w, seed=30 + i)) for i, w in enumerate(WIDTHS)}


def test_leave_largest_out_beats_both_naive_answers_on_a_known_law(rising):
    bt = leave_largest_out(rising, key="model.n_embd")
    assert bt.at == WIDTHS[-1] and bt.seen == [float(w) for w in WIDTHS[:-1]] and bt.n_points == 30
    assert bt.rmse < bt.rmse_same and bt.rmse < bt.rmse_scaled  # C_mid moves: scaling the last curve to the true A is not enough
    assert bt.coverage >= 0.8
    assert bt.A_pred_ci[0] <= bt.A_meas <= bt.A_pred_ci[1]
    assert "predicted from 32, 64, 128, 256" in str(bt)
    with pytest.raises(UserError, match="needs 3 to predict from and one to hold out"):
        leave_largest_out({w: rising[w] for w in WIDTHS[:3]})


def test_next_rung_runs_until_three_rungs_then_asks_worth_it(rising):
    assert next_rung({32: rising[32]}, 64).run  # nothing to predict from yet
    d = next_rung({w: rising[w] for w in WIDTHS[:3]}, 256, key="model.n_embd", min_gain=0.01)
    assert d.run and d.prediction is not None and d.reason.startswith("worth it")
    d = next_rung({w: rising[w] for w in WIDTHS[:3]}, 256, key="model.n_embd", min_gain=0.5)
    assert not d.run and d.reason.startswith("not worth it")
