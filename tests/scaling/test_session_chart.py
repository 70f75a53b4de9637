"""The live run's chart (scaling.charts.session_chart), drawn from a curve's columns."""

from __future__ import annotations

import numpy as np

from workbench import RunView
from workbench.scaling.charts import session_chart
from workbench.widgets.dashboard import to_svg

X = "compute_device_hours"


def _cols(view):
    return view.curve[X], view.curve["val_pass_rate"]


def test_chart_with_a_fit_draws_the_forecast_at_the_budget(run_folder):
    v = RunView.open(run_folder(12))
    fit = v.fit()
    svg = to_svg(session_chart(*_cols(v), fit, budget=0.5, x_title="compute/device_hours"))
    assert svg.startswith("<svg") and "https://" not in svg.split(">", 1)[1]  # nothing fetched from outside
    assert f"forecast {fit.predict(0.5):.3f}" in svg
    assert "mark-area" in svg and "C_mid" in svg and "A = " in svg and "compute/device_hours" in svg


def test_a_budget_inside_the_data_draws_the_data_range(run_folder):
    v = RunView.open(run_folder(12))
    svg = to_svg(session_chart(*_cols(v), v.fit(), budget=1e-6))
    assert "mark-area" in svg and "forecast" in svg


def test_chart_without_a_fit_draws_only_the_points_after_compute_0(run_folder):
    v = RunView.open(run_folder(3))
    chart = session_chart(*_cols(v), None)
    assert len(chart.data.values) == 2  # 3 evaluations, one at compute 0 (not on a log axis)
    svg = to_svg(chart)
    assert "mark-symbol" in svg and "mark-line" not in svg and "the fit needs 4" in svg


def test_the_columns_may_be_plain_arrays():
    c, y = np.array([0.0, 1e-3, 2e-3]), np.array([0.1, 0.2, 0.3])
    assert [d["compute"] for d in session_chart(c, y, None).data.values] == [1e-3, 2e-3]


def test_every_mark_is_clipped_to_the_plot(run_folder):
    # a non-converged fit can put C_mid far off the axis; unclipped, Vega shifts the whole plot
    v = RunView.open(run_folder(12))
    chart = session_chart(*_cols(v), v.fit(), budget=0.5)
    assert all(layer.mark.clip for layer in chart.layer)
