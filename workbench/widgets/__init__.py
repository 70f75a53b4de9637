"""The notebook face of workbench, behind `workbench.Session`.

- dashboard: the live ipywidgets panel (`session.dashboard()`), updated from the kernel's event loop
- chart: the session chart (points, fit, band, forecast) and offline SVG rendering (vl-convert)
- report: the forecast at a budget, the fit's artifacts and MLflow metrics at run end
- runs: run folders, saved configs, the default config, recipe swaps
"""
