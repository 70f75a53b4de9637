"""`eval:`: the validation evaluations whose pass rates are the curve, and their check."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.configtools import ConfigError


@dataclass
class EvalConfig:
    every_steps: int = 10
    """Evaluate the validation pass rate every this many steps (the points the sigmoid is fitted to);
    0: no evaluation in the run at all, and no evaluator (score its checkpoints afterwards, as
    benchmarks/bench_env_learning.py does: none then shares the machine with training)."""
    num_prompts: int = 200
    """Validation prompts per evaluation (per domain in a mix)."""
    samples_per_prompt: int = 4
    """Completions sampled per validation prompt; the pass rate is their mean (mean@k; the paper: 16)."""
    at_start: bool = True
    """Evaluate once at step 0, before training: the curve's R0."""

    @property
    def enabled(self) -> bool:
        """Whether the run evaluates at all (eval.every_steps > 0); without, it has no evaluator."""
        return self.every_steps > 0


def validate_eval(e: EvalConfig) -> None:
    """Counts at least one (every_steps: 0 turns evaluation off)."""
    if e.every_steps < 0:
        raise ConfigError(f"eval.every_steps: {e.every_steps} is negative; give a step interval, or 0 for no evaluation in the run")
    if e.num_prompts < 1 or e.samples_per_prompt < 1:
        raise ConfigError("eval.num_prompts and eval.samples_per_prompt must be >= 1")
