"""Altair charts (workbench/scaling/charts.py): layers, offline HTML, PNG."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from workbench.errors import UserError
from workbench.scaling import Curve, fit_sigmoid

from .synthetic import QWEN_VAL, curve_path, synth

charts = pytest.importorskip("workbench.scaling.charts")


@pytest.fixture(scope="module")
def fit():
    cv = Curve.from_csv(curve_path(QWEN_VAL))
    return fit_sigmoid(cv.compute, cv.score, fit_from=0.3, fit_until=5.0, n_boot=50)


def _marks(spec):
    return [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]]


def test_fit_chart_has_every_element(fit):
    spec = charts.chart_fit(fit, title="qwen", x_title="GPU-hours").to_dict()
    marks = _marks(spec)
    assert marks[0] == "rect"  # the greyed early region (fit_from)
    assert {"area", "line", "circle", "rule", "point", "text"} <= set(marks)
    assert spec["layer"][1]["encoding"]["x"]["scale"]["type"] == "log"
    texts = str(spec)
    assert f"A = {fit.A:.3f}" in texts and "C_mid = " in texts
    statuses = {d["status"] for d in spec["layer"][3]["data"]["values"]}
    assert statuses == {"fitted", "excluded", "held out"}


def test_no_band_without_bootstrap():
    c, y = synth(n=20, noise=0.01)
    spec = charts.chart_fit(fit_sigmoid(c, y, n_boot=0)).to_dict()
    assert "area" not in _marks(spec) and "rect" not in _marks(spec)


def test_overlay_colours_each_recipe(fit):
    c, y = synth(n=30, noise=0.01)
    other = fit_sigmoid(c / 1e4, y, n_boot=50)
    spec = charts.chart_overlay({"qwen": fit, "synthetic": other}).to_dict()
    recipes = {d["recipe"] for d in spec["layer"][0]["data"]["values"]}
    assert recipes == {"qwen", "synthetic"}
    assert spec["layer"][0]["encoding"]["color"]["field"] == "recipe"
    with pytest.raises(UserError):
        charts.chart_overlay({})


def test_html_renders_offline_and_png_is_an_image(fit, tmp_path):
    chart = charts.chart_fit(fit)
    html = charts.save_chart(chart, tmp_path / "fit.html").read_text()
    assert "vega-embed" in html.lower() or "vegaEmbed" in html
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*[\"']?https?://", html, re.I)  # no CDN
    assert not re.search(r"<link[^>]*href\s*=\s*[\"']?https?://", html, re.I)
    png = charts.save_chart(chart, tmp_path / "fit.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    with pytest.raises(UserError, match="use .html"):
        charts.save_chart(chart, tmp_path / "fit.pdf")
    with pytest.raises(UserError, match="folder does not exist"):
        charts.save_chart(chart, tmp_path / "nope" / "fit.html")


def test_scaling_imports_no_altair_torch_or_ray_until_charts_are_asked_for():
    code = (
        "import sys, workbench.scaling as s\n"
        "heavy = [m for m in ('altair', 'torch', 'ray', 'IPython', 'ipywidgets') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "s.chart_fit\n"
        "assert 'altair' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_gain_fit_draws_its_flat_forecast_not_a_collapse(tmp_path):
    import numpy as np

    rng = np.random.default_rng(1)
    c = np.r_[0.0, np.geomspace(50, 5000, 40)]
    y = np.r_[0.5, 0.5 + rng.normal(0, 0.02, 40)]
    flat = fit_sigmoid(c, y, n_boot=50)
    assert flat.no_gain
    chart = charts.chart_fit(flat, extend=10.0)
    spec = chart.to_dict()
    curve = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")["data"]["values"]
    assert {round(d["fit"], 12) for d in curve} == {round(flat.A, 12)}  # flat to 10x the data
    assert min(d["lo"] for d in curve) > y.min() - 0.05  # the band stays at the data's level
    text = str(spec)
    assert "no gain detected" in text and "NO GAIN DETECTED" in text and "C_mid" not in text
    assert "NaN" not in chart.to_json()  # valid JSON for Vega
    overlay = charts.chart_overlay({"flat": flat, "rising": fit_sigmoid(*synth(n=30, noise=0.01), n_boot=50)})
    assert "NaN" not in overlay.to_json()
    charts.save_chart(chart, tmp_path / "flat.html")


def test_a_ceiling_not_pinned_is_shaded_with_its_range():
    import csv
    from pathlib import Path

    from workbench.scaling import ceiling_check

    with (Path(__file__).resolve().parents[2] / "examples" / "curves" / "demo" / "seed0.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    fit = fit_sigmoid([float(r["compute"]) for r in rows], [float(r["val_pass_rate"]) for r in rows])
    assert "ceiling not pinned" not in str(charts.chart_fit(fit).to_dict()), "unchecked: no shade"
    fit.ceiling_check = ceiling_check(fit).to_dict()
    spec = charts.chart_fit(fit).to_dict()
    lo, hi = fit.ceiling_check["ceiling_range"]
    shade = spec["layer"][0]
    assert _marks(spec)[0] == "rect" and shade["data"]["values"][0]["lo"] == lo and shade["data"]["values"][0]["hi"] == hi
    assert f"ceiling not pinned: [{lo:.3f}, {hi:.3f}]" in str(spec)
    fit.ceiling_check = dict(fit.ceiling_check, family_dependent=False)
    assert "ceiling not pinned" not in str(charts.chart_fit(fit).to_dict())
