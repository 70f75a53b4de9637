"""How new weights reach the generators: the one owner of the policy versions and the push policy.

`WeightSync` holds the policy version (optimizer updates applied by the trainer), the version
last pushed to the generators, the weights of each, and the rule for when to push:

- `pipeline` (PipelineRL-k): after every trainer step, fire and forget; the generators take the
  new weights between two decode steps, mid-sequence.
- `sync`: after every step, waiting until every generator holds them, so the next round is
  generated entirely by the new policy.
- `ppo-off-policy`: only once the round (k steps) is trained, waiting as for `sync`.

The coordinator reports each trainer step to it and asks it for the weights to validate. The
version has one maker, the trainer (optimizer updates applied, checkpointed with them; each step
reports it as `policy/version`); WeightSync records that number and never counts on its own, so
the two cannot drift apart (a step that reports a version the run does not expect is an error):

    sync = WeightSync(generators, algorithm="pipeline")
    sync.trained(weights_ref, 7, round_done=False) # one optimizer step -> version 7 (None: skipped): maybe push
    sync.resync(rank)                             # a generator restarted: give it the pushed weights
    sync.reload(weights_ref, version)             # the trainer restarted from a checkpoint (or a resume):
                                                  # every generator is forced back to that version
    sync.latest, sync.version                     # the newest weights and their version (validation)

A reload is forced: the generators drop whatever newer weights they hold, so the version each
token records stays the trainer's step count after a trainer restart. Weights travel as one
Ray ObjectRef per push (`trainer.get_weights()` / a train step's second return value); how
they travel changes here and nowhere else.
"""

from __future__ import annotations

from typing import Any, Optional

ALGORITHMS = ("pipeline", "ppo-off-policy", "sync")


class WeightSync:
    """Versions, latest weights and push policy of one run; see the module docstring."""

    def __init__(self, generators: list, algorithm: str):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown off-policy algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")
        self.generators = generators
        self.algorithm = algorithm
        self.version = 0  # optimizer updates applied by the trainer
        self.pushed_version = 0  # the version the generators were last sent
        self.latest: Optional[Any] = None  # the newest weights (None: the initial ones)
        self._pushed: Optional[Any] = None  # the weights last sent (a restarted generator gets these)

    @property
    def in_flight(self) -> bool:
        """Pipeline: pushes land mid-sequence and the coordinator does not wait for them."""
        return self.algorithm == "pipeline"

    def due(self, round_done: bool) -> bool:
        """Whether newer weights should go out now: after every step, except that
        ppo-off-policy waits until its round of k steps is trained."""
        return self.version > self.pushed_version and (self.algorithm != "ppo-off-policy" or round_done)

    def trained(self, weights: Optional[Any], version: int, *, round_done: bool) -> bool:
        """One trainer step finished with `weights` at the trainer's `version` (None: the update was
        skipped and the version stays); push them when the policy says so. Returns True when a
        push went out."""
        expected = self.version + (weights is not None)
        if int(version) != expected:
            raise RuntimeError(f"the trainer reports policy version {version} after this step, but the run's "
                               f"weights are at version {self.version} (expected {expected})")  # fmt: skip
        if weights is not None:
            self.version = expected
            self.latest = weights
        if not self.due(round_done):
            return False
        self._push(self.latest, self.version, force=False)
        return True

    def resync(self, rank: int) -> None:
        """Generator `rank` restarted with the initial weights: send it what the others hold."""
        if self._pushed is not None:
            self._send([self.generators[rank]], self._pushed, self.pushed_version, force=False, wait=False)

    def reload(self, weights: Any, version: int) -> None:
        """The trainer (re)started from a checkpoint at `version`: it is the policy now, and every
        generator loads it under that version, even those holding a newer one; waits for all."""
        self.version = int(version)
        self.latest = weights
        self._push(weights, self.version, force=True)

    def _push(self, weights: Any, version: int, *, force: bool) -> None:
        self._send(self.generators, weights, version, force=force, wait=force or not self.in_flight)
        self.pushed_version = version
        self._pushed = weights

    def _send(self, generators: list, weights: Any, version: int, *, force: bool, wait: bool) -> None:
        """The transport: one `set_weights` call per generator actor (the weights go as one ObjectRef)."""
        import ray

        refs = [g.set_weights.remote(weights, version, force) for g in generators]
        if wait:
            ray.get(refs)
