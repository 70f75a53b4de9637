"""Forecast dict, fit artifacts and the fit's MLflow metrics."""

from __future__ import annotations

import math

import pytest

from workbench import Session
from workbench.errors import UserError
from workbench.scaling import SigmoidFit, scaling_gain
from workbench.runs.forecast import fit_metrics, forecast_from_fit, log_fit, write_fit_artifacts


@pytest.fixture
def fit(run_folder):
    return Session.open(run_folder(12)).fit()


def test_forecast_matches_the_fit_and_the_scaling_gain(fit):
    current = float(fit.compute[fit.used].max())
    fc = forecast_from_fit(fit, 5 * current)
    assert fc["pass_rate"] == pytest.approx(fit.predict(5 * current))
    lo, hi = fit.band(5 * current)
    assert (fc["lo"], fc["hi"]) == pytest.approx((lo[0], hi[0]))
    g = scaling_gain(fit, budget=5 * current)
    assert fc["gain"] == pytest.approx(g.gain) and fc["verdict"] == g.verdict and fc["worth"] == g.worth


def test_forecast_inside_the_data_has_no_gain(fit):
    fc = forecast_from_fit(fit, float(fit.compute[fit.used].min()))
    assert fc["gain"] is None and "not past the current compute" in fc["verdict"]
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(UserError, match="budget"):
            forecast_from_fit(fit, bad)


def test_fit_artifacts_are_reloadable_and_offline(fit, tmp_path):
    paths = write_fit_artifacts(fit, tmp_path / "fit", title="t", x="compute/device_hours")
    assert [p.name for p in paths] == ["fit.json", "fit.html", "fit.png"]
    again = SigmoidFit.from_json(paths[0].read_text())
    assert again.A == fit.A and again.C_mid == fit.C_mid
    assert "cdn.jsdelivr" not in paths[1].read_text()  # Vega inlined: opens without internet
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fit_metrics_hold_estimates_and_intervals(fit):
    m = fit_metrics(fit)
    assert m["fit/A"] == fit.A and (m["fit/A_lo"], m["fit/A_hi"]) == fit.A_ci
    assert {"fit/B", "fit/B_lo", "fit/B_hi", "fit/C_mid", "fit/C_mid_lo", "fit/C_mid_hi", "fit/r2", "fit/n"} <= set(m)


def test_log_fit_writes_metrics_and_artifacts_to_mlflow(fit, tmp_path):
    from mlflow import MlflowClient

    from workbench.tracking.mlflow_sink import MlflowSink
    from workbench.tracking.store import create_run, ensure_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ensure_experiment("fits", uri)
    rid = create_run("fits", "r", tracking_uri=uri)
    paths = write_fit_artifacts(fit, tmp_path / "fit", title="t", x="compute/device_hours")
    log_fit(MlflowSink(rid, uri), fit, paths, step=7, x="compute/device_hours")
    c = MlflowClient(tracking_uri=uri)
    run = c.get_run(rid)
    assert run.data.metrics["fit/A"] == pytest.approx(fit.A) and run.data.tags["workbench.fit_x"] == "compute/device_hours"
    assert [m.step for m in c.get_metric_history(rid, "fit/C_mid")] == [7]
    assert {a.path for a in c.list_artifacts(rid, "fit")} == {"fit/fit.json", "fit/fit.html", "fit/fit.png"}
