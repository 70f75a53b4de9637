"""Compute and time accounting for a run: the x axis of every scaling curve.

- `compute/device_hours`: devices held by the generators and the trainer x wall time while the
  run is active (paused time excluded). A device is a GPU where an actor holds GPUs, else a CPU
  slot: on GPUs this is the paper's GPU-hours. Evaluation is not counted (as in the paper).
- `compute/flops`: 2N per generated token + 6N per trained token (N = policy parameters).
The counters are part of every checkpoint, so a resumed run continues the same curve.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from workbench.config import RunConfig


def devices_held(cfg: RunConfig) -> float:
    r = cfg.resources
    gen = r.generator_gpus if r.generator_gpus > 0 else r.generator_cpus
    tr = r.trainer_gpus if r.trainer_gpus > 0 else r.trainer_cpus
    return cfg.generation.num_generators * gen + r.trainer_workers * tr


@dataclass
class Counters:
    device_hours: float = 0.0
    wall_seconds: float = 0.0  # active (unpaused) seconds
    tokens_generated: int = 0
    tokens_trained: int = 0
    samples_trained: int = 0
    flops: float = 0.0
    gen_seconds: float = 0.0  # summed over generators
    train_seconds: float = 0.0  # trainer forward/backward/optimizer
    trainer_wall_seconds: float = 0.0  # trainer busy-or-waiting since its first step
    weight_sync_seconds: float = 0.0
    trainer_wait_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


class Clock:
    """Advances `Counters.wall_seconds` and `device_hours` only while running."""

    def __init__(self, counters: Counters, devices: float):
        self.c = counters
        self.devices = devices
        self._last: float | None = None

    def start(self) -> None:
        self._last = time.monotonic()

    def pause(self) -> None:
        self.tick()
        self._last = None

    def tick(self) -> None:
        if self._last is None:
            return
        now = time.monotonic()
        dt = now - self._last
        self._last = now
        self.c.wall_seconds += dt
        self.c.device_hours += self.devices * dt / 3600.0


def compute_metrics(c: Counters, n_params: int) -> dict[str, float]:
    return {
        "compute/device_hours": c.device_hours,
        "compute/flops": c.flops,
        "compute/wall_seconds": c.wall_seconds,
        "tokens/generated": float(c.tokens_generated),
        "tokens/trained": float(c.tokens_trained),
        "samples/trained": float(c.samples_trained),
    }


def add_generated(c: Counters, tokens: int, n_params: int) -> None:
    c.tokens_generated += tokens
    c.flops += 2.0 * n_params * tokens


def add_trained(c: Counters, tokens: int, samples: int, n_params: int) -> None:
    c.tokens_trained += tokens
    c.samples_trained += samples
    c.flops += 6.0 * n_params * tokens
