"""workbench.widgets: the dashboard only (`session.dashboard()`, `Dashboard(RunView)`).

- dashboard: the live ipywidgets panel, updated from the kernel's event loop, and `to_svg`
  (offline rendering of its Altair chart by vl-convert)
- samples_view: its Samples tab (the kept completions: table, group view, two evaluations side
  by side) and health banner; samples_data: what they show, as typed values, testable without a browser

What it draws comes from elsewhere: the run's curve, fit and forecast from
`workbench.runs.view.RunView`, the chart from `workbench.scaling.charts.session_chart`.
"""
