"""workbench.engine.model: model folders, loading, sampling, devices and dtypes."""
