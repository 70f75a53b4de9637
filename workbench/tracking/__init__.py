"""workbench.tracking: where runs are recorded (MLflow) and how they are read back.

    sink          MetricSink protocol, JsonlSink (metrics.jsonl, always on)
    store         tracking URI resolution, ensure_experiment / create_run / end_run (SQLite-safe)
    mlflow_sink   MlflowSink: the MetricSink for MLflow, usable inside Ray actors and kernels
    queries       runs_frame (one row per run), run_curve (metric vs compute, joined on step)
    fits          fit and compare the sigmoid of several runs (used by compare and sweeps)
    cli           `workbench compare`;  cli_ui: `workbench ui` (the MLflow UI)

Importing this package loads nothing heavy; MLflow is imported by the modules that need it.
"""
