"""Compute and time accounting for a run: the x axis of every scaling curve.

- `compute/device_hours`: devices held by the generators and the trainer x wall time while the
  run is active (paused time excluded). A device is a GPU where an actor holds GPUs, else a CPU
  slot: on GPUs this is the paper's GPU-hours. Evaluation is not counted (as in the paper).
- `compute/flops`: 2N per generated token + (4N + 2T) per trained token: N = policy parameters
  (the forward 2N, the backward's activation gradients 2N), T = the parameters it computes weight
  gradients for (2T): all of them (6N) in full fine-tuning, the adapters alone with `model.lora`.
The counters are part of every checkpoint, so a resumed run continues the same curve.

Faults: the compute axis follows the surviving timeline. A run that goes back to a checkpoint (a
trainer worker died, or a driver restart resumed it) redoes the steps after it; the compute those
steps had spent, and the devices held while the trainer group restarted, are not on the axis, so
a run that survived a fault draws the same curve as one that had none (its A and B are the
recipe's, not the cluster's). What was thrown away is kept beside the axis, in `discarded_*`
(steps redone, device-hours, FLOPs), and summary.json reports it.
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
    discarded_steps: int = 0  # steps trained, then redone after going back to a checkpoint
    discarded_device_hours: float = 0.0  # their compute, plus devices held during restarts
    discarded_flops: float = 0.0

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


class TrainerClock:
    """The trainer's wall time (`Counters.trainer_wall_seconds`, from its first step on) and its
    waits for rollouts (`trainer_wait_seconds`), from the events the loop announces: a step sent,
    a step done, a pause. One per trainer timeline: a trainer restart starts a fresh one."""

    def __init__(self) -> None:
        self._start: float | None = None  # when the first step was sent
        self._base = 0.0  # trainer wall seconds of the timeline before this clock began (a resume)
        self._idle_since: float | None = None  # when the trainer's queue last ran empty

    def step_sent(self, c: Counters, queue_was_empty: bool) -> float:
        """A step was sent; returns the seconds the trainer had waited for it (0 unless its queue
        was empty), added to the waits."""
        now = time.monotonic()
        if self._start is None:
            self._start, self._base = now, c.trainer_wall_seconds
            return 0.0
        if not queue_was_empty or self._idle_since is None:
            return 0.0
        waited = now - self._idle_since
        c.trainer_wait_seconds += waited
        return waited

    def step_done(self, c: Counters, queue_empty: bool) -> None:
        """A step came back (`queue_empty`: none is queued behind it, so the trainer idles)."""
        now = time.monotonic()
        if queue_empty:
            self._idle_since = now
        if self._start is not None:  # the restored train_seconds are counted against this wall time
            c.trainer_wall_seconds = self._base + now - self._start

    def paused(self, seconds: float) -> None:
        """A pause is neither trainer time nor waiting: both marks move past it."""
        if self._start is not None:
            self._start += seconds
        if self._idle_since is not None:
            self._idle_since += seconds


def carry_discarded(kept: Counters, lost: Counters, lost_steps: int, restart_device_hours: float = 0.0) -> None:
    """Going back from `lost` (the counters when the fault hit) to `kept` (the checkpoint's):
    `kept` takes over what `lost` had discarded so far plus everything spent after the checkpoint."""
    kept.discarded_steps = lost.discarded_steps + max(0, int(lost_steps))
    kept.discarded_device_hours = (
        lost.discarded_device_hours + max(0.0, lost.device_hours - kept.device_hours) + max(0.0, restart_device_hours)
    )
    kept.discarded_flops = lost.discarded_flops + max(0.0, lost.flops - kept.flops)


def discarded_from_rows(kept: Counters, rows_after: list[dict]) -> None:
    """A resume after the driver died: the rows logged after the checkpoint are all that is left
    of the lost timeline; take its steps and compute from them (see `carry_discarded`)."""
    steps = {r["step"] for r in rows_after if "train/loss" in r or "train/skipped" in r}
    if not steps:
        return
    last = max(rows_after, key=lambda r: r.get("compute/device_hours") or 0.0)
    lost = Counters(**{**kept.to_dict(), "device_hours": float(last.get("compute/device_hours") or 0.0),
                       "flops": float(last.get("compute/flops") or 0.0)})  # fmt: skip
    carry_discarded(kept, lost, len(steps))


def discarded_metrics(c: Counters) -> dict[str, float]:
    return {
        "compute/discarded_steps": float(c.discarded_steps),
        "compute/discarded_device_hours": c.discarded_device_hours,
        "compute/discarded_flops": c.discarded_flops,
    }


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


def add_trained(c: Counters, tokens: int, samples: int, n_params: int, n_trainable: int | None = None) -> None:
    """`n_trainable`: the parameters with weight gradients (None: all, full fine-tuning)."""
    c.tokens_trained += tokens
    c.samples_trained += samples
    t = n_params if n_trainable is None else n_trainable
    c.flops += (4.0 * n_params + 2.0 * t) * tokens
