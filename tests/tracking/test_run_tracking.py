"""A session's MLflow run: opened or reopened, ended FAILED when its launch fails, the fit logged."""

from __future__ import annotations

import dataclasses

import pytest
from mlflow import MlflowClient

from workbench import Session
from workbench.errors import UserError
from workbench.runs.report import write_report
from workbench.tracking.run_tracking import failed_if_raises, fit_metrics, log_fit, log_fit_error, open_run


@pytest.fixture
def uri(tracking_uri):
    return tracking_uri  # the tests' shared SQLite store (tests/tracking/conftest.py)


def test_open_run_creates_the_run_and_points_the_config_at_it(run_folder, uri, experiment):
    cfg = Session.open(run_folder(4)).cfg
    tracked, created = open_run(cfg, experiment=experiment, tracking_uri=uri)
    tr = tracked.tracking
    assert created and tr.mlflow and tr.tracking_uri == uri and tr.experiment == experiment
    run = MlflowClient(tracking_uri=uri).get_run(tr.run_id)
    assert run.info.status == "RUNNING" and run.data.tags["workbench.run"] == cfg.name
    assert run.data.tags["workbench.out_dir"] == str(cfg.out_dir)


def test_open_run_reopens_an_ended_run_and_refuses_an_unknown_one(run_folder, uri, experiment):
    cfg = Session.open(run_folder(4)).cfg
    first, _ = open_run(cfg, experiment=experiment, tracking_uri=uri)
    MlflowClient(tracking_uri=uri).set_terminated(first.tracking.run_id, "KILLED")
    again, created = open_run(cfg, experiment=experiment, run_id=first.tracking.run_id, tracking_uri=uri)
    assert not created and again.tracking.run_id == first.tracking.run_id
    assert MlflowClient(tracking_uri=uri).get_run(first.tracking.run_id).info.status == "RUNNING"
    with pytest.raises(UserError, match="no MLflow run 'nope'"):
        open_run(cfg, experiment=experiment, run_id="nope", tracking_uri=uri)


def test_disabled_tracking_logs_to_metrics_jsonl_only(run_folder, uri, experiment):
    cfg = Session.open(run_folder(4)).cfg
    cfg = dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, mlflow=True))
    out, created = open_run(cfg, experiment=experiment, tracking_uri=uri, enabled=False)
    assert not out.tracking.mlflow and not created


def test_a_failed_launch_ends_a_created_run_failed_and_reraises(run_folder, uri, experiment):
    cfg, created = open_run(Session.open(run_folder(4)).cfg, experiment=experiment, tracking_uri=uri)
    with pytest.raises(RuntimeError, match="no cluster"):
        with failed_if_raises(cfg, created):
            raise RuntimeError("no cluster")
    assert MlflowClient(tracking_uri=uri).get_run(cfg.tracking.run_id).info.status == "FAILED"
    reopened, created = open_run(cfg, experiment=experiment, run_id=cfg.tracking.run_id, tracking_uri=uri)
    with pytest.raises(KeyError):
        with failed_if_raises(reopened, created):  # not created here: the run is left as it was
            raise KeyError("x")
    assert MlflowClient(tracking_uri=uri).get_run(cfg.tracking.run_id).info.status == "RUNNING"


def test_fit_metrics_hold_estimates_and_intervals(run_folder):
    fit = Session.open(run_folder(12)).fit()
    m = fit_metrics(fit)
    assert m["fit/A"] == fit.A and (m["fit/A_lo"], m["fit/A_hi"]) == fit.A_ci
    assert {"fit/B", "fit/B_lo", "fit/B_hi", "fit/C_mid", "fit/C_mid_lo", "fit/C_mid_hi", "fit/r2", "fit/n"} <= set(m)
    assert not any(k.startswith("fit/ceiling") for k in m), "no ceiling check was run on this fit"
    fit.ceiling_check = {"ceiling_range": [0.48, 0.93], "family_dependent": True}
    m = fit_metrics(fit)
    assert (m["fit/ceiling_lo"], m["fit/ceiling_hi"], m["fit/ceiling_family_dependent"]) == (0.48, 0.93, 1.0)


def test_log_fit_writes_metrics_tags_and_the_report_files(run_folder, uri, experiment):
    s = Session.open(run_folder(12))
    cfg, _ = open_run(s.cfg, experiment=experiment, tracking_uri=uri)
    rep = write_report(s.out_dir)
    log_fit(cfg, rep["fit"], [s.out_dir / f for f in ("fit.json", "fit.html", "fit.png")], step=7, x="compute/device_hours")
    log_fit_error(cfg, "only for the tag")
    c = MlflowClient(tracking_uri=uri)
    run = c.get_run(cfg.tracking.run_id)
    assert run.data.metrics["fit/A"] == pytest.approx(s.fit().A) and run.data.tags["workbench.fit_x"] == "compute/device_hours"
    assert run.data.tags["workbench.fit_error"] == "only for the tag"
    assert [m.step for m in c.get_metric_history(cfg.tracking.run_id, "fit/C_mid")] == [7]
    assert {a.path for a in c.list_artifacts(cfg.tracking.run_id, "fit")} == {"fit/fit.json", "fit/fit.html", "fit/fit.png"}


def test_open_run_on_a_file_that_is_not_a_database_names_it(run_folder, tmp_path, experiment):
    cfg = Session.open(run_folder(4)).cfg
    junk = tmp_path / "notes.db"
    junk.write_text("not a database")
    for run_id in (None, "f" * 32):  # a new run, and reopening one
        with pytest.raises(UserError, match=f"{junk} is not an SQLite database"):
            open_run(cfg, experiment=experiment, run_id=run_id, tracking_uri=str(junk))


def test_the_end_of_run_report_logs_each_domain_fit_and_its_files(tmp_path, uri, experiment):
    from tests.helpers.run_folder import write_run
    from workbench.runs.report import report_run_end

    math_curve = {"A": 0.7, "B": 1.8, "C_mid": 0.01, "R0": 0.1}
    code_curve = {"A": 0.35, "B": 1.4, "C_mid": 0.02, "R0": 0.05}
    s = Session.open(write_run(tmp_path / "mixed", 20, domains={"math": math_curve, "code": code_curve}))
    cfg, _ = open_run(s.cfg, experiment=experiment, tracking_uri=uri)
    report_run_end(cfg, s.view.rows, x="compute/device_hours", step=190, tracked=True)
    c = MlflowClient(tracking_uri=uri)
    metrics = c.get_run(cfg.tracking.run_id).data.metrics
    assert metrics["fit/math/A"] == pytest.approx(s.view.fit(domain="math").A, abs=1e-9)
    assert metrics["fit/code/A"] == pytest.approx(s.view.fit(domain="code").A, abs=1e-9)
    assert {"fit/code/A_lo", "fit/code/A_hi", "fit/math/B", "fit/A"} <= set(metrics)
    assert {"fit/fit_domains.json", "fit/fit_domains.png"} <= {a.path for a in c.list_artifacts(cfg.tracking.run_id, "fit")}
