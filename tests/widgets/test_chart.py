"""The session chart and its offline SVG rendering."""

from __future__ import annotations

import pandas as pd

from workbench import Session
from workbench.widgets.chart import default_budget, session_chart, to_svg


def test_default_budget_is_ten_times_the_latest_compute():
    curve = pd.DataFrame({"compute_device_hours": [0.0, 0.1, 0.3], "step": [0, 1, 2]})
    assert default_budget(curve, "compute/device_hours") == 3.0
    assert default_budget(curve.iloc[:1], "compute/device_hours") is None
    assert default_budget(curve, "step", factor=2) == 4.0


def test_chart_with_a_fit_draws_the_forecast_at_the_budget(run_folder):
    s = Session.open(run_folder(12))
    fit = s.fit()
    svg = to_svg(session_chart(s.curve, fit, budget=0.5))
    assert svg.startswith("<svg") and "https://" not in svg.split(">", 1)[1]  # nothing fetched from outside
    pred = fit.predict(0.5)
    assert f"forecast {pred:.3f}" in svg
    assert "mark-area" in svg and "C_mid" in svg and "A = " in svg


def test_a_budget_inside_the_data_draws_the_data_range(run_folder):
    s = Session.open(run_folder(12))
    svg = to_svg(session_chart(s.curve, s.fit(), budget=1e-6))
    assert "mark-area" in svg


def test_chart_without_a_fit_draws_only_points(run_folder):
    s = Session.open(run_folder(3))
    svg = to_svg(session_chart(s.curve, None))
    assert "mark-symbol" in svg and "mark-line" not in svg and "the fit needs 4" in svg


def test_session_chart_method_and_x_in_flops(run_folder):
    s = Session.open(run_folder(12), x="compute/flops")
    chart = s.chart()
    assert "compute/flops" in to_svg(chart)
    assert s.fit().compute.max() == s.curve["compute_flops"].max()


def test_every_mark_is_clipped_to_the_plot(run_folder):
    # a non-converged fit can put C_mid far off the axis; unclipped, Vega shifts the whole plot
    s = Session.open(run_folder(12))
    chart = session_chart(s.curve, s.fit(), budget=0.5)
    assert all(layer.mark.clip for layer in chart.layer)
