"""Altair charts of fitted scaling curves; HTML that renders offline, and PNG.

    chart = chart_fit(fit, title="qwen 0.5B, GSM8K")      # one fit: points, curve, band, A, C_mid
    chart = chart_overlay({"cispo": f1, "dapo": f2})      # several fits on one set of axes
    save_chart(chart, "fit.html")                          # JavaScript inlined: no CDN needed
    save_chart(chart, "fit.png")                           # rendered by vl-convert

Compute is on a log axis (the sigmoid is symmetric in log C), so compute-0 points are not drawn;
R0 appears as a dotted line instead. A fit whose ceiling check (ceiling.py, set by the run report)
says the ceiling is not pinned shows the range of ceilings the data allow as a red shade. Point
colours: fitted points, excluded early points (grey, inside the greyed `fit_from` region), and
held-out points past `fit_until` (a backtest).
A no-gain fit (`fit.no_gain`) is drawn as what it forecasts: a flat line at its level with the
level's band, labelled "no gain detected", and no C_mid marker (there is no sigmoid).
Altair is imported here only, and `workbench.scaling` imports this module lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import altair as alt
import numpy as np

from workbench.errors import UserError
from workbench.scaling.fit.result import SigmoidFit

STATUS_COLORS = {"fitted": "#1f77b4", "excluded": "#9e9e9e", "held out": "#ff7f0e"}


def _grid(fits: list[SigmoidFit], extend: float) -> np.ndarray:
    pos = np.concatenate([f.compute[f.compute > 0] for f in fits])
    if len(pos) == 0:
        raise UserError("nothing to draw: no point with compute > 0")
    return np.geomspace(pos.min(), pos.max() * extend, 240)


def _x_scale(grid: np.ndarray) -> alt.Scale:
    # log axis pinned to the drawn range (Vega's "nice" rounding would add empty decades)
    return alt.Scale(type="log", domain=[float(grid[0]), float(grid[-1])], nice=False)


def _points(fit: SigmoidFit, name: str) -> list[dict[str, Any]]:
    out = []
    for i, (c, s) in enumerate(zip(fit.compute, fit.score)):
        if c <= 0:
            continue
        if fit.used[i]:
            status = "fitted"
        elif fit.fit_until is not None and c > fit.fit_until:
            status = "held out"
        else:
            status = "excluded"
        out.append({"compute": float(c), "score": float(s), "status": status, "recipe": name, "run": fit.run_names[int(fit.run[i])]})
    return out


def _curve_rows(fit: SigmoidFit, name: str, grid: np.ndarray, level: float, band: str | None) -> list[dict[str, Any]]:
    pred = fit.predict(grid)
    if band and len(fit.samples):
        lo, hi = fit.band(grid, level=level, kind=band)
    else:
        lo = hi = pred
    return [{"compute": float(c), "fit": float(p), "lo": float(a), "hi": float(b), "recipe": name} for c, p, a, b in zip(grid, pred, lo, hi)]


def chart_fit(
    fit: SigmoidFit,
    *,
    title: str | None = None,
    extend: float = 2.0,
    level: float = 0.95,
    band: str | None = "mean",
    x_title: str = "compute",
    y_title: str = "score",
    width: int = 600,
    height: int = 360,
) -> alt.LayerChart:
    """One fit: measured points, fitted curve to `extend` x the last compute, shaded band
    (band="mean" | "prediction" | None), asymptote A, C_mid marker, R0, greyed early region, and
    the ceiling check's range (shaded red, labelled) when it says the ceiling is not pinned."""
    grid = _grid([fit], extend)
    xs = _x_scale(grid)
    x = alt.X("compute:Q", scale=xs, title=x_title)
    y_scale = alt.Scale(zero=False)
    curve = alt.Data(values=_curve_rows(fit, "fit", grid, level, band))
    layers: list[alt.Chart] = []
    if fit.fit_from and fit.fit_from > grid[0]:
        layers.append(
            alt.Chart(alt.Data(values=[{"x0": float(grid[0]), "x1": float(fit.fit_from)}]))
            .mark_rect(color="#bdbdbd", opacity=0.3)
            .encode(x=alt.X("x0:Q", scale=xs, title=x_title), x2="x1:Q")
        )
    if band and len(fit.samples):
        layers.append(alt.Chart(curve).mark_area(opacity=0.25, color="#1f77b4").encode(x=x, y=alt.Y("lo:Q", scale=y_scale, title=y_title), y2="hi:Q"))
    layers.append(alt.Chart(curve).mark_line(color="#1f77b4", strokeWidth=2).encode(x=x, y=alt.Y("fit:Q", scale=y_scale, title=y_title)))
    pts = alt.Data(values=_points(fit, "fit"))
    layers.append(
        alt.Chart(pts)
        .mark_circle(size=36, opacity=0.85)
        .encode(
            x=x,
            y=alt.Y("score:Q", scale=y_scale, title=y_title),
            color=alt.Color("status:N", scale=alt.Scale(domain=list(STATUS_COLORS), range=list(STATUS_COLORS.values())), title="point"),
            tooltip=["compute:Q", "score:Q", "status:N", "run:N"],
        )
    )
    a_name = "level (no gain detected)" if fit.no_gain else "A"
    marks = [
        {"y": fit.A, "label": f"{a_name} = {fit.A:.3f} [{fit.A_ci[0]:.3f}, {fit.A_ci[1]:.3f}]", "dash": "asymptote"},
        {"y": fit.R0, "label": f"R0 = {fit.R0:.3f}", "dash": "R0"},
    ]
    rules = alt.Data(values=marks)
    layers.append(
        alt.Chart(rules).mark_rule(strokeDash=[6, 4], color="#d62728").encode(y="y:Q", opacity=alt.condition("datum.dash == 'R0'", alt.value(0.4), alt.value(0.9)))
    )
    layers.append(alt.Chart(rules).mark_text(align="left", dx=4, dy=-6, color="#d62728").encode(x=alt.value(4), y="y:Q", text="label:N"))
    check = fit.ceiling_check or {}
    if check.get("family_dependent"):  # the ceiling check's range: the ceilings the data allow
        lo, hi = check["ceiling_range"]
        span = {"x0": float(grid[0]), "x1": float(grid[-1]), "lo": lo, "hi": hi, "label": f"ceiling not pinned: [{lo:.3f}, {hi:.3f}]"}
        layers.insert(0, alt.Chart(alt.Data(values=[span])).mark_rect(color="#d62728", opacity=0.08)
                      .encode(x=alt.X("x0:Q", scale=xs, title=x_title), x2="x1:Q", y=alt.Y("lo:Q", scale=y_scale, title=y_title), y2="hi:Q"))
        layers.append(alt.Chart(alt.Data(values=[span])).mark_text(align="right", dx=-4, dy=12, color="#d62728")
                      .encode(x=alt.value(width), y="hi:Q", text="label:N"))
    if not fit.no_gain:  # a flat forecast has no C_mid (and NaN is not valid chart JSON)
        mid = {"compute": fit.C_mid, "score": (fit.A + fit.R0) / 2, "label": f"C_mid = {fit.C_mid:.3g}"}
        cm = alt.Data(values=[mid])
        layers.append(alt.Chart(cm).mark_rule(strokeDash=[2, 3], color="#555").encode(x=x))
        layers.append(alt.Chart(cm).mark_point(shape="diamond", size=90, filled=True, color="#555").encode(x=x, y="score:Q"))
        layers.append(alt.Chart(cm).mark_text(align="left", dx=6, dy=10, color="#555").encode(x=x, y="score:Q", text="label:N"))
    if fit.no_gain:
        subtitle = f"NO GAIN DETECTED: flat forecast at the level, rmse = {fit.rmse:.3f}, n = {fit.n}"
    else:
        subtitle = f"B = {fit.B:.2f} [{fit.B_ci[0]:.2f}, {fit.B_ci[1]:.2f}], R² = {fit.r2:.3f}, n = {fit.n}" + ("" if fit.converged else " - NOT CONVERGED")
    return clip_marks(alt.layer(*layers)).properties(
        title=alt.TitleParams(title or "scaling fit", subtitle=subtitle), width=width, height=height
    )


def chart_overlay(
    fits: Mapping[str, SigmoidFit],
    *,
    title: str | None = None,
    extend: float = 2.0,
    level: float = 0.95,
    band: str | None = "mean",
    points: bool = True,
    x_title: str = "compute",
    y_title: str = "score",
    width: int = 640,
    height: int = 380,
    legend: str = "recipe",
) -> alt.LayerChart:
    """Several fits (name -> SigmoidFit) on shared axes, one colour per name (the legend's title
    is `legend`: "recipe" for a comparison, "domain" for a mixture's curves): curves, bands,
    points and dashed asymptotes."""
    if not fits:
        raise UserError("chart_overlay needs at least one fit")
    grid = _grid(list(fits.values()), extend)
    rows, pts, asym = [], [], []
    for name, f in fits.items():
        rows += _curve_rows(f, name, grid, level, band)
        if points:
            pts += [p for p in _points(f, name) if p["status"] != "excluded"]
        asym.append({"recipe": name, "A": f.A})
    x = alt.X("compute:Q", scale=_x_scale(grid), title=x_title, axis=alt.Axis(format=".2~g"))  # 2e+11, not 200,000,000,000
    color = alt.Color("recipe:N", title=legend, sort=list(fits))  # in the caller's order (a ladder's: by value)
    ys = alt.Scale(zero=False)
    data = alt.Data(values=rows)
    layers = []
    if band:
        layers.append(alt.Chart(data).mark_area(opacity=0.18).encode(x=x, y=alt.Y("lo:Q", scale=ys, title=y_title), y2="hi:Q", color=color))
    layers.append(alt.Chart(data).mark_line(strokeWidth=2).encode(x=x, y=alt.Y("fit:Q", scale=ys, title=y_title), color=color))
    if pts:
        layers.append(
            alt.Chart(alt.Data(values=pts)).mark_circle(size=24, opacity=0.6).encode(x=x, y="score:Q", color=color, tooltip=["recipe:N", "compute:Q", "score:Q"])
        )
    layers.append(alt.Chart(alt.Data(values=asym)).mark_rule(strokeDash=[6, 4]).encode(y="A:Q", color=color))
    return clip_marks(alt.layer(*layers)).properties(title=title or "scaling fits", width=width, height=height)


def domain_chart(
    series: Mapping[str, tuple[Any, Any, SigmoidFit | None]],
    *,
    budget: float | None = None,
    level: float = 0.95,
    x_title: str = "compute",
    y_title: str = "val/pass_rate",
    title: str = "val/pass_rate per domain",
    width: int = 560,
    height: int = 300,
) -> Any:
    """A task mixture's live chart: domain -> (compute, score, fit or None). Every domain's fit
    and band, drawn out to `budget`, with its points, one colour per domain (the legend names
    them); a domain without a fit yet is drawn as points only. Used by RunView.chart."""
    fits = {d: f for d, (_, _, f) in series.items() if f is not None}
    layers = []
    if fits:
        latest = max(float(f.compute[f.compute > 0].max()) for f in fits.values())
        extend = budget / latest if budget is not None and budget > latest else 1.05
        layers += list(chart_overlay(fits, extend=extend, level=level, x_title=x_title, y_title=y_title, legend="domain").layer)
    bare = [{"compute": float(a), "score": float(b), "recipe": d}
            for d, (c, y, f) in series.items() if f is None
            for a, b in zip(np.asarray(c, dtype=float), np.asarray(y, dtype=float), strict=True) if a > 0]
    if bare:
        layers.append(
            alt.Chart(alt.Data(values=bare)).mark_circle(size=48).encode(
                x=alt.X("compute:Q", scale=alt.Scale(type="log"), title=x_title),
                y=alt.Y("score:Q", scale=alt.Scale(zero=False), title=y_title),
                color=alt.Color("recipe:N", title="domain"), tooltip=["recipe:N", "compute:Q", "score:Q"])
        )
    if not layers:
        raise UserError("nothing to draw: no domain has an evaluation with compute > 0")
    waiting = sorted(d for d, (_, _, f) in series.items() if f is None)
    subtitle = f"not fitted yet (the fit needs 4 points): {', '.join(waiting)}" if waiting else \
        "; ".join(f"{d}: A = {f.A:.3f} [{f.A_ci[0]:.3f}, {f.A_ci[1]:.3f}]" for d, f in fits.items())
    return clip_marks(alt.layer(*layers)).properties(title=alt.TitleParams(title, subtitle=subtitle), width=width, height=height)


def save_chart(chart: alt.TopLevelMixin, path: str | Path, scale: float = 2.0) -> Path:
    """Write .html (self-contained: Vega JS inlined, renders offline), .png (vl-convert) or .svg/.json."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".html", ".png", ".svg", ".json"):
        raise UserError(f"cannot save a chart as {path.name!r}: use .html, .png, .svg or .json")
    if path.parent and not path.parent.exists():
        raise UserError(f"folder does not exist: {path.parent}")
    if suffix == ".html":
        chart.save(str(path), inline=True)  # bundles vega/vega-lite/vega-embed via vl-convert
    elif suffix == ".png":
        chart.save(str(path), scale_factor=scale)
    else:
        chart.save(str(path))
    return path


def clip_marks(chart: Any) -> Any:
    """Clip every mark of a layered chart to the plot area, in place; returns the chart.

    A fit whose C_mid lies far outside the drawn compute range (a fit that did not converge)
    would otherwise place its marker far off the axis, and Vega's autosize would shift the
    whole plot to make room for it."""
    import altair as alt

    for layer in chart.layer:
        if isinstance(layer.mark, str):
            layer.mark = alt.MarkDef(type=layer.mark, clip=True)
        else:
            layer.mark.clip = True
    return chart


def chart_backtest(
    fit: SigmoidFit,
    prefix: SigmoidFit,
    *,
    title: str | None = None,
    level: float = 0.95,
    x_title: str = "compute",
    y_title: str = "score",
    width: int = 480,
    height: int = 320,
) -> alt.HConcatChart:
    """The final fit (chart_fit) beside a backtest panel: the forecast of `prefix`, a fit on the
    start of the same curve (fit_until set), with its prediction band, against the later points.

        prefix = backtest(curve, fractions=(0.4,)).fits[0]
        save_chart(chart_backtest(fit, prefix, title="run"), "fit.html")

    Self-contained on purpose: it reads the fits' public data and methods only."""
    from workbench.scaling.forecast.backtest import score_holdout

    if prefix.fit_until is None:
        raise UserError("chart_backtest needs a prefix fit (fit_until set): see workbench.scaling.forecast.backtest")
    pos = fit.compute > 0
    if not pos.any():
        raise UserError("nothing to draw: no point with compute > 0")
    grid = np.geomspace(fit.compute[pos].min(), fit.compute[pos].max() * 1.05, 240)
    xs = alt.Scale(type="log", domain=[float(grid[0]), float(grid[-1])], nice=False)
    x = alt.X("compute:Q", scale=xs, title=x_title)
    ys = alt.Scale(zero=False)
    pred = prefix.predict(grid)
    lo, hi = prefix.band(grid, level=level, kind="prediction") if len(prefix.samples) else (pred, pred)
    rows = [
        {"compute": float(c), "forecast": float(p), "lo": float(a), "hi": float(b), "final": float(f)}
        for c, p, a, b, f in zip(grid, pred, lo, hi, fit.predict(grid))
    ]
    held = prefix.compute > prefix.fit_until
    pts = [
        {"compute": float(c), "score": float(s), "point": "held out (forecast)" if h else "fitted (prefix)"}
        for c, s, h in zip(prefix.compute, prefix.score, held)
        if c > 0
    ]
    colors = {"fitted (prefix)": "#1f77b4", "held out (forecast)": "#ff7f0e"}
    data = alt.Data(values=rows)
    layers = [
        alt.Chart(data).mark_area(opacity=0.2, color="#ff7f0e").encode(x=x, y=alt.Y("lo:Q", scale=ys, title=y_title), y2="hi:Q"),
        alt.Chart(data).mark_line(color="#9e9e9e", strokeDash=[4, 3], strokeWidth=1.5).encode(x=x, y=alt.Y("final:Q", scale=ys, title=y_title)),
        alt.Chart(data).mark_line(color="#ff7f0e", strokeWidth=2).encode(x=x, y=alt.Y("forecast:Q", scale=ys, title=y_title)),
        alt.Chart(alt.Data(values=[{"compute": float(prefix.fit_until)}]))
        .mark_rule(strokeDash=[2, 3], color="#555")
        .encode(x=x),
        alt.Chart(alt.Data(values=pts))
        .mark_circle(size=36, opacity=0.85)
        .encode(
            x=x,
            y=alt.Y("score:Q", scale=ys, title=y_title),
            color=alt.Color("point:N", scale=alt.Scale(domain=list(colors), range=list(colors.values())), title="point"),
            tooltip=["compute:Q", "score:Q", "point:N"],
        ),
    ]
    rmse, _, cover = score_holdout(prefix, prefix.compute[held], prefix.score[held])
    sub = f"fit on {prefix.n} points up to {prefix.fit_until:.3g}; forecast band {level:.0%} (prediction); grey: the final fit"
    if held.any():
        sub = f"{int(held.sum())} later points: RMSE {rmse:.3f}, band covers {cover:.0%}. " + sub
    panel = clip_marks(alt.layer(*layers)).properties(title=alt.TitleParams("forecast from the start of the run", subtitle=sub), width=width, height=height)
    final = chart_fit(fit, level=level, title="final fit", x_title=x_title, y_title=y_title, width=width, height=height)
    return alt.hconcat(final, panel).properties(title=title or "scaling fit and backtest").resolve_scale(color="independent")


FORECAST_COLOR = "#9467bd"  # the forecast diamond of session_chart: not the orange of held-out points


def session_chart(
    compute: Any,
    score: Any,
    fit: SigmoidFit | None,
    *,
    budget: float | None = None,
    level: float = 0.95,
    x_title: str = "compute",
    y_title: str = "val/pass_rate",
    title: str = "val/pass_rate",
    width: int = 560,
    height: int = 300,
) -> Any:
    """A live run's chart: its points (`compute`, `score`: one curve column each) and, with a fit,
    `chart_fit` drawn out to `budget` plus the forecast there (a diamond with its interval). Without
    a fit (too few points yet) the points are drawn alone. Used by RunView.chart and the dashboard."""
    if fit is None:
        c, y = np.asarray(compute, dtype=float), np.asarray(score, dtype=float)
        data = [{"compute": float(a), "score": float(b)} for a, b in zip(c[c > 0], y[c > 0], strict=True)]
        return (
            alt.Chart(alt.Data(values=data))
            .mark_circle(size=48, color=STATUS_COLORS["fitted"])
            .encode(
                x=alt.X("compute:Q", scale=alt.Scale(type="log"), title=x_title),
                y=alt.Y("score:Q", scale=alt.Scale(zero=False), title=y_title),
                tooltip=["compute:Q", "score:Q"],
            )
            .properties(title=alt.TitleParams(title, subtitle=f"{len(data)} point(s): the fit needs 4"),
                        width=width, height=height)
        )
    latest = float(fit.compute[fit.compute > 0].max())
    if budget is None or not budget > latest:
        budget = latest * 1.05  # a budget inside the data: draw the data's range only
    chart = chart_fit(fit, title=title, extend=budget / latest, level=level, x_title=x_title, y_title=y_title,
                      width=width, height=height)
    pred = float(fit.predict(budget))
    lo = hi = pred
    if len(fit.samples):
        band = fit.band(budget, level=level)
        lo, hi = float(band[0][0]), float(band[1][0])
    row = {"compute": budget, "score": pred, "lo": lo, "hi": hi,
           "label": f"forecast {pred:.3f} [{lo:.3f}, {hi:.3f}]" if np.isfinite(lo) else f"forecast {pred:.3f}"}
    data = alt.Data(values=[row])
    xe = alt.X("compute:Q", title=x_title)
    extra = [
        alt.Chart(data).mark_rule(color=FORECAST_COLOR, strokeWidth=3).encode(x=xe, y="lo:Q", y2="hi:Q"),
        alt.Chart(data).mark_point(shape="diamond", size=110, filled=True, color=FORECAST_COLOR).encode(x=xe, y="score:Q"),
        alt.Chart(data).mark_text(align="right", dx=-8, dy=-10, color=FORECAST_COLOR).encode(x=xe, y="score:Q", text="label:N"),
    ]
    chart.layer = list(chart.layer) + extra
    return clip_marks(chart)
