"""The pipeline's depth: how many steps of rollouts run ahead of the trainer (`generation.max_ahead_steps`).

    lag = PipelineDepth.from_config(cfg)      # fixed (an int), or measured (auto)
    lag.generated(chunk.gen_seconds, groups)  # each chunk's generator seconds
    change = lag.trained(train_seconds)       # each step's trainer compute; a LagChange when the depth moves
    lag.depth                                 # 0: on-policy (generate after each step); n: n steps ahead

A fixed depth is the config's `max_ahead_steps`, capped by `recipe.off_policy.k`. With `auto` the
depth follows the measured time a step costs each side: G, the generators' seconds for one step's
groups (their busy seconds per group x prompts_per_step / num_generators: they run in parallel),
and T, the trainer's compute seconds per step (a skipped step, every group filtered out, counts
as 0 s; both moving averages over the last steps):

- T >= G, the trainer is the bottleneck: depth 0. The overlap could save at most G of each
  T + G seconds, and every step of lag costs learning per step (Measured: SmolLM2's step-8 pass
  rate 0.50 with 2 steps of lag, 0.56 with 1, 0.67 on-policy).
- G > T, generation is the bottleneck: depth ceil(G / T), capped by k. With more steps in flight
  the generators batch more prompts and the trainer never waits for a whole step.

A change needs the ratio past a margin (hysteresis), so noise in the timings does not flip it.
Before `warmup_steps` steps are measured the depth is 1 (the pipeline's usual overlap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

AUTO = "auto"


@dataclass(frozen=True)
class LagChange:
    """A new depth and why: the measured seconds per step of each side."""

    step: int
    old: int
    new: int
    gen_seconds: float  # G: the generators' seconds per step
    train_seconds: float  # T: the trainer's seconds per step

    @property
    def reason(self) -> str:
        g, t = self.gen_seconds, self.train_seconds
        if self.new == 0:
            why = f"the trainer is the bottleneck ({t:.2f} s a step against the generators' {g:.2f} s): no lag, on-policy"
        else:
            why = f"generation is the bottleneck ({g:.2f} s a step against the trainer's {t:.2f} s): {self.new} step(s) ahead"
        return f"generation.max_ahead_steps auto: {self.old} -> {self.new} at step {self.step}; {why}"


class PipelineDepth:
    """The depth the coordinator keeps (see the module docstring); pure: no Ray, no clocks."""

    def __init__(self, k: int, fixed: Optional[int], *, prompts_per_step: int, num_generators: int,
                 warmup_steps: int = 2, margin: float = 1.15, alpha: float = 0.5):  # fmt: skip
        self.k, self.fixed = max(1, k), fixed
        self.per_step, self.num_generators = prompts_per_step, max(1, num_generators)
        self.warmup_steps, self.margin, self.alpha = warmup_steps, margin, alpha
        self.depth = min(self.k, max(1, fixed)) if fixed is not None else 1
        self._gen_s = self._groups = 0.0  # generator seconds and groups since the last step
        self._g: Optional[float] = None  # moving averages: G and T
        self._t: Optional[float] = None
        self._steps = 0
        self.changes: list[LagChange] = []

    @classmethod
    def from_config(cls, cfg) -> "PipelineDepth":
        """A RunConfig's depth: `generation.max_ahead_steps` (an int or "auto") under `recipe.off_policy.k`."""
        value = cfg.generation.max_ahead_steps
        return cls(cfg.recipe.off_policy.k, None if value == AUTO else int(value),
                   prompts_per_step=cfg.train.prompts_per_step, num_generators=cfg.generation.num_generators)  # fmt: skip

    @property
    def auto(self) -> bool:
        return self.fixed is None

    def generated(self, seconds: float, groups: int) -> None:
        """A chunk came back: its generator's busy seconds and how many groups it held."""
        self._gen_s += max(0.0, seconds)
        self._groups += groups

    def _average(self, old: Optional[float], new: float) -> float:
        return new if old is None else self.alpha * new + (1 - self.alpha) * old

    def trained(self, train_seconds: float, step: int = 0) -> Optional[LagChange]:
        """A step was trained (its trainer compute seconds): update the averages and, with auto,
        return the change when the depth moves."""
        if self._groups > 0:
            g = self._gen_s / self._groups * self.per_step / self.num_generators
            self._g = self._average(self._g, g)
            self._gen_s = self._groups = 0.0
        # a skipped step (every group filtered) costs the trainer nothing: it counts as 0 s
        self._t = self._average(self._t, max(0.0, train_seconds))
        self._steps += 1
        if not self.auto or self._steps < self.warmup_steps or self._g is None:
            return None
        new = self._choose(self._g / self._t if self._t > 0 else math.inf)
        if new == self.depth:
            return None
        change = LagChange(step, self.depth, new, self._g, self._t)
        self.depth = new
        self.changes.append(change)
        return change

    def _choose(self, ratio: float) -> int:
        """The depth for G / T = `ratio`, with hysteresis around the current depth."""
        target = self.k if math.isinf(ratio) else min(self.k, max(1, math.ceil(ratio)))
        if self.depth == 0:
            return 0 if ratio <= self.margin else target
        if ratio < 1 / self.margin:
            return 0
        # move between non-zero depths only when the ratio is clearly past the boundary
        if target > self.depth and ratio <= self.depth * self.margin:
            return self.depth
        if target < self.depth and ratio >= (self.depth - 1) / self.margin:
            return self.depth
        return target

    @property
    def measured(self) -> tuple[Optional[float], Optional[float]]:
        """(G, T): the generators' and the trainer's seconds per step, as averaged."""
        return self._g, self._t

    def summary(self) -> dict:
        """summary.json's "pipeline": the setting, the depth at the end, the measured seconds and why."""
        return {"max_ahead_steps": AUTO if self.auto else self.fixed, "depth": self.depth,
                "gen_seconds_per_step": self._g, "train_seconds_per_step": self._t,
                "changes": len(self.changes), "reason": self.changes[-1].reason if self.changes else ""}  # fmt: skip

