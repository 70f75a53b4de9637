"""`health:`: the thresholds of the rules that flag a run going wrong, and their check.

workbench/runs/health.py runs the rules over a run's metric rows (its defaults are this section's).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.configtools import ConfigError


@dataclass
class HealthConfig:
    """The run config's `health:` section."""

    window: int = 5
    """Run health (workbench/runs/health.py): steps in each running median; a metric's early level is the median of its first window values."""
    mismatch_growth: float = 4.0
    """Flag the mismatch growing: train/mismatch_kl's running median above this x its early level and above mismatch_kl."""
    mismatch_kl: float = 0.01
    """The mismatch flag's floor: a running median of train/mismatch_kl below this never flags (growth from ~0 is noise)."""
    entropy_drop: float = 0.8
    """Flag entropy collapse: train/entropy's running median below (1 - this) x its start (the highest of its first window values), unless validation has risen above its first evaluation (by more than divergence and twice its noise): that is learning to answer."""
    length_growth: float = 3.0
    """Flag length running away: train/response_len's running median above this x its early level."""
    truncation_rate: float = 0.5
    """Flag truncation running away: train/truncation_rate's running median crossing above this from below (a run that starts above it arms the rule once it comes back under), unless validation has risen above its first evaluation."""
    grad_spike: float = 10.0
    """Flag a gradient-norm spike: train/grad_norm above this x the median of the window of steps before it."""
    zero_variance: float = 0.9
    """Flag nothing left to learn from: train/zero_variance_frac's running median crossing to this or above from below (a start there arms the rule once it comes back under)."""
    divergence: float = 0.05
    """Flag a reward hack or overfitting: since the best evaluation, val/pass_rate fell by more than this (at two evaluations in a row) while train/pass_rate's running median rose by more than this."""


def validate_health(h: HealthConfig) -> None:
    """`health:` thresholds a rule can act on."""
    if h.window < 1:
        raise ConfigError(f"health.window must be >= 1 (got {h.window})")
    for key in ("mismatch_growth", "length_growth", "grad_spike"):
        if not getattr(h, key) > 1:
            raise ConfigError(f"health.{key} must be > 1 (a factor over the metric's usual level), got {getattr(h, key):g}")
    for key in ("entropy_drop", "truncation_rate", "zero_variance", "divergence"):
        if not 0 < getattr(h, key) <= 1:
            raise ConfigError(f"health.{key} must be in (0, 1], got {getattr(h, key):g}")
    if not h.mismatch_kl >= 0:
        raise ConfigError(f"health.mismatch_kl must be >= 0, got {h.mismatch_kl:g}")
