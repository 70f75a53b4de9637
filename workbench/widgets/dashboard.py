"""`session.dashboard()`: a live ipywidgets panel for one run.

    d = session.dashboard(budget=0.05)    # show it (last expression of a cell)
    d = Dashboard(RunView.open("runs/x")) # a finished run's view (workbench.runs.view), no Ray
    d.refresh()                           # what the update loop does every `poll` seconds
    d.close()                             # stop updating and remove it

The panel shows the run's status, a step progress bar, the chart of validation pass rate vs
compute (observed points, the sigmoid refitted at every new evaluation, its 95% band drawn out
to `budget` (default 10x the latest compute), the asymptote A and C_mid markers, the greyed
region before `fit_from`, and the forecast at the budget), the fitted parameters, and the
latest train metrics (reward, pass rate, staleness, truncation, entropy). Beside the curve, the
Samples tab (workbench/widgets/samples_view.py) shows the completions the run kept, filtered, one
prompt's group, or two evaluations side by side; under the chart a selector of its evaluation
points opens one's samples (the chart is a static SVG, see `_eval_row`), and a banner above names
each run-health flag with a button to the samples at its step.

Rendering is offline: vl-convert turns the Altair chart into SVG in the kernel and an
`ipywidgets.HTML` shows it, so no JavaScript library is loaded from a CDN. Updates run as an
asyncio task on the kernel's event loop (ipykernel 7 drops widget output sent from other
threads), so they flow while the kernel is idle or awaiting (`await session.wait_async()`);
a blocking `session.wait()` refreshes its dashboards itself. Outside a running event loop
(a plain script) there is no update task: call `refresh()`.
"""

from __future__ import annotations

import asyncio
import html
import io
import math
from typing import Any, Optional

import ipywidgets as widgets

from workbench.errors import UserError
from workbench.widgets.samples_data import eval_points, health_flags
from workbench.widgets.samples_view import HealthBanner, SamplesTab

WAITING = "Waiting for the first evaluation"
# (metric key, label) of the train metrics shown; missing ones are left out
TRAIN_METRICS = (
    ("train/reward_mean", "reward"),
    ("train/pass_rate", "train pass rate"),
    ("train/staleness_mean", "staleness (mean)"),
    ("train/staleness_max", "staleness (max)"),
    ("train/truncation_rate", "truncation rate"),
    ("train/entropy", "entropy"),
    ("throughput/samples_per_second", "samples / s"),
    ("sampler/retired_share", "retired share"),  # No-Positive-Resampling's (workbench/rl/sampler.py)
)


def to_svg(chart: Any) -> str:
    """Render an Altair chart to an SVG string with vl-convert (offline: no JavaScript, no CDN)."""
    buf = io.StringIO()
    chart.save(buf, format="svg")
    return buf.getvalue()


def _fmt(v: Any) -> str:
    if isinstance(v, (int, float)) and math.isfinite(v):
        return f"{v:.4g}"
    return "-"


class Dashboard(widgets.VBox):
    """The live panel (an ipywidgets.VBox). `fit`, `forecast` and `message` hold what it shows.

    `source` is a Session (its `update()` polls the run; the panel reads its `view`) or a
    RunView (read-only: drawn once, nothing to poll)."""

    def __init__(self, source: Any, budget: float | None = None, *, poll: float = 2.0, fit_from: float | None = None,
                 width: int = 560, height: int = 300):
        if budget is not None and not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget > 0):
            raise UserError(f"budget must be a compute > 0, got {budget!r}")
        if not poll > 0:
            raise UserError(f"poll must be > 0 seconds, got {poll}")
        self.session = source
        self.view = getattr(source, "view", source)  # a Session's RunView, or the RunView itself
        self.budget = budget
        self.poll = float(poll)
        self.fit_from = fit_from
        self.size = (width, height)
        self.fit: Any = None
        self.forecast: Optional[dict[str, Any]] = None
        self.message = ""
        self.chart_svg = ""
        self.error: Optional[str] = None
        self._drawn: Any = None  # what the chart was last drawn from
        self._task: Optional[asyncio.Task] = None
        self._header = widgets.HTML()
        self._progress = widgets.IntProgress(value=0, min=0, max=max(1, int(self.view.max_steps)), description="steps",
                                             bar_style="info", layout=widgets.Layout(width="60%"))
        self._progress_text = widgets.HTML()
        self._chart = widgets.HTML(layout=widgets.Layout(min_height=f"{height + 80}px"))
        self._fit_text = widgets.HTML()
        self._train = widgets.HTML()
        self._banner = HealthBanner(self.open_samples)
        self.samples = SamplesTab(self.view)
        self._evals = widgets.Dropdown(description="evaluation", layout=widgets.Layout(width="460px"))
        self._evals_open = widgets.Button(description="open its samples", layout=widgets.Layout(width="auto"))
        self._evals_open.on_click(lambda _: self._evals.value is not None and self.open_samples(self._evals.value, "val"))
        self._evals_open.add_class("wb-eval-open")
        curve = widgets.VBox([self._chart, self._eval_row(), self._fit_text, self._train])
        self._tabs = widgets.Tab(children=[curve, self.samples], titles=("Curve", "Samples"))
        super().__init__(
            [self._header, self._banner, widgets.HBox([self._progress, self._progress_text]), self._tabs],
            layout=widgets.Layout(border="1px solid #ddd", padding="6px", width=f"{width + 200}px"),
        )
        self.add_class("workbench-dashboard")
        self.refresh()
        self.start()

    # ------------------------------------------------------------------ updating
    def start(self) -> bool:
        """Schedule the update task on the running event loop; False when there is none."""
        if self._task is not None and not self._task.done():
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._task = loop.create_task(self._run())
        return True

    async def _run(self) -> None:
        while not self._ended():
            await asyncio.sleep(self.poll)
            self.refresh()

    def _ended(self) -> bool:
        return bool(getattr(self.session, "finished", True))  # a bare RunView never changes

    def close(self) -> None:
        task = getattr(self, "_task", None)  # ipywidgets calls close() from __del__, even half-built
        if task is not None:
            task.cancel()
        super().close()

    def refresh(self) -> None:
        """Poll the session once and redraw what changed. Errors are shown, not raised."""
        try:
            update = getattr(self.session, "update", None)
            if update is not None:
                update()  # new rows into the view; at the run's end the session logs its fit
            self._draw_status()
            self._draw_train()
            self._draw_chart()
            self.samples.refresh()
            self._draw_evals()
            self._banner.show(health_flags(self.view))
            self.error = None
        except Exception as e:  # noqa: BLE001 - a dashboard must keep going; say what broke
            self.error = f"{type(e).__name__}: {e}"
            self._header.value = self._header_html() + f"<div style='color:#c00'>dashboard error: {html.escape(self.error)}</div>"

    def open_samples(self, step: int, kind: str | None = None) -> None:
        """Switch to the Samples tab at `step` (what a flag's button and the evaluation selector do)."""
        self.samples.show_step(step, kind)
        self._tabs.selected_index = 1

    def _eval_row(self) -> widgets.HBox:
        """The curve's evaluation points as a selector with a button to their samples. Not a click on
        the point itself: the chart is a static SVG (vl-convert, in the kernel) inside an
        ipywidgets.HTML, which sends no browser event back to the kernel and runs no script, and a
        clickable Vega view would need vega-embed loaded in the page, which the offline dashboard avoids."""
        return widgets.HBox([self._evals, self._evals_open])

    def _draw_evals(self) -> None:
        points = eval_points(self.view, self.samples.frame.df)
        options = tuple((p.label, p.step) for p in reversed(points))  # newest first
        if options == tuple(self._evals.options):
            return  # unchanged: leave an open selector alone
        keep = self._evals.value
        self._evals.options = options
        steps = [p.step for p in points]
        self._evals.value = keep if keep in steps else (steps[-1] if steps else None)

    # ------------------------------------------------------------------ pieces
    def _header_html(self) -> str:
        s = self.view
        st = s.status()
        status = st.get("status", "?")
        color = {"failed": "#c00", "finished": "#2a7", "stopped": "#a60", "paused": "#a60"}.get(status, "#333")
        parts = [f"<b>{html.escape(s.name)}</b>", f"<span style='color:{color}'>{html.escape(str(status))}</span>"]
        if s.run_id:
            parts.append(f"MLflow run <code>{html.escape(s.run_id[:12])}</code>")
        out = " &middot; ".join(parts)
        if st.get("error"):
            out += f"<div style='color:#c00'>error: {html.escape(str(st['error']))}</div>"
        learning = str(st.get("learning") or (s.summary or {}).get("training", ""))
        if learning.startswith(("not learning", "nothing was trained")):
            # stays in view, whatever events follow (engine/run/learning.py)
            out += f"<div class='workbench-not-learning' style='color:#c00;font-weight:bold'>{html.escape(str(learning))}</div>"
        for event in st.get("events", [])[-3:]:  # generator restarts, curriculum warnings
            if event != st.get("learning"):
                out += f"<div style='color:#a60'>{html.escape(str(event))}</div>"
        return out

    def _draw_status(self) -> None:
        st = self.view.status()
        self._header.value = self._header_html()
        step = int(st.get("step") or 0)
        total = int(st.get("max_steps") or self.view.max_steps)
        self._progress.max = max(1, total)
        self._progress.value = min(step, self._progress.max)
        status = st.get("status")
        self._progress.bar_style = {"finished": "success", "failed": "danger", "stopped": "warning"}.get(status, "info")
        compute = st.get("compute/device_hours")
        self._progress_text.value = f"&nbsp;{step} / {total} steps" + (
            f" &middot; {compute:.4g} device-hours" if isinstance(compute, (int, float)) else "")

    def _draw_train(self) -> None:
        last = next((r for r in reversed(self.view.rows) if any(k.startswith("train/") for k in r)), None)
        if last is None:
            self._train.value = "<i>no train step yet</i>"
            return
        cells = "".join(
            f"<td style='padding:0 10px'><div style='color:#666;font-size:85%'>{label}</div>"
            f"<div data-metric='{key}'>{_fmt(last.get(key))}</div></td>"
            for key, label in TRAIN_METRICS if key in last
        )
        self._train.value = f"<div style='color:#666'>train, step {int(last['step'])}:</div><table><tr>{cells}</tr></table>"

    def _draw_chart(self) -> None:
        s = self.view
        curve = s.curve
        key = (len(curve), self.budget, self.fit_from, s.x)
        if key == self._drawn:
            return
        every = s.cfg.eval.every_steps
        if curve.empty:
            self.fit, self.forecast, self.chart_svg = None, None, ""
            hint = " (the run has not started: call session.start())" if getattr(self.session, "started", True) is False else ""
            self.message = (f"{WAITING}{hint}; one every {every} steps." if s.cfg.eval.enabled
                            else "This run makes no evaluations (eval.every_steps: 0): no curve to fit.")
            style = "padding:2em;color:#555"
            self._chart.value = f"<div class='wb-message' style='{style}'>&#8987; {html.escape(self.message)}</div>"
            self._fit_text.value = ""
            self._drawn = key
            return
        budget = self.budget if self.budget is not None else s.default_budget()
        self.fit, self.message = s.fit_or_none(self.fit_from)
        if self.fit is None:
            self.forecast = None
        if (curve[s.column] > 0).any():
            self.chart_svg = to_svg(s.chart(budget, fit_from=self.fit_from, width=self.size[0], height=self.size[1]))
            body = f"<div class='wb-chart' style='max-width:100%;overflow:auto'>{self.chart_svg}</div>"
        else:
            self.chart_svg = ""
            r0 = curve["val_pass_rate"].iloc[0]
            body = f"<div class='wb-message' style='padding:2em;color:#555'>R0 = {r0:.4f} measured at compute 0.</div>"
        if self.message:
            body += f"<div class='wb-message' style='color:#555'>{html.escape(self.message)}</div>"
        self._chart.value = body
        self._fit_text.value = self._fit_html(budget)
        self._drawn = key

    def _fit_html(self, budget: Optional[float]) -> str:
        f = self.fit
        if f is None:
            return ""
        text = _fit_summary_html(f, "fit")
        for domain, (df, why) in self.view.domain_fits(self.fit_from).items():  # a task mixture: one line per domain
            body = _fit_summary_html(df, html.escape(domain)) if df is not None else f"<b>{html.escape(domain)}</b>: {html.escape(why)}"
            text += f"<div data-domain='{html.escape(domain)}'>{body}</div>"
        self.forecast = None
        if budget is not None:
            from workbench.runs.forecast import forecast_from_fit

            self.forecast = forecast_from_fit(f, budget, x=self.view.x, level=f.level)
            fc = self.forecast
            text += (f"<div>forecast at {fc['budget']:.4g} ({self.view.x}): {fc['pass_rate']:.4f} "
                     f"[{fc['lo']:.4f}, {fc['hi']:.4f}] <span data-horizon style='color:#555'>({html.escape(fc['horizon'])})</span></div>")
            if fc.get("verdict"):
                text += f"<div style='color:#555;font-size:90%'>{html.escape(fc['verdict'])}</div>"
        text += f"<div style='color:#555;font-size:90%'>forecast: {html.escape(f.forecast_used)}</div>"
        return text


def _fit_summary_html(f: Any, label: str) -> str:
    """One fit's parameters and intervals (a no-gain fit's flat level instead of nan)."""
    pct = f"{f.level:.0%}"
    if f.no_gain:  # B and C_mid are not identified: say so instead of printing nan
        text = (f"<b>{label}</b> ({f.n} points): no gain detected, flat at {f.A:.4f} [{f.A_ci[0]:.4f}, {f.A_ci[1]:.4f}] "
                f"({pct} CI); B, C_mid not identified")
    else:
        text = (f"<b>{label}</b> ({f.n} points, R&sup2; = {f.r2:.3f}): A = {f.A:.4f} [{f.A_ci[0]:.4f}, {f.A_ci[1]:.4f}], "
                f"B = {f.B:.3f} [{f.B_ci[0]:.3f}, {f.B_ci[1]:.3f}], "
                f"C_mid = {f.C_mid:.4g} [{f.C_mid_ci[0]:.4g}, {f.C_mid_ci[1]:.4g}] ({pct} CI)")
    if not f.converged:
        text += f"<div style='color:#a60'>not converged: {html.escape(f.reason)}</div>"
    return text
