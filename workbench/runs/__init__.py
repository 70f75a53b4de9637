"""workbench.runs: the run record, written by the engine and read by everyone (no Ray needed).

    folder      where a run lives and how it was configured: resolve_config (a new run's config),
                run_folder, saved_config, read_summary, with_max_steps, attached_config
    checkpoint  the checkpoint store of a run folder
    view        RunView: one run's rows -> curve, history, fit, forecast, chart, status
    report      THE fit of a run's curve (fit_curves: the R0 rule), the backtest, and the one layout
                of fit artifacts in the run folder (fit.json, backtest.json, fit.html, fit.png)
    forecast    a fit's forecast at a compute budget (pass rate, band, scaling-gain verdict)
    fits        fit and compare several runs read back from MLflow (`workbench compare`, sweeps)
    by_setting  runs that differ in one setting, loaded and fitted for `workbench predict` (predict_config)
    liveness    a run's heartbeat, and ending the MLflow runs of drivers that died (mark_dead_runs)
    stop_request  a sweep asking a run to stop: the file protocol, both sides (StopWatch: the run's)

Below it: tracking (metrics.jsonl and MLflow I/O), config, scaling. Above it: the engine, which
writes the record, and the notebook face (session, widgets, sweep), which reads it.
"""
