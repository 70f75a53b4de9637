"""Prompt sampler with the ScaleRL curriculum: epochs of shuffled prompts + No-Positive-Resampling.

Prompts are drawn epoch by epoch, each epoch a fresh shuffle of 0..num_prompts-1 that depends
only on (seed, epoch). A prompt whose pass rate reaches `retire_threshold` (0.9 in the paper)
is retired: it is skipped in every later draw. Prompts already handed out are not recalled.
Pure python, no torch; the whole state is a JSON-able dict.

The retired share is bounded (`max_retired_share`, recipe.npr_max_retired_share): once that share
of the prompts is retired, each new retirement returns the longest-retired prompt to the pool.
Unbounded, the rule eats a small training set (4,000 prompts for 12 epochs: 70% retired), the
policy then trains only on the prompts it still fails while validation measures all of them, and
the curve falls back; `share_warning()` says so once the share passes RETIRED_SHARE_WARNING.

    sampler = CurriculumSampler(len(dataset), seed=0)
    ids = sampler.next_prompts(48)
    ...generate, grade...
    sampler.update(pid, [True, False, ...])       # one call per finished group
    ckpt["sampler"] = sampler.state_dict()        # resume: sampler.load_state_dict(ckpt["sampler"])
"""

from __future__ import annotations

import collections
import random
from typing import Any, Literal, Sequence

from workbench.errors import UserError

STATE_VERSION = 1
# Past this share of retired training prompts a run warns (once) that the training distribution
# has drifted from validation's.
RETIRED_SHARE_WARNING = 0.25
# The default cap (recipe.npr_max_retired_share), below the warning. Measured on configs/demo.yaml,
# seeds 0-2 (benchmarks/bench_fallback.py, README "No-Positive-Resampling"): a cap of 0.25 fell back
# 3.2 standard errors on one seed, 0.1 passed all three with the best final pass rate of the arms.
NPR_MAX_RETIRED_SHARE = 0.1
# The paper retires prompts from a 53k-prompt set drawn a few times over. A run that draws its set
# more often than this (recipe.npr_max_epochs) runs without the rule: measured on
# configs/quickstart.yaml (4,000 prompts, 12.8 epochs, 3 seeds) the rule, even capped at 0.1, ended
# 0.03 below the rule off; on configs/demo.yaml (20,000 prompts, 4.5 epochs) the two tie.
NPR_MAX_EPOCHS = 8.0


def npr_off_reason(num_prompts: int, draws: int, max_epochs: float | None) -> str | None:
    """Why No-Positive-Resampling is off for a run that will draw `draws` prompts from a training set of
    `num_prompts` (more than `max_epochs` epochs); None when the rule applies (or max_epochs is None)."""
    if max_epochs is None or num_prompts <= 0 or draws / num_prompts <= max_epochs:
        return None
    return (f"No-Positive-Resampling is off for this run: its steps draw {draws / num_prompts:.1f} epochs of the "
            f"{num_prompts} training prompts, more than recipe.npr_max_epochs = {max_epochs:g}, and retiring the prompts "
            "it passes would leave it training on the few it still fails while validation measures all of them. "
            "Keep the rule with recipe.npr_max_epochs=null, or give it more prompts (task.num_train).")


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
    max_retired_share: at most this share of the prompts is retired at once; a retirement past it
      returns the longest-retired prompt to the pool (it retires again when it passes again).
      None: no bound (the paper's rule as written).
    """

    def __init__(
        self,
        num_prompts: int,
        *,
        seed: int,
        retire_threshold: float = 0.9,
        enabled: bool = True,
        pass_rate: Literal["latest", "running"] = "latest",
        max_retired_share: float | None = None,
    ) -> None:
        if int(num_prompts) != num_prompts or num_prompts < 1:
            raise UserError(f"CurriculumSampler: num_prompts must be a positive integer, got {num_prompts!r}")
        if not 0.0 < retire_threshold <= 1.0:
            raise UserError(f"CurriculumSampler: retire_threshold must be in (0, 1], got {retire_threshold}")
        if pass_rate not in ("latest", "running"):
            raise UserError(f"CurriculumSampler: pass_rate must be 'latest' or 'running', got {pass_rate!r}")
        if max_retired_share is not None and not 0.0 < max_retired_share <= 1.0:
            raise UserError(f"CurriculumSampler: max_retired_share must be in (0, 1] or None, got {max_retired_share}")
        self.num_prompts = int(num_prompts)
        self.seed = int(seed)
        self.retire_threshold = float(retire_threshold)
        self.enabled = bool(enabled)
        self.pass_rate = pass_rate
        self.max_retired_share = max_retired_share
        # at least one prompt may retire, so a tiny set still exercises the rule
        self.max_retired = self.num_prompts if max_retired_share is None else max(1, int(max_retired_share * self.num_prompts))
        self.epoch = 0
        self.position = 0  # index into the current epoch's order
        self.drawn = 0  # prompts handed out in total
        self.retired: set[int] = set()
        self._retire_order: collections.deque[int] = collections.deque()  # oldest retirement first
        self.returned = 0  # retired prompts sent back to the pool by the cap, in total
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
            while len(self.retired) >= self.max_retired:  # more than one only after a resume with a lower cap
                self._return_oldest()
            self.retired.add(pid)
            self._retire_order.append(pid)
            return True
        return False

    def _return_oldest(self) -> None:
        """The cap is reached: the longest-retired prompt goes back to the pool."""
        while self._retire_order and self._retire_order[0] not in self.retired:
            self._retire_order.popleft()  # stale: the set was changed from outside
        self.retired.discard(self._retire_order.popleft() if self._retire_order else min(self.retired))
        self.returned += 1

    def retired_share(self) -> float:
        return len(self.retired) / self.num_prompts

    def share_warning(self) -> str | None:
        """What the rule has removed, once the retired share passes RETIRED_SHARE_WARNING (the
        caller tells it once); None below it or with the rule off."""
        share = self.retired_share()
        if not self.enabled or share <= RETIRED_SHARE_WARNING:
            return None
        cap = "none" if self.max_retired_share is None else f"{self.max_retired_share:g}"
        return (
            f"No-Positive-Resampling has retired {len(self.retired)} of {self.num_prompts} training prompts "
            f"({share:.0%}): the run now trains only on the prompts it still fails sometimes, while validation "
            f"measures all of them, so the curve may fall back. Bound it with recipe.npr_max_retired_share="
            f"{NPR_MAX_RETIRED_SHARE:g} (the default; now {cap}), or turn the rule off (recipe.no_positive_resampling=false)."
        )

    def retirement(self) -> dict[str, Any]:
        """summary.json's "retirement": retired count and share, the cap, prompts returned by it."""
        return {
            "enabled": self.enabled,
            "retired": len(self.retired),
            "prompts": self.num_prompts,
            "retired_share": self.retired_share(),
            "max_retired_share": self.max_retired_share,
            "returned": self.returned,
        }

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
            "retired_fraction": self.retired_share(),
            "returned": float(self.returned),
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
            "retired": self._retired_in_order(),  # oldest retirement first: the cap returns them in this order
            "returned": self.returned,
            "history": [[pid, r[0], r[1], r[2]] for pid, r in sorted(self.history.items())],
        }

    def _retired_in_order(self) -> list[int]:
        ordered = [p for p in self._retire_order if p in self.retired]
        if len(set(ordered)) != len(ordered) or len(ordered) != len(self.retired):  # the set was changed from outside
            ordered = list(dict.fromkeys(ordered)) + sorted(self.retired - set(ordered))
        return ordered

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`; num_prompts must match (a different dataset cannot resume).

        The seed comes from the state (the current epoch's order depends on it); the threshold,
        `enabled`, `pass_rate` and the cap stay as constructed, so a resumed run may change its policy
        (a lowered cap returns the longest-retired prompts down to it at the next retirement; a
        sampler built disabled, e.g. a run resumed past recipe.npr_max_epochs, returns every prompt
        retired before the checkpoint to the pool, counted in `returned`).
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
        retired = [int(p) for p in state["retired"]] if self.enabled else []
        self.retired = set(retired)
        self._retire_order = collections.deque(retired)
        # a checkpoint from before the cap has no count; a disabled sampler gives back what was retired
        self.returned = int(state.get("returned", 0)) + len(state["retired"]) - len(retired)
        self.history = {int(h[0]): [float(h[1]), float(h[2]), float(h[3])] for h in state["history"]}
        self._order = self._epoch_order(self.epoch)
