"""workbench.tracking: where runs are recorded (MLflow) and how they are read back.

    sink          MetricSink protocol, JsonlSink (metrics.jsonl, always on), AppendOnlySink (live, and
                  reconciled after a restart, for a store that cannot take points back: MLflow over http, W&B)
    store         tracking URI resolution, ensure_experiment / create_run / end_run (SQLite-safe)
    mlflow_sink   MlflowSink: the MetricSink for MLflow, usable inside Ray actors and kernels
    wandb_sink    WandbSink: the same for Weights & Biases (`tracking.wandb`), offline without a network
    wandb_log     reads a W&B run's own transaction log (.wandb files): what W&B holds, for a resume and the tests
    queries       runs_frame (one row per run), run_curve (metric vs compute, joined on step)
    run_tracking  a session's MLflow run: open_run, failed_if_raises, log_fit / log_fit_error, fit_metrics
    cli           `workbench compare` (its fits: workbench.runs.fits);  cli_ui: `workbench ui` (the MLflow UI)

The recording layer: below workbench.runs (the run record reads metrics.jsonl through `sink`) and
the engine (which logs through the sinks).

Importing this package loads nothing heavy; MLflow is imported by the modules that need it.
"""
