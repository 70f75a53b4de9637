"""An environment task's rollouts in a generator or evaluator: episodes batched turn by turn, as Completions.

    rollouts = EnvRollouts(task, tokenizer, settings, eos_id)       # once per worker (worker.py)
    outs, episodes = rollouts.run(examples, n, decode)              # n episodes per example, prompt-major
    stats = EnvStats.of(episodes)                                   # env/* metrics' sums (a chunk's; summed per step)
    turns = episode_turns(episodes[0], len(outs[0].prompt_tokens), tokenizer)   # the samples' turn-by-turn view

`decode(prompts, limits)` is the backend's sampler (worker._decode with the in-flight weight slot):
every round, each live episode's next turn is one prompt of one call (tasks/env/episode.run_batch),
so the episodes' turns decode together. An episode becomes one `Completion`: its prompt, then every
token after it with `sampled` True only where the policy sampled it (the trainer's loss mask:
engine/batch.py), the generator's log-probs and versions. The trainer runs a group's prompt once
(engine/model/forward.shared_prompt_hidden), so a group's completions get one prompt: the longest
prefix its episodes' prompts share; the rest of each prompt (a reset() text that differs between
instances) leads the completion as context, never trained.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Callable, Optional, Sequence

from workbench.engine.model.sampling import Completion
from workbench.tasks.env import EnvSettings, Episode, EpisodeRunner
from workbench.tasks.env.episode import SampleRequest
from workbench.tasks.env.task import env_row
from workbench.tasks.types import Example

Decode = Callable[[list[list[int]], list[int]], list[Completion]]


@dataclass
class EnvStats:
    """Sums over episodes that add up across a step's chunks: the `env/*` and `train/*_tokens` metrics' parts."""

    episodes: int = 0
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    errors: int = 0
    truncated: int = 0
    episode_tokens: int = 0
    sampled_tokens: int = 0
    env_tokens: int = 0
    prefix_cached: int = 0  # prompt tokens vLLM's prefix cache served (the worker sets them: worker._prefix_counts)
    prefix_prompt: int = 0  # prompt tokens its requests asked for
    first_error: str = ""

    @classmethod
    def of(cls, episodes: Sequence[Episode]) -> "EnvStats":
        s = cls()
        for ep in episodes:
            s.episodes += 1
            s.turns += ep.turns
            s.tool_calls += ep.tool_calls
            s.tool_errors += ep.tool_errors
            s.errors += ep.error is not None
            s.truncated += ep.truncated
            s.episode_tokens += len(ep.token_ids)
            s.sampled_tokens += ep.sampled_tokens
            s.env_tokens += ep.env_tokens
            if ep.error is not None and not s.first_error:
                s.first_error = ep.error
        return s

    def merged(self, other: "EnvStats") -> "EnvStats":
        out = EnvStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self) if f.name != "first_error"})
        out.first_error = self.first_error or other.first_error
        return out

    def metrics(self) -> dict[str, float]:
        """env/turns_mean (assistant turns per episode), env/tool_calls_mean, env/tool_errors, env/errors
        (episodes lost to an environment fault), env/truncated, env/episode_tokens_mean; on vLLM,
        gen/prefix_cache_hit: the share of the turns' prompt tokens its prefix cache served."""
        n = max(1, self.episodes)
        cache = {"gen/prefix_cache_hit": self.prefix_cached / self.prefix_prompt} if self.prefix_prompt else {}
        return {**cache, "env/turns_mean": self.turns / n, "env/tool_calls_mean": self.tool_calls / n,
                "env/tool_errors": float(self.tool_errors), "env/errors": float(self.errors),
                "env/truncated": float(self.truncated), "env/episode_tokens_mean": self.episode_tokens / n}  # fmt: skip


class EnvRollouts:
    """Runs an environment task's episodes for one worker (one runner: one tokenizer, one factory)."""

    def __init__(self, task: Any, tokenizer: Any, settings: EnvSettings, eos_id: int) -> None:
        self.runner = EpisodeRunner(task.env, tokenizer, settings, stop_ids=[eos_id])

    def run(self, examples: Sequence[Example], n: int, decode: Decode) -> tuple[list[Completion], list[Episode]]:
        """`n` episodes per example (prompt-major), each turn of every live episode decoded in one call."""
        rows = [env_row(ex) for ex in examples for _ in range(n)]

        def sample_many(requests: list[SampleRequest]) -> list[tuple]:
            outs = decode([r.ids for r in requests], [r.max_new_tokens for r in requests])
            return [(c.tokens, c.logprobs, c.versions) for c in outs]

        episodes = self.runner.run_batch(rows, sample_many)
        outs: list[Completion] = []
        for g in range(len(examples)):
            outs += group_completions(episodes[g * n : (g + 1) * n])
        return outs, episodes


def group_completions(episodes: Sequence[Episode]) -> list[Completion]:
    """One group's episodes as Completions sharing one prompt (see the module docstring)."""
    shared = _common_prefix([ep.token_ids[: ep.prompt_len] for ep in episodes])
    return [episode_completion(ep, shared) for ep in episodes]


def episode_completion(ep: Episode, prompt_len: Optional[int] = None) -> Completion:
    """The episode as a Completion whose prompt is its first `prompt_len` tokens (default: its own prompt)."""
    p = ep.prompt_len if prompt_len is None else prompt_len
    if not ep.token_ids:  # an episode that failed before its prompt: nothing to train (its group is dropped)
        return Completion(prompt_tokens=[], finished=False)
    p = max(1, min(p, len(ep.token_ids)))
    return Completion(
        prompt_tokens=list(ep.token_ids[:p]),
        tokens=list(ep.token_ids[p:]),
        logprobs=[0.0 if lp is None else float(lp) for lp in ep.logprobs[p:]],
        versions=list(ep.versions[p:]),
        sampled=[bool(m) for m in ep.mask[p:]],
        finished=ep.error is None and not ep.truncated,
    )


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """The longest prefix all non-empty `seqs` share (an episode that failed before its prompt has none)."""
    seqs = [s for s in seqs if s]
    if not seqs:
        return 0
    first, n = seqs[0], min(len(s) for s in seqs)
    for s in seqs[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return n


def episode_turns(ep: Episode, prompt_len: int, tokenizer: Any) -> str:
    """The episode after `prompt_len` as the samples show it, turn by turn: a JSON list of {"role",
    "text"}: each sampled run of tokens is an assistant turn (its text decoded from the ids sampled),
    each run of environment tokens the messages it rendered (their contents: a tool's result, the
    environment's reply); context before the first sampled token (a reset() text longer than the
    group's shared prompt) is the user's."""
    env_groups: list[tuple[str, str]] = []  # (role, text) of each run of non-assistant messages after the first turn
    started = False
    for m in ep.messages[ep.prompt_messages:]:
        if m.get("role") == "assistant":
            started = True
            env_groups.append(("", ""))
        elif started:
            role, text = env_groups[-1]
            env_groups[-1] = (role or str(m.get("role")), (text + "\n" if text else "") + str(m.get("content") or ""))
    env_groups = [g for g in env_groups if g[0]]
    turns, at, k, sampled = [], prompt_len, 0, False
    ids, mask = ep.token_ids, ep.mask
    while at < len(ids):
        end = at
        while end < len(ids) and mask[end] == mask[at]:
            end += 1
        if mask[at]:
            sampled = True
            turns.append({"role": "assistant", "text": tokenizer.decode(ids[at:end], skip_special_tokens=True)})
        elif not sampled:
            turns.append({"role": "user", "text": tokenizer.decode(ids[at:end], skip_special_tokens=True)})
        else:
            role, text = env_groups[k] if k < len(env_groups) else ("environment", tokenizer.decode(ids[at:end], skip_special_tokens=True))
            turns.append({"role": role, "text": text})
            k += 1
        at = end
    return json.dumps(turns)
