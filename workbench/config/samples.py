"""`samples:`: the completions a run keeps in <run>/samples/ (and MLflow), and their check.

workbench/runs/samples.py writes, bounds and reads them back.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.configtools import ConfigError


@dataclass
class SamplesConfig:
    """The run config's `samples:` section."""

    groups_per_step: int = 2
    """Training groups kept per step in <run>/samples/: one passing and one failing where the step has both (0: none)."""
    val_cap: int = 256
    """Validation completions kept per evaluation (the first ones; 0: none)."""
    max_mb: float = 50.0
    """The samples folder's bound in MB: past it older steps are thinned (every 2nd, then 4th...); 0: keep no samples."""


def validate_samples(s: SamplesConfig) -> None:
    """`samples:` counts and the bound are not negative."""
    for key in ("groups_per_step", "val_cap", "max_mb"):
        if getattr(s, key) < 0:
            raise ConfigError(f"samples.{key} must be >= 0 (0 keeps none), got {getattr(s, key):g}")
