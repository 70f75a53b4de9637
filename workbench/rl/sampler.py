"""Prompt sampler with the ScaleRL curriculum: epochs of shuffled prompts + No-Positive-Resampling.

Prompts are drawn epoch by epoch, each epoch a fresh shuffle of 0..num_prompts-1 that depends
only on (seed, epoch). A prompt whose pass rate reaches `retire_threshold` (0.9 in the paper)
is retired for good: it is skipped in every later draw. Prompts already handed out are not
recalled. Pure python, no torch; the whole state is a JSON-able dict.

    sampler = CurriculumSampler(len(dataset), seed=0)
    ids = sampler.next_prompts(48)
    ...generate, grade...
    sampler.update(pid, [True, False, ...])       # one call per finished group
    ckpt["sampler"] = sampler.state_dict()        # resume: sampler.load_state_dict(ckpt["sampler"])
"""

from __future__ import annotations

import random
from typing import Any, Literal, Sequence

from workbench.errors import UserError

STATE_VERSION = 1


class AllPromptsRetiredError(UserError):
    """Every prompt has been retired by No-Positive-Resampling: the curriculum is exhausted."""


class CurriculumSampler:
    """Epoch-shuffled prompt ids with No-Positive-Resampling (NPR).

    pass_rate: which pass rate is compared with `retire_threshold`:
      "latest" (default): the pass rate of the prompt's most recent group. Chosen because a
        group measures the CURRENT policy; the paper retires a prompt once the policy solves
        it (>= 0.9), and a cumulative mean would keep a prompt the policy has since mastered
        because of failures under older weights. With one group per prompt per epoch (the
        usual case) both definitions agree on the first visit.
      "running": the mean over all of the prompt's recorded generations so far.
    enabled=False records results (for stats) but never retires anything.
    """

    def __init__(
        self,
        num_prompts: int,
        *,
        seed: int,
        retire_threshold: float = 0.9,
        enabled: bool = True,
        pass_rate: Literal["latest", "running"] = "latest",
    ) -> None:
        if int(num_prompts) != num_prompts or num_prompts < 1:
            raise UserError(f"CurriculumSampler: num_prompts must be a positive integer, got {num_prompts!r}")
        if not 0.0 < retire_threshold <= 1.0:
            raise UserError(f"CurriculumSampler: retire_threshold must be in (0, 1], got {retire_threshold}")
        if pass_rate not in ("latest", "running"):
            raise UserError(f"CurriculumSampler: pass_rate must be 'latest' or 'running', got {pass_rate!r}")
        self.num_prompts = int(num_prompts)
        self.seed = int(seed)
        self.retire_threshold = float(retire_threshold)
        self.enabled = bool(enabled)
        self.pass_rate = pass_rate
        self.epoch = 0
        self.position = 0  # index into the current epoch's order
        self.drawn = 0  # prompts handed out in total
        self.retired: set[int] = set()
        # prompt id -> [generations seen, passes (sum), pass rate of the latest group]
        self.history: dict[int, list[float]] = {}
        self._order = self._epoch_order(self.epoch)

    def _epoch_order(self, epoch: int) -> list[int]:
        # A str seed is hashed with SHA-512 by `random`: stable across processes and Python versions.
        order = list(range(self.num_prompts))
        random.Random(f"workbench-curriculum:{self.seed}:{epoch}").shuffle(order)
        return order

    def next_prompts(self, n: int) -> list[int]:
        """The next `n` prompt ids, crossing epoch boundaries and skipping retired prompts."""
        if int(n) != n or n < 0:
            raise UserError(f"next_prompts: n must be a non-negative integer, got {n!r}")
        out: list[int] = []
        while len(out) < n:
            if len(self.retired) >= self.num_prompts:
                raise AllPromptsRetiredError(
                    f"all {self.num_prompts} prompts are retired (pass rate >= {self.retire_threshold}); "
                    "the curriculum is exhausted: stop training, add prompts or raise the threshold"
                )
            if self.position >= len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._epoch_order(self.epoch)
            pid = self._order[self.position]
            self.position += 1
            if pid not in self.retired:
                out.append(pid)
                self.drawn += 1
        return out

    def update(self, prompt_id: int, passes: Sequence[bool | float]) -> bool:
        """Record one group's results (bools or pass scores in [0, 1]); True if the prompt retired now."""
        if int(prompt_id) != prompt_id or not 0 <= prompt_id < self.num_prompts:
            raise UserError(f"update: prompt_id {prompt_id!r} is not in [0, {self.num_prompts})")
        values = [float(p) for p in passes]
        if not values:
            raise UserError(f"update: prompt {prompt_id} got an empty group of results")
        if any(not 0.0 <= v <= 1.0 for v in values):
            raise UserError(
                f"update: passes for prompt {prompt_id} must be bools or scores in [0, 1] "
                f"(convert +-1 rewards with r > 0), got {values[:8]}"
            )
        pid = int(prompt_id)
        rec = self.history.setdefault(pid, [0.0, 0.0, 0.0])
        rec[0] += len(values)
        rec[1] += sum(values)
        rec[2] = sum(values) / len(values)
        rate = rec[2] if self.pass_rate == "latest" else rec[1] / rec[0]
        if self.enabled and pid not in self.retired and rate >= self.retire_threshold:
            self.retired.add(pid)
            return True
        return False

    def is_retired(self, prompt_id: int) -> bool:
        return int(prompt_id) in self.retired

    def solvable_left(self) -> float:
        """How many prompts the policy can still learn from: prompts that have had at least one
        correct sample and are not retired, plus the unseen prompts in the proportion of seen ones
        that were ever solved. A prompt never solved counts as unsolvable (capped answers, wrong
        labels): counting it as active hides a pool that No-Positive-Resampling is draining."""
        solved = {pid for pid, r in self.history.items() if r[1] > 0}
        seen = len(self.history)
        unseen = self.num_prompts - seen
        share = len(solved) / seen if seen else 1.0
        return len(solved - self.retired) + share * unseen

    def pool_warning(self, per_step: int, steps_left: float = 4.0) -> str | None:
        """The warning to give when fewer than `steps_left` steps' worth of solvable prompts remain
        and retirement (not a young policy that solves little yet) is what drained them."""
        left = self.solvable_left()
        if not self.enabled or left >= steps_left * per_step or len(self.retired) <= left:
            return None
        return (
            f"No-Positive-Resampling has retired {len(self.retired)} of {self.num_prompts} training prompts; "
            f"about {left:.0f} solvable ones remain ({left / per_step:.1f} steps' worth; prompts never solved "
            "are not counted), so later steps repeat them or learn nothing. Add training prompts "
            "(task.num_train or a bigger dataset), raise recipe.resample_threshold, or stop here."
        )

    def stats(self) -> dict[str, float]:
        seen = len(self.history)
        gens = sum(r[0] for r in self.history.values())
        return {
            "epoch": float(self.epoch),
            "epoch_progress": self.position / len(self._order),
            "prompts_drawn": float(self.drawn),
            "retired": float(len(self.retired)),
            "retired_fraction": len(self.retired) / self.num_prompts,
            "active": float(self.num_prompts - len(self.retired)),
            "prompts_seen": float(seen),
            "pass_rate_seen": (sum(r[1] for r in self.history.values()) / gens) if gens else 0.0,
        }

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able state; `load_state_dict` restores the exact future sequence of prompts."""
        return {
            "version": STATE_VERSION,
            "num_prompts": self.num_prompts,
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
            "drawn": self.drawn,
            "retired": sorted(self.retired),
            "history": [[pid, r[0], r[1], r[2]] for pid, r in sorted(self.history.items())],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`; num_prompts must match (a different dataset cannot resume).

        The seed comes from the state (the current epoch's order depends on it); the threshold,
        `enabled` and `pass_rate` stay as constructed, so a resumed run may change its policy.
        """
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise UserError(f"sampler state: expected a dict with version {STATE_VERSION}, got {str(state)[:80]}")
        if state["num_prompts"] != self.num_prompts:
            raise UserError(
                f"sampler state is for {state['num_prompts']} prompts but this dataset has {self.num_prompts}"
            )
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.drawn = int(state["drawn"])
        self.retired = {int(p) for p in state["retired"]}
        self.history = {int(h[0]): [float(h[1]), float(h[2]), float(h[3])] for h in state["history"]}
        self._order = self._epoch_order(self.epoch)
