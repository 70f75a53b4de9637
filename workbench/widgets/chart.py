"""The live scaling chart of a session, and offline SVG rendering of Altair charts.

    chart = session_chart(curve, fit, x="compute/device_hours", budget=0.05)   # Altair chart
    svg = to_svg(chart)                 # rendered here by vl-convert: no JavaScript, no CDN

`curve` is `Session.curve` (one row per evaluation); `fit` the SigmoidFit of it or None while
fewer than 4 evaluations exist (the points are then drawn alone). With a fit, the chart is
`workbench.scaling.charts.chart_fit` (points, sigmoid, band, A and C_mid markers, greyed
region before `fit_from`) drawn out to `budget`, plus the forecast at the budget as an orange
diamond with its interval. Used by the dashboard widget and by `Session.chart()`.
"""

from __future__ import annotations

import io
import math
from typing import Any, Optional

import pandas as pd

from workbench.runs.view import X_COLUMNS  # noqa: E402  (one owner: the run view)
FORECAST_COLOR = "#9467bd"  # not the orange of held-out points


def default_budget(curve: pd.DataFrame, x: str, factor: float = 10.0) -> Optional[float]:
    """`factor` x the latest positive compute of the curve (None when there is none yet)."""
    c = curve[X_COLUMNS[x]]
    c = c[c > 0]
    return float(c.max()) * factor if len(c) else None


def session_chart(
    curve: pd.DataFrame,
    fit: Any,
    *,
    x: str = "compute/device_hours",
    budget: float | None = None,
    level: float = 0.95,
    title: str = "val/pass_rate",
    width: int = 560,
    height: int = 300,
):
    """An Altair chart of the evaluations so far (and the fit, band and forecast when `fit` is given)."""
    import altair as alt

    col = X_COLUMNS[x]
    if fit is None:
        pts = curve[curve[col] > 0]
        data = [{"compute": float(c), "score": float(s)} for c, s in zip(pts[col], pts["val_pass_rate"], strict=True)]
        return (
            alt.Chart(alt.Data(values=data))
            .mark_circle(size=48, color="#1f77b4")
            .encode(
                x=alt.X("compute:Q", scale=alt.Scale(type="log"), title=x),
                y=alt.Y("score:Q", scale=alt.Scale(zero=False), title="val/pass_rate"),
                tooltip=["compute:Q", "score:Q"],
            )
            .properties(title=alt.TitleParams(title, subtitle=f"{len(data)} point(s): the fit needs 4"),
                        width=width, height=height)
        )
    from workbench.scaling.charts import chart_fit, clip_marks

    latest = float(fit.compute[fit.compute > 0].max())
    if budget is None or not budget > latest:
        budget = latest * 1.05  # a budget inside the data: draw the data's range only
    chart = chart_fit(fit, title=title, extend=budget / latest, level=level, x_title=x, y_title="val/pass_rate",
                      width=width, height=height)
    pred = float(fit.predict(budget))
    lo = hi = pred
    if len(fit.samples):
        band = fit.band(budget, level=level)
        lo, hi = float(band[0][0]), float(band[1][0])
    row = {"compute": budget, "score": pred, "lo": lo, "hi": hi,
           "label": f"forecast {pred:.3f} [{lo:.3f}, {hi:.3f}]" if math.isfinite(lo) else f"forecast {pred:.3f}"}
    data = alt.Data(values=[row])
    xe = alt.X("compute:Q", title=x)
    extra = [
        alt.Chart(data).mark_rule(color=FORECAST_COLOR, strokeWidth=3).encode(x=xe, y="lo:Q", y2="hi:Q"),
        alt.Chart(data).mark_point(shape="diamond", size=110, filled=True, color=FORECAST_COLOR).encode(x=xe, y="score:Q"),
        alt.Chart(data).mark_text(align="right", dx=-8, dy=-10, color=FORECAST_COLOR).encode(x=xe, y="score:Q", text="label:N"),
    ]
    chart.layer = list(chart.layer) + extra
    return clip_marks(chart)


def to_svg(chart: Any) -> str:
    """Render an Altair chart to an SVG string with vl-convert (offline)."""
    buf = io.StringIO()
    chart.save(buf, format="svg")
    return buf.getvalue()
