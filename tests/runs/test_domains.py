"""A task mixture's run shows one fitted curve per domain: the report, RunView, the dashboard and
MLflow (issue 22, item 7). Run folders are written the way the engine writes them (no Ray)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.run_folder import write_run
from workbench.errors import UserError
from workbench.runs.report import DOMAIN_FILES, domains_of, print_report, write_report
from workbench.runs.view import RunView

MATH = {"A": 0.70, "B": 1.8, "C_mid": 0.01, "R0": 0.10}
CODE = {"A": 0.35, "B": 1.4, "C_mid": 0.02, "R0": 0.05}


@pytest.fixture
def mixed_run(tmp_path):
    return write_run(tmp_path / "mixed", 30, domains={"math": MATH, "code": CODE})


def test_domains_are_read_from_the_rows_and_a_single_task_run_has_none(mixed_run, tmp_path):
    view = RunView.open(mixed_run)
    assert view.domains == ["code", "math"]
    assert RunView.open(write_run(tmp_path / "single", 10)).domains == []
    assert domains_of([{"val/pass_rate": 0.1, "val/pass_rate_se": 0.01}]) == []


def test_the_report_fits_each_domain_to_its_own_ceiling(mixed_run):
    rep = write_report(mixed_run, charts=False)
    assert set(rep["domains"]) == {"code", "math"}
    for name, true in (("math", MATH), ("code", CODE)):
        d = rep["domains"][name]
        assert d["metric"] == f"val/pass_rate/{name}"
        assert abs(d["A"] - true["A"]) < 0.03, (name, d["A"])
        assert d["backtest"]["n_test"] > 0
    # the two ceilings are told apart, and the overall curve is neither
    assert rep["domains"]["math"]["A"] - rep["domains"]["code"]["A"] > 0.25
    saved = json.loads((mixed_run / DOMAIN_FILES[0]).read_text())
    assert set(saved) == {"code", "math"} and abs(saved["math"]["A"] - rep["domains"]["math"]["A"]) < 1e-9
    text = print_report(rep)
    assert any(line.startswith("domain math: A = 0.") for line in text.splitlines())
    assert any(line.startswith("domain code backtest:") for line in text.splitlines())


def test_a_domain_that_cannot_be_fitted_is_reported_not_raised(tmp_path):
    run = write_run(tmp_path / "mixed", 12, domains={"math": MATH, "code": CODE})
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for r in rows:  # the code domain was evaluated only at step 0 and 10
        if r.get("step", 0) > 10:
            r.pop("val/pass_rate/code", None)
    rep = write_report(run, charts=False, rows=rows)
    assert "fit" in rep["domains"]["math"]
    assert "needs at least" in rep["domains"]["code"]["error"]
    assert "domain code: not fitted: only 2 evaluations of val/pass_rate/code" in print_report(rep)


def test_runview_fits_a_domain_and_refuses_an_unknown_one(mixed_run):
    view = RunView.open(mixed_run)
    fit = view.fit(domain="code")
    assert abs(fit.A - CODE["A"]) < 0.03
    assert abs(view.fit().A - view.fit(domain="math").A) > 0.1  # the overall fit is a different curve
    assert {"val_pass_rate_math", "val_pass_rate_se_code"} <= set(view.curve.columns)
    assert view.curve["val_pass_rate_code"].iloc[-1] == pytest.approx(fit.score[-1])
    with pytest.raises(UserError, match="no domain 'python'.*code, math"):
        view.fit(domain="python")


def test_the_chart_draws_one_series_per_domain_named_in_the_legend(mixed_run):
    spec = RunView.open(mixed_run).chart().to_dict()
    text = json.dumps(spec)
    assert '"title": "domain"' in text  # the colour legend is titled by domain
    names = {v.get("recipe") for layer in json.loads(text)["layer"] for sub in layer.get("layer", [layer])
             for v in (sub.get("data", {}) or {}).get("values", [])}
    assert {"code", "math"} <= names


def test_the_chart_draws_points_for_a_domain_not_fitted_yet(tmp_path):
    run = write_run(tmp_path / "young", 3, domains={"math": MATH, "code": CODE})
    spec = json.dumps(RunView.open(run).chart().to_dict())
    assert "not fitted yet" in spec and '"code"' in spec and '"math"' in spec


def test_the_dashboard_names_each_domain_with_its_fit(mixed_run):
    from workbench.session import Session

    d = Session.open(mixed_run).dashboard()
    html = d._fit_text.value
    assert "data-domain='math'" in html and "data-domain='code'" in html
    assert "<b>code</b>" in html and "A = 0." in html
    assert "domain" in d.chart_svg  # the legend's title is in the drawn SVG
