"""The dashboard's Samples tab and health banner: the run's kept completions, in ipywidgets.

    tab = SamplesTab(view)          # filters, then one of: the table, a group view, two evaluations side by side
    tab.show_step(20, kind="val")   # what a curve point's button or a health flag's button does
    banner = HealthBanner(on_open)  # banner.show(flags): one line per flag, a button to its step's samples

The values come from workbench/widgets/samples_data.py (pure, tested without a browser); this
module only draws them as HTML. Long texts are folded in `<details>` elements, which the browser
opens on a click with no script (the dashboard loads no JavaScript of its own).
"""

from __future__ import annotations

import html
from typing import Any, Callable, Optional

import ipywidgets as widgets
import pandas as pd

from workbench.runs.health import HealthFlag
from workbench.widgets.samples_data import (
    Completion, Group, SampleFrame, SampleQuery, SideBySide, filter_samples, fold_text, groups_matching,
    side_by_side, val_steps,
)  # fmt: skip

FOLD_LINES = 6  # a text of more display lines shows its start and end, the middle one click away
FOLD_WIDTH = 60  # columns a display line wraps at
TABLE_ROWS = 200  # the table's most rows; the filters narrow it
MODES = ("Table", "Group view", "Side by side")
_CELL = "padding:2px 6px;border-bottom:1px solid #eee;vertical-align:top"
_PRE = "<pre style='white-space:pre-wrap;word-break:normal;overflow-wrap:anywhere;margin:0;font-size:85%'>{}</pre>"
# an opened fold hides its "more" marker (a <style> in the widget's HTML applies to the page)
STYLE = "<style>details.wb-fold[open] .wb-more{display:none} details.wb-fold>summary{list-style:none}</style>"


def fold(text: str, lines: int = FOLD_LINES, width: int = FOLD_WIDTH) -> str:
    """`text` escaped, in <pre>s; past `lines` display lines (of `width` columns) its start and its
    last lines shown, the middle folded into a <details> (opened by a click, no script); the rule is
    samples_data.fold_text, the terminal's too."""
    f = fold_text(text, width=width, keep=lines)
    if not f.hidden:
        return _PRE.format(html.escape("\n".join(f.head)))
    return (f"<details class='wb-fold'><summary style='cursor:pointer'>{_PRE.format(html.escape(chr(10).join(f.head)))}"
            f"<span class='wb-more' style='color:#06c;font-size:85%'>&#9656; {len(f.hidden)} more lines</span></summary>"
            f"{_PRE.format(html.escape(chr(10).join(f.hidden)))}</details>{_PRE.format(html.escape(chr(10).join(f.tail)))}")  # fmt: skip


def _verdict(c: Completion) -> str:
    color = "#2a7" if c.passed else "#c00"
    name = "PASS" if c.passed else "FAIL"
    extra = "" if c.verdict in ("pass", "fail") else f" ({html.escape(c.verdict)})"
    return f"<b style='color:{color}'>{name}</b>{extra}"


def _facts(c: Completion) -> str:
    """Reward, each reward function's value, what the trainer trained it with (advantage, loss
    weight; or "not trained"), version, length, truncation."""
    bits = [f"reward {c.reward:+.2f}"] + [f"{html.escape(k)} {v:+.2f}" for k, v in c.rewards.items()]
    if c.advantage is not None:
        weight = f" · weight {c.loss_weight:.3g}" if c.loss_weight is not None else ""
        bits.append(f"<span class='wb-adv' data-trained='true'>adv {c.advantage:+.2f}{weight}</span>")
    elif c.trained is False:
        bits.append("<span class='wb-adv' data-trained='false' style='color:#888' title='dropped by the zero-variance "
                    "filter or as stale: no gradient from it'>not trained</span>")  # fmt: skip
    bits.append(f"v{c.version}" + (f", stale {c.staleness}" if c.staleness else ""))
    bits.append(f"{c.length} tok")
    bits += [f for f, on in (("truncated", c.truncated), ("interrupted", c.interrupted)) if on]
    return " · ".join(bits)


def table_html(df: pd.DataFrame, limit: int = TABLE_ROWS) -> str:
    """One row per completion: step, kind, domain, prompt and completion (folded), verdict and facts."""
    if df.empty:
        return "<div class='wb-samples-empty' style='color:#555;padding:1em'>no kept sample matches these filters</div>"
    from workbench.widgets.samples_data import completion

    head = "".join(f"<th style='{_CELL};text-align:left'>{h}</th>" for h in ("step", "kind", "prompt", "completion", "verdict"))
    rows = []
    for _, r in df.head(limit).iterrows():
        c = completion(r)
        dom = f"<div style='color:#666'>{html.escape(str(r['domain']))}</div>" if r["domain"] else ""
        rows.append(f"<tr class='wb-sample' data-passed='{str(c.passed).lower()}' data-step='{int(r['step'])}'>"
                    f"<td style='{_CELL}'>{int(r['step'])}</td><td style='{_CELL}'>{html.escape(str(r['kind']))}{dom}</td>"
                    f"<td style='{_CELL};max-width:220px'>{fold(str(r['prompt']), 3)}</td>"
                    f"<td style='{_CELL};min-width:260px'>{fold(c.text)}</td>"
                    f"<td style='{_CELL};font-size:85%'>{_verdict(c)}<div>{_facts(c)}</div></td></tr>")  # fmt: skip
    more = f"<div style='color:#555'>{len(df) - limit} more rows: narrow the filters</div>" if len(df) > limit else ""
    return (f"<div style='color:#555'>{len(df)} completion{'s' if len(df) != 1 else ''}</div>"
            f"<table class='wb-samples-table' style='border-collapse:collapse;width:100%'><tr>{head}</tr>{''.join(rows)}</table>{more}")


def _card(c: Completion, i: int) -> str:
    border = "#2a7" if c.passed else "#c00"
    return (f"<div class='wb-completion' style='flex:1 1 0;min-width:160px;border:1px solid #ddd;border-top:3px solid {border};"
            f"padding:4px;margin:2px'><div style='font-size:85%'>[{i}] {_verdict(c)}<br>{_facts(c)}</div>{fold(c.text)}</div>")


def _cards(cs: tuple[Completion, ...]) -> str:
    return "<div style='display:flex;flex-wrap:wrap'>" + "".join(_card(c, i) for i, c in enumerate(cs)) + "</div>"


def group_html(g: Group) -> str:
    """One prompt's completions side by side with their rewards and advantages."""
    return (f"<div class='wb-group'><div><b>{html.escape(g.label)}</b></div>{fold(g.prompt, 10)}"
            f"{_cards(g.completions)}</div>")


def side_html(s: SideBySide) -> str:
    """Two evaluations' completions of the same validation prompts, a column each."""
    if not s.pairs:
        return f"<div style='color:#555'>{html.escape(s.label_a)} and {html.escape(s.label_b)} kept no prompt in common</div>"
    n = len(s.pairs)
    out = [f"<div><b>{html.escape(s.label_a)} &rarr; {html.escape(s.label_b)}</b>: {n} prompts in both; {s.gained} pass "
           f"more often, {s.lost} less, {n - s.gained - s.lost} unchanged</div>"]  # fmt: skip
    for p in s.pairs[:TABLE_ROWS // 4]:
        pa, pb = sum(c.passed for c in p.a), sum(c.passed for c in p.b)
        col = "<div style='flex:1 1 0;min-width:240px'><div style='color:#555'>{}: {}/{} passed</div>{}</div>"
        out.append(f"<div class='wb-pair' style='border-top:1px solid #ccc;margin-top:6px'>"
                   f"<div>prompt {p.prompt_id} · change {p.change:+d}</div>{fold(p.prompt, 8)}<div style='display:flex'>"
                   f"{col.format(html.escape(s.label_a), pa, len(p.a), _cards(p.a))}"
                   f"{col.format(html.escape(s.label_b), pb, len(p.b), _cards(p.b))}</div></div>")  # fmt: skip
    return "".join(out)


def banner_html(flags: list[HealthFlag]) -> str:
    """The health banner's text: one line per flag naming its rule, step, metric and message."""
    lines = "".join(f"<div class='wb-flag' data-rule='{html.escape(f.rule)}'><b>{html.escape(f.rule)}</b> from step {f.step} "
                    f"(<code>{html.escape(f.metric)}</code>): {html.escape(f.message)}</div>" for f in flags)  # fmt: skip
    return (f"<div style='background:#fff3e0;border:1px solid #e65100;padding:4px 8px;color:#333'>"
            f"<b style='color:#e65100'>&#9888; run health: {len(flags)} flag{'s' if len(flags) != 1 else ''}</b>{lines}</div>")


class HealthBanner(widgets.VBox):
    """The run's health flags in view above the chart, each with a button to its step's samples."""

    def __init__(self, on_open: Callable[[int], None]):
        self._on_open = on_open
        self._text = widgets.HTML()
        self._buttons = widgets.HBox()
        self.flags: list[HealthFlag] = []
        super().__init__([self._text, self._buttons], layout=widgets.Layout(display="none"))
        self.add_class("workbench-health")

    def show(self, flags: list[HealthFlag]) -> None:
        if flags == self.flags:
            return
        self.flags = flags
        self.layout.display = "flex" if flags else "none"
        self._text.value = banner_html(flags) if flags else ""
        buttons = []
        for f in flags:
            b = widgets.Button(description=f"samples at step {f.step}", tooltip=f"{f.rule}: the samples kept at step {f.step}",
                               layout=widgets.Layout(width="auto"))
            b.on_click(lambda _, step=f.step: self._on_open(step))
            b.add_class("wb-flag-open")
            buttons.append(b)
        self._buttons.children = buttons


class SamplesTab(widgets.VBox):
    """Filters (step range, verdict, kind, domain, text), then the table, a group view or two evaluations side by side."""

    def __init__(self, view: Any):
        self.view = view
        self.frame = SampleFrame.read(view)
        self.note = ""  # what the last jump said (a flag's step thinned away)
        self._quiet = False
        self.steps = widgets.IntRangeSlider(description="steps", continuous_update=False, layout=widgets.Layout(width="340px"))
        self.verdict = widgets.Dropdown(options=["all", "passed", "failed"], description="verdict", layout=widgets.Layout(width="180px"))
        self.kind = widgets.Dropdown(options=["all", "train", "val"], description="kind", layout=widgets.Layout(width="160px"))
        self.domain = widgets.Dropdown(options=["all"], description="domain", layout=widgets.Layout(width="200px"))
        self.text = widgets.Text(placeholder="text in prompt or completion", description="search", continuous_update=False)
        self.mode = widgets.ToggleButtons(options=list(MODES))
        self.group = widgets.Dropdown(description="group", layout=widgets.Layout(width="520px"))
        self.eval_a = widgets.Dropdown(description="eval A", layout=widgets.Layout(width="200px"))
        self.eval_b = widgets.Dropdown(description="eval B", layout=widgets.Layout(width="200px"))
        self.out = widgets.HTML()
        self.out.add_class("wb-samples-out")
        for w in (self.steps, self.verdict, self.kind, self.domain, self.text, self.mode, self.group, self.eval_a, self.eval_b):
            w.observe(lambda _: self.render(), names="value")
        super().__init__([widgets.HBox([self.steps, self.verdict, self.kind]), widgets.HBox([self.domain, self.text]),
                          self.mode, self.group, widgets.HBox([self.eval_a, self.eval_b]), self.out])  # fmt: skip
        self.add_class("workbench-samples")
        self.refresh(force=True)

    def query(self) -> SampleQuery:
        verdict = {"passed": True, "failed": False}.get(self.verdict.value)
        kind = None if self.kind.value == "all" else self.kind.value
        domain = None if self.domain.value == "all" else self.domain.value
        return SampleQuery(steps=tuple(self.steps.value) if self.frame.df.size else None, passed=verdict, domain=domain,
                           text=self.text.value.strip(), kind=kind)  # fmt: skip

    def refresh(self, force: bool = False) -> None:
        """Re-read the samples when their files changed (a live run), keeping the filters."""
        frame = self.frame.fresh(self.view)
        if frame is self.frame and not force:
            return
        self.frame, df = frame, frame.df
        self._quiet = True
        try:
            steps = sorted({int(s) for s in df["step"]}) if not df.empty else [0]
            was = tuple(self.steps.value)
            whole = was == (self.steps.min, self.steps.max)
            # max first, at least the old min, so that min never passes max on the way (the slider refuses it)
            self.steps.max, self.steps.min = max(steps[-1], self.steps.min), steps[0]
            self.steps.max = steps[-1]
            self.steps.value = (steps[0], steps[-1]) if whole or force else (max(was[0], steps[0]), min(was[1], steps[-1]))
            doms = sorted({str(d) for d in df["domain"] if d}) if not df.empty else []
            self.domain.options = ["all"] + doms
            self.domain.layout.display = "flex" if doms else "none"
            vals = val_steps(df)
            for w, pick in ((self.eval_a, 0), (self.eval_b, -1)):
                keep = w.value
                w.options = vals
                w.value = keep if keep in vals else (vals[pick] if vals else None)
        finally:
            self._quiet = False
        self.render()

    def show_step(self, step: int, kind: Optional[str] = None) -> None:
        """The table at one step (the nearest kept one, said so, when `step` was thinned away)."""
        from workbench.widgets.samples_data import nearest_step

        self.refresh()
        steps = sorted({int(s) for s in self.frame.df["step"]}) if not self.frame.df.empty else []
        near = nearest_step(steps, step)
        self.note = "" if near in (step, None) else f"step {step} kept no samples; showing step {near}, the nearest kept"
        self._quiet = True
        try:
            if near is not None:
                self.steps.value = (near, near)
            self.kind.value = kind or "all"
            self.mode.value = MODES[0]
        finally:
            self._quiet = False
        self.render()

    def render(self) -> None:
        """Draw the chosen view; an error is shown in place (a widget callback's would go to the kernel's log)."""
        if self._quiet:
            return
        try:
            self._render()
        except Exception as e:  # noqa: BLE001 - the tab must keep going; say what broke
            self.out.value = f"<div style='color:#c00'>samples view error: {html.escape(f'{type(e).__name__}: {e}')}</div>"

    def _render(self) -> None:
        df = self.frame.df
        if df.empty:
            self.out.value = "<div style='color:#555;padding:1em'>this run kept no samples (samples.max_mb = 0, or not yet)</div>"
            return
        rows = filter_samples(df, self.query())
        mode = self.mode.value
        self.group.layout.display = "flex" if mode == MODES[1] else "none"
        self.eval_a.layout.display = self.eval_b.layout.display = "flex" if mode == MODES[2] else "none"
        note = f"<div class='wb-note' style='color:#a60'>{html.escape(self.note)}</div>" if self.note else ""
        if mode == MODES[0]:
            self.out.value = STYLE + note + table_html(rows)
        elif mode == MODES[1]:
            self.out.value = STYLE + note + self._group_html(rows)
        else:
            if self.eval_a.value is None or self.eval_b.value is None:
                self.out.value = "<div style='color:#555'>no evaluation kept its validation completions</div>"
                return
            q = self.query()  # the prompts the domain and text filters pick; the steps are the two evaluations'
            only = set(filter_samples(df, SampleQuery(domain=q.domain, text=q.text, kind="val"))["prompt_id"].tolist())
            self.out.value = STYLE + side_html(side_by_side(df, self.eval_a.value, df, self.eval_b.value, only=only))

    def _group_html(self, rows: pd.DataFrame) -> str:
        """The group picked among those the filters select (a filter picks groups; the view shows all of the group's completions)."""
        gs = groups_matching(self.frame.df, rows)
        keys = [(g.label, (g.step, g.kind, g.group)) for g in gs]
        self._quiet = True
        try:
            keep = self.group.value
            self.group.options = keys
            self.group.value = keep if keep in [k for _, k in keys] else (keys[0][1] if keys else None)
        finally:
            self._quiet = False
        if self.group.value is None:
            return table_html(rows)
        return group_html(next(g for g in gs if (g.step, g.kind, g.group) == self.group.value))  # built above, whole
