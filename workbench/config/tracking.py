"""`tracking:`: MLflow (`TrackingConfig`) and Weights & Biases beside it (`WandbConfig`), and their check."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Literal, Optional

from workbench.configtools import ConfigError


@dataclass
class WandbConfig:
    project: Optional[str] = None
    """Also log the run to this Weights & Biases project (needs `pip install 'workbench[wandb]'`); null: no W&B."""
    entity: Optional[str] = None
    """W&B team or user; null: W&B's default for your login."""
    name: Optional[str] = None
    """The W&B run's display name; null: the run's name."""
    mode: Optional[Literal["online", "offline", "disabled"]] = None
    """null: $WANDB_MODE, else online when W&B's server answers, offline (files in <run>/wandb/, `wandb sync` them later) when not."""
    log_completions: bool = True
    """Log each step's kept samples (the `samples:` section's groups, and the evaluations') as a W&B table, `completions` and `val/completions`, as TRL's log_completions does."""


@dataclass
class TrackingConfig:
    mlflow: bool = True
    """Log `workbench run` to MLflow (params, every metric, the fit), so `workbench compare` and `workbench ui` find it; false: the run folder only. A Session logs unless tracking=False is passed."""
    experiment: str = "workbench"
    """MLflow experiment the run is logged under (what `workbench compare --experiment` reads)."""
    tracking_uri: Optional[str] = None
    """MLflow store; null: $MLFLOW_TRACKING_URI, else the SQLite file mlflow.db in the project."""
    run_id: Optional[str] = None
    """The MLflow run to log into (set by the session or sweep that created it)."""
    parent_run_id: Optional[str] = None
    """The parent MLflow run (a sweep's), set by the sweep."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """Weights & Biases beside MLflow: the same metrics, the config and the fit files (`tracking.wandb: {project: NAME}`)."""


def validate_tracking(t: TrackingConfig) -> None:
    """A W&B project only where the wandb package is installed."""
    if t.wandb.project and importlib.util.find_spec("wandb") is None:
        raise ConfigError("tracking.wandb.project is set but the wandb package is not installed: "
                          "pip install 'workbench[wandb]' (or remove tracking.wandb)")
