"""The run loop's prompt supply: which prompts each generation chunk gets, numbered.

- The sampler: one curriculum, or one per domain of a task mix (`rl/mixture.make_sampler`), with
  No-Positive-Resampling (NPR) switched off, with the reason, for a set drawn many times over
  (`rl/sampler.npr_off_reason`).
- The replay: prompts drawn before a checkpoint but not trained by it; drawn first after a resume
  or a trainer restart, so no prompt is skipped.
- NPR's warnings, each told once: a large retired share, and a solvable pool nearly drained.

The checkpoint (loop_checkpoint.py) holds the chunk counter, the sampler's state and the replay.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from workbench.config import RunConfig


class PromptSupply:
    """Numbered chunks of prompts for the generators, and what NPR says about the pool."""

    def __init__(self, cfg: RunConfig, task: Any):
        from workbench.rl.mixture import make_sampler
        from workbench.rl.sampler import npr_off_reason

        r = cfg.recipe
        # the rule is for a set drawn a few times over: off, with the reason, for one drawn more often
        # (resampling_off: why No-Positive-Resampling is off for this run; None when on, or not asked for)
        self.resampling_off: Optional[str] = npr_off_reason(
            len(task.train), cfg.train.max_steps * cfg.train.prompts_per_step, r.npr_max_epochs
        ) if r.no_positive_resampling else None  # fmt: skip
        self.sampler = make_sampler(  # one curriculum, or one per domain of a task mix
            task, seed=cfg.seed, retire_threshold=r.resample_threshold,
            enabled=r.no_positive_resampling and self.resampling_off is None, max_retired_share=r.npr_max_retired_share,
        )
        self.chunk_counter = 0  # the next chunk's id (it also seeds the chunk's sampling)
        self.replay: list[int] = []  # prompts drawn before a checkpoint but not yet trained
        self._warned_pool = self._warned_share = False

    def next_chunk(self, n: int) -> tuple[int, list[int]]:
        """(chunk id, `n` prompts): the replay first, then the sampler."""
        take, self.replay = self.replay[:n], self.replay[n:]
        prompts = take + (self.sampler.next_prompts(n - len(take)) if n > len(take) else [])
        cid = self.chunk_counter
        self.chunk_counter += 1
        return cid, prompts

    def saw(self, packed: Any) -> None:
        """The sampler learns each generated group's results (NPR retires what is always solved)."""
        for prompt_id, correct in packed.group_results():
            self.sampler.update(prompt_id, correct)

    def warn_if_draining(self, step: int, per_step: int, tell: Callable[[str], Any]) -> None:
        """Tell once when No-Positive-Resampling has nearly drained the prompts the policy can
        still learn from (rule: `CurriculumSampler.pool_warning`): the few left are then drawn over
        and over, and the policy tends to overfit them and collapse (seen here: 2-digit addition
        with 4,000 prompts collapsed after ~1,700 steps of 64)."""
        if not self._warned_share and (share := self.sampler.share_warning()) is not None:
            self._warned_share = True  # the retired share passed RETIRED_SHARE_WARNING (rl/sampler.py)
            tell(f"warning at step {step}: {share}")
        if self._warned_pool or (warning := self.sampler.pool_warning(per_step)) is None:
            return
        self._warned_pool = True
        tell(f"warning at step {step}: {warning}")

    def state(self, pending: list[int]) -> dict[str, Any]:
        """The checkpoint's part of the supply; `pending`: the prompts drawn but not yet trained."""
        return {"chunk_counter": self.chunk_counter, "sampler": self.sampler.state_dict(), "replay": pending}

    def load(self, state: dict[str, Any]) -> None:
        self.chunk_counter = int(state["chunk_counter"])
        self.sampler.load_state_dict(state["sampler"])
        self.replay = list(state.get("replay", []))
