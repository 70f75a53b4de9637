"""`eval:`: the validation evaluations whose pass rates are the curve, and their check."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.configtools import ConfigError


@dataclass
class EvalConfig:
    every_steps: int = 10
    """Evaluate the validation pass rate every this many steps (the points the sigmoid is fitted to)."""
    num_prompts: int = 200
    """Validation prompts per evaluation (per domain in a mix)."""
    samples_per_prompt: int = 4
    """Completions sampled per validation prompt; the pass rate is their mean (mean@k; the paper: 16)."""
    at_start: bool = True
    """Evaluate once at step 0, before training: the curve's R0."""


def validate_eval(e: EvalConfig) -> None:
    """Every count at least one."""
    if e.every_steps < 1 or e.num_prompts < 1 or e.samples_per_prompt < 1:
        raise ConfigError("eval.every_steps, eval.num_prompts and eval.samples_per_prompt must be >= 1")
