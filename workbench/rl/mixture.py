"""Prompt sampling over a task mixture: domains drawn by weight, one curriculum per domain.

    sampler = MixtureSampler({"math": [0, 1, 2], "code": [3, 4]}, {"math": 0.5, "code": 0.5}, seed=0)
    ids = sampler.next_prompts(16)        # global prompt ids (positions in task.train)
    sampler.update(pid, [True, False])    # routed to that prompt's domain curriculum
    state = sampler.state_dict()          # JSON-able; load_state_dict restores the exact future draws

Each draw picks a domain with probability proportional to its weight (the uniform number of draw
`n` depends only on (seed, n), so a resumed run draws the same domains), then takes the next
prompt of that domain's own `CurriculumSampler`: epochs of shuffles with No-Positive-Resampling
per prompt, exactly as in a single-task run (the retired-share cap bounds each domain's share). A domain whose prompts are all retired drops out and
the others share its weight; when every domain is exhausted, `AllPromptsRetiredError`. A source
with no training prompts (HumanEval as a validation set) is never drawn, only validated.

`make_sampler(task, ...)` returns a plain `CurriculumSampler` for a single task (unchanged
behaviour and checkpoint format) and a `MixtureSampler` for a mixed one. Pure Python, no torch.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from workbench.errors import UserError
from workbench.rl.sampler import AllPromptsRetiredError, CurriculumSampler

MIX_STATE_VERSION = 1


class MixtureSampler:
    """Weighted domains over per-domain curricula; see the module docstring."""

    def __init__(
        self,
        members: dict[str, list[int]],
        weights: dict[str, float],
        *,
        seed: int,
        retire_threshold: float = 0.9,
        enabled: bool = True,
        max_retired_share: float | None = None,
    ) -> None:
        if not members or set(members) != set(weights):
            raise UserError(f"MixtureSampler: domains {sorted(members)} and weights {sorted(weights)} must match")
        if any(not ids for ids in members.values()) or any(weight <= 0 for weight in weights.values()):
            raise UserError("MixtureSampler: every domain needs prompts and a weight > 0")
        self.domains = list(members)
        self.members = {d: list(ids) for d, ids in members.items()}
        self.weights = dict(weights)
        self.seed = int(seed)
        self.enabled = bool(enabled)
        self.num_prompts = sum(len(v) for v in members.values())
        self.drawn = 0
        self.subs = {
            d: CurriculumSampler(len(ids), seed=self.seed + 7919 * i, retire_threshold=retire_threshold, enabled=enabled,
                                 max_retired_share=max_retired_share)
            for i, (d, ids) in enumerate(self.members.items())
        }
        # global prompt id -> (domain, local id)
        self._where = {g: (d, i) for d, ids in self.members.items() for i, g in enumerate(ids)}

    def _pick_domain(self) -> str:
        live = [d for d in self.domains if len(self.subs[d].retired) < self.subs[d].num_prompts]
        if not live:
            raise AllPromptsRetiredError(
                f"all {self.num_prompts} prompts of every domain are retired (No-Positive-Resampling): "
                "the curriculum is exhausted; stop training, add prompts or raise the threshold"
            )
        u = random.Random(f"workbench-mix:{self.seed}:{self.drawn}").random() * sum(self.weights[d] for d in live)
        for d in live:
            u -= self.weights[d]
            if u < 0:
                return d
        return live[-1]

    def next_prompts(self, n: int) -> list[int]:
        """The next `n` global prompt ids, each from a domain drawn by weight."""
        if int(n) != n or n < 0:
            raise UserError(f"next_prompts: n must be a non-negative integer, got {n!r}")
        out = []
        for _ in range(n):
            d = self._pick_domain()
            out.append(self.members[d][self.subs[d].next_prompts(1)[0]])
            self.drawn += 1
        return out

    def update(self, prompt_id: int, passes: Sequence[bool | float]) -> bool:
        """Record one group's results in its domain's curriculum; True if the prompt retired now."""
        if prompt_id not in self._where:
            raise UserError(f"update: prompt_id {prompt_id!r} is not a training prompt of this mixture")
        d, local = self._where[prompt_id]
        return self.subs[d].update(local, passes)

    def is_retired(self, prompt_id: int) -> bool:
        d, local = self._where[int(prompt_id)]
        return self.subs[d].is_retired(local)

    @property
    def retired(self) -> set[int]:
        return {self.members[d][i] for d, s in self.subs.items() for i in s.retired}

    def solvable_left(self) -> float:
        return sum(s.solvable_left() for s in self.subs.values())

    def pool_warning(self, per_step: int, steps_left: float = 4.0) -> str | None:
        """A domain's warning (its share of a step), named: the first domain being drained."""
        for d, s in self.subs.items():
            share = max(1, round(per_step * self.weights[d] / sum(self.weights.values())))
            if (warning := s.pool_warning(share, steps_left)) is not None:
                return f"domain {d!r}: {warning}"
        return None

    def share_warning(self) -> str | None:
        """The retired-share warning of the first domain past RETIRED_SHARE_WARNING, named."""
        for d, s in self.subs.items():
            if (warning := s.share_warning()) is not None:
                return f"domain {d!r}: {warning}"
        return None

    def retirement(self) -> dict[str, Any]:
        """The single-task "retirement" over all domains, plus each domain's own under "domains"."""
        subs = {d: s.retirement() for d, s in self.subs.items()}
        retired = sum(r["retired"] for r in subs.values())
        first = next(iter(subs.values()))
        return {"enabled": self.enabled, "retired": retired, "prompts": self.num_prompts,
                "retired_share": retired / self.num_prompts, "max_retired_share": first["max_retired_share"],
                "returned": sum(r["returned"] for r in subs.values()), "domains": subs}  # fmt: skip

    def stats(self) -> dict[str, float]:
        """The single-task keys summed over domains (same names), plus `retired/<domain>` and
        `retired_fraction/<domain>`."""
        subs = [s.stats() for s in self.subs.values()]
        seen = sum(st["prompts_seen"] for st in subs)
        gens = sum(r[0] for s in self.subs.values() for r in s.history.values())
        passes = sum(r[1] for s in self.subs.values() for r in s.history.values())
        out = {
            "epoch": min(st["epoch"] for st in subs),
            "prompts_drawn": float(self.drawn),
            "retired": float(len(self.retired)),
            "retired_fraction": len(self.retired) / self.num_prompts,
            "returned": sum(st["returned"] for st in subs),
            "active": float(self.num_prompts - len(self.retired)),
            "prompts_seen": float(seen),
            "pass_rate_seen": passes / gens if gens else 0.0,
        }
        out.update({f"retired/{d}": float(len(s.retired)) for d, s in self.subs.items()})
        out.update({f"retired_fraction/{d}": s.retired_share() for d, s in self.subs.items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": MIX_STATE_VERSION,
            "kind": "mixture",
            "seed": self.seed,
            "drawn": self.drawn,
            "domains": {d: {"num_prompts": len(self.members[d]), "state": s.state_dict()} for d, s in self.subs.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`; the domains and their sizes must match this mixture's."""
        if not isinstance(state, dict) or state.get("kind") != "mixture" or state.get("version") != MIX_STATE_VERSION:
            raise UserError("sampler state is not a task-mixture state: the run was started with another task config")
        if set(state["domains"]) != set(self.subs):
            raise UserError(f"sampler state is for domains {sorted(state['domains'])}, this mixture has {sorted(self.subs)}")
        self.seed = int(state["seed"])
        self.drawn = int(state["drawn"])
        for d, s in self.subs.items():
            s.load_state_dict(state["domains"][d]["state"])


def make_sampler(task: Any, *, seed: int, retire_threshold: float, enabled: bool, max_retired_share: float | None = None):
    """The prompt sampler for `task`: a `CurriculumSampler`, or a `MixtureSampler` for a mixed task."""
    if not getattr(task, "parts", None):
        return CurriculumSampler(len(task.train), seed=seed, retire_threshold=retire_threshold, enabled=enabled,
                                 max_retired_share=max_retired_share)
    members: dict[str, list[int]] = {}
    for i, ex in enumerate(task.train):
        members.setdefault(ex.domain, []).append(i)
    if not members:
        raise UserError("task.mix: no source has training prompts (a source with none, e.g. HumanEval, only validates)")
    # a source with no training prompts (HumanEval as a validation set) is only evaluated
    weights = {d: task.weights[d] for d in members}
    return MixtureSampler(members, weights, seed=seed, retire_threshold=retire_threshold, enabled=enabled,
                          max_retired_share=max_retired_share)
