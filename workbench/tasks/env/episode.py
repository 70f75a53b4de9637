"""One multi-turn episode, token-exact: the driver both generators call.

    runner = EpisodeRunner(load_env_factory("workbench.envs.calculator:CalculatorEnv"), tokenizer,
                           EnvSettings(max_turns=4, max_new_tokens=64, max_episode_tokens=1024))
    ep = runner.run(row, sample)     # sample(token_ids, max_new_tokens) -> (new_ids, logprobs[, versions])
    ep.token_ids, ep.mask, ep.logprobs, ep.reward, ep.passed, ep.messages, ep.error
    eps = runner.run_batch(rows, sample_many)   # many episodes, each turn's requests sampled in one batch

`episode(row)` is the driver itself, a generator: it yields a `SampleRequest` (the ids so far, the
most new tokens) and is sent what was sampled; `run` and `run_batch` drive it. The generators use
`run_batch`, so that the episodes' next turns are decoded together (a batch per turn, not per episode).

An episode is one token sequence: the prompt (rendered once), then each sampled turn exactly as
`sample` returned it, then each environment message as ONLY the suffix the chat template renders
after a finished assistant turn (render.env_suffix_ids). Sampled ids are decoded to read the tool
calls or to hand `step` its reply, never encoded again. The mask is 1 on sampled tokens, 0 on the
prompt and the environment's; the logprobs are the generator's, None elsewhere.

Budgets: `max_turns` sampled turns; `max_new_tokens` per turn; `max_episode_tokens` for the whole
context, prompt included. A turn that stops without its end-of-turn token (its calls are not run),
an environment message that would not fit, a turn left without room, or a conversation still going
after `max_turns` (the last turn's tool calls are not run, as in TRL, whose
max_tool_calling_iterations = k allows max_turns = k + 1): the episode ends `truncated`.
`get_reward()` returning None means it does not apply (TRL's NaN): no reward, no pass or fail.

Faults: an exception or a hang (`timeout_s`) in the factory, `reset`, `step`, `get_reward`, or a
tool's hang (and, with `tool_exceptions="drop"`, a tool's exception) ends the episode with `error`
set to its first message; the engine drops the group and counts it. Wrong calls (unreadable JSON,
unknown tool, wrong arguments) and, by default, a tool's exception are the model's to read: they go
back as the tool's result, as in TRL, and cost a turn.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Literal, Optional, Sequence

from workbench.errors import UserError, one_line
from workbench.tasks.env.deadline import EnvFault, call_with_deadline
from workbench.tasks.env.factory import EnvFactory
from workbench.tasks.env.render import (
    assistant_message, env_suffix_ids, prompt_ids, prompt_messages, template_format, tool_result_messages,
)  # fmt: skip
from workbench.tasks.env.tools import ToolResult, parse_reply, run_tool

Sampled = tuple  # (new ids, their log-probs) or (new ids, log-probs, the policy version of each)
Sample = Callable[[list[int], int], Sampled]


@dataclass(frozen=True)
class SampleRequest:
    """What an episode asks the generator for: continue `ids` by at most `max_new_tokens`."""

    ids: list[int]
    max_new_tokens: int


SampleMany = Callable[[list[SampleRequest]], list[Sampled]]


@dataclass(frozen=True)
class EnvSettings:
    """The episode's budgets and rules (the run config's `env:` section and generation.max_new_tokens)."""

    max_turns: int = 4
    """Assistant turns per episode at most."""
    max_new_tokens: int = 256
    """Tokens per sampled turn at most."""
    max_episode_tokens: int = 2048
    """The whole context at most: prompt, sampled turns and environment messages."""
    timeout_s: Optional[float] = 10.0
    """A call into the environment (factory, reset, step, a tool, get_reward) that takes longer is abandoned."""
    pass_threshold: float = 0.0
    """An episode passes when its reward is above this."""
    tool_exceptions: Literal["reply", "drop"] = "reply"
    """A tool that raises: its error goes back to the model (TRL) or the episode is errored."""
    prompt_key: str = "prompt"
    """The row's column holding the prompt (text or messages); absent: an empty user turn, as in TRL."""
    system_prompt: str = ""
    """task.system_prompt: the system turn where the row's prompt has none (the tools' text follows it)."""

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_new_tokens", "max_episode_tokens"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise UserError(f"env.{name} must be a whole number >= 1, got {getattr(self, name)!r}")
        if self.tool_exceptions not in ("reply", "drop"):
            raise UserError(f"env.tool_exceptions must be 'reply' or 'drop', got {self.tool_exceptions!r}")


@dataclass
class EpisodeTokens:
    """The episode as token ids with, per token, who wrote it and the generator's log-prob."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[Optional[float]] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    """The policy version that sampled each token; context tokens carry the last sampled token's, -1
    before any (no version: the trainer's staleness and the samples' version read only versions >= 0)."""

    def add_context(self, ids: Sequence[int]) -> None:
        """Prompt or environment tokens: context, never trained."""
        self.ids.extend(int(i) for i in ids)
        self.mask.extend([0] * len(ids))
        self.logprobs.extend([None] * len(ids))
        self.versions.extend([self.versions[-1] if self.versions else -1] * len(ids))

    def add_sampled(self, ids: Sequence[int], logprobs: Sequence[float], versions: Optional[Sequence[int]] = None) -> None:
        """Tokens the policy sampled, as sampled, with one log-prob (and policy version) each."""
        if len(logprobs) != len(ids):
            raise ValueError(f"sample returned {len(ids)} token ids but {len(logprobs)} log-probs")
        if versions is not None and len(versions) != len(ids):
            raise ValueError(f"sample returned {len(ids)} token ids but {len(versions)} versions")
        if versions is None:  # a sampler that does not say: the last version in force
            versions = [max(self.versions[-1], 0) if self.versions else 0] * len(ids)
        self.ids.extend(int(i) for i in ids)
        self.mask.extend([1] * len(ids))
        self.logprobs.extend(float(x) for x in logprobs)
        self.versions.extend(int(v) for v in versions)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Episode:
    """A finished (or cut, or errored) episode."""

    token_ids: list[int]
    """Prompt, sampled turns and environment messages, in order."""
    mask: list[int]
    """1 on sampled tokens (trained), 0 on the prompt's and the environment's."""
    logprobs: list[Optional[float]]
    """The generator's log-prob of each sampled token; None on the others."""
    prompt_len: int
    """Tokens of the prompt (the tools' schema included): token_ids[:prompt_len]."""
    messages: list[dict]
    """The conversation: the prompt's messages, each assistant turn, each tool or environment message."""
    versions: list[int] = field(default_factory=list)
    """The policy version of each token (sampled tokens: the one that sampled it; see EpisodeTokens)."""
    prompt_messages: int = 0
    """How many of `messages` are the prompt's (a few-shot prompt holds assistant turns of its own)."""
    turns: int = 0
    """Assistant turns sampled."""
    tool_calls: int = 0
    """Calls the model wrote (wrong ones included)."""
    tool_errors: int = 0
    """Calls whose result was an error (unreadable, unknown tool, wrong arguments, the tool raised)."""
    tool_results: list[ToolResult] = field(default_factory=list)
    """Every call's result, in order."""
    truncated: bool = False
    """A budget cut the episode (max_new_tokens in a turn, max_episode_tokens, max_turns)."""
    reward: Optional[float] = None
    """get_reward(), or the sum of step's rewards; None for a tool environment without get_reward, or get_reward gave None."""
    passed: Optional[bool] = None
    """reward > pass_threshold; None when there is no environment reward."""
    error: Optional[str] = None
    """The first environment fault (one line); set: the engine drops the episode's group."""
    instance: Any = field(default=None, repr=False, compare=False)
    """The environment instance that ran the episode (reward functions get it as `environments`)."""

    @property
    def sampled_tokens(self) -> int:
        """Tokens the policy sampled (train/sampled_tokens)."""
        return sum(self.mask)

    @property
    def env_tokens(self) -> int:
        """Tokens the environment added after the prompt (train/env_tokens)."""
        return len(self.token_ids) - self.prompt_len - self.sampled_tokens

    @property
    def completion_ids(self) -> list[int]:
        """Everything after the prompt (the sample's `completion`), with `completion_mask`."""
        return self.token_ids[self.prompt_len:]

    @property
    def completion_mask(self) -> list[int]:
        return self.mask[self.prompt_len:]


class EpisodeRunner:
    """Runs episodes of one environment factory with one tokenizer (one per generator)."""

    def __init__(self, env: EnvFactory, tokenizer: Any, settings: EnvSettings = EnvSettings(),
                 stop_ids: Sequence[int] = ()) -> None:  # fmt: skip
        self.env = env
        self.tokenizer = tokenizer
        self.settings = settings
        self.format = template_format(tokenizer)
        self.schemas = env.schemas if env.kind == "tools" else ()
        self.stop_ids = set(stop_ids) or {tokenizer.eos_token_id}
        # the template must give an exact suffix before any episode runs (one line at start-up if not)
        if self.schemas:
            probe = tool_result_messages([ToolResult(name=env.tool_names[0], content="0")], self.format)
        else:
            probe = [{"role": "user", "content": "0"}]
        env_suffix_ids(tokenizer, probe, self.schemas, self.format, tuple(self.stop_ids))

    def _call(self, fn: Callable[..., Any], what: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return call_with_deadline(fn, self.settings.timeout_s, what, *args, **kwargs)
        except EnvFault:
            raise
        except Exception as e:  # noqa: BLE001 - the environment's code: its fault ends the episode
            raise EnvFault(f"{what} raised {type(e).__name__}: {one_line(e)}") from None

    def run(self, row: dict, sample: Sample) -> Episode:
        """One episode from a dataset row (every column reaches reset(**row), as in TRL)."""
        return self.run_batch([row], lambda reqs: [sample(r.ids, r.max_new_tokens) for r in reqs])[0]

    def run_batch(self, rows: Sequence[dict], sample_many: SampleMany) -> list[Episode]:
        """One episode per row, their turns interleaved: every round, each live episode's next
        request goes to `sample_many` in one list (one decode batch), in row order."""
        drivers = [self.episode(row) for row in rows]
        done: list[Optional[Episode]] = [None] * len(rows)
        waiting: dict[int, SampleRequest] = {}
        for i, d in enumerate(drivers):
            self._advance(i, d, None, waiting, done)
        while waiting:
            order = sorted(waiting)
            got = sample_many([waiting.pop(i) for i in order])
            if len(got) != len(order):
                raise ValueError(f"sample_many returned {len(got)} results for {len(order)} requests")
            for i, out in zip(order, got):
                self._advance(i, drivers[i], out, waiting, done)
        return done  # type: ignore[return-value]

    @staticmethod
    def _advance(i: int, driver: Generator, sent: Any, waiting: dict, done: list) -> None:
        try:
            waiting[i] = driver.send(sent) if sent is not None else next(driver)
        except StopIteration as stop:
            done[i] = stop.value

    def episode(self, row: dict) -> Generator[SampleRequest, Sampled, Episode]:
        """The episode of `row` as a generator: yields requests, is sent what was sampled, returns the Episode."""
        name = self.env.name
        ep = Episode(token_ids=[], mask=[], logprobs=[], prompt_len=0, messages=[])
        tokens = EpisodeTokens()
        step_rewards: list[float] = []
        try:
            instance = ep.instance = self._call(self.env.new, f"{name}()")
            observation = self._call(instance.reset, f"{name}.reset", **row)
            if observation is not None and not isinstance(observation, str):
                raise EnvFault(f"{name}.reset returned {type(observation).__name__}, not a string or None")
            if self.env.kind == "turns" and observation is None:
                raise EnvFault(f"{name}.reset returned None: a turn-based environment's reset returns its first observation")
            ep.messages = prompt_messages(row.get(self.settings.prompt_key), observation, self.schemas, self.format,
                                          self.settings.system_prompt)  # fmt: skip
            ep.prompt_messages = len(ep.messages)
            tokens.add_context(prompt_ids(self.tokenizer, ep.messages, self.schemas, self.format))
            ep.prompt_len = len(tokens)
            if ep.prompt_len >= self.settings.max_episode_tokens:  # nothing to sample: not a turn the policy lost
                raise EnvFault(f"the prompt is {ep.prompt_len} tokens (reset's text and the tools' schema included), "
                               f"not under env.max_episode_tokens = {self.settings.max_episode_tokens}")  # fmt: skip
            yield from self._turns(instance, tokens, ep, step_rewards)
            if self.env.has_reward:  # None: does not apply (TRL's NaN), the episode neither passes nor fails
                got = self._call(instance.get_reward, f"{name}.get_reward")
                ep.reward = None if got is None else _number(got, f"{name}.get_reward")
            elif self.env.kind == "turns":
                ep.reward = float(sum(step_rewards))
        except EnvFault as e:
            ep.error = str(e)
        ep.token_ids, ep.mask, ep.logprobs, ep.versions = tokens.ids, tokens.mask, tokens.logprobs, tokens.versions
        if ep.reward is not None and ep.error is None:
            ep.passed = ep.reward > self.settings.pass_threshold
        return ep

    def _turns(self, instance: Any, tokens: EpisodeTokens, ep: Episode,
               step_rewards: list[float]) -> Generator[SampleRequest, Sampled, None]:  # fmt: skip
        s = self.settings
        tools = self.env.bound_tools(instance)
        for turn in range(s.max_turns):
            room = min(s.max_new_tokens, s.max_episode_tokens - len(tokens))
            if room <= 0:
                ep.truncated = True
                return
            out = yield SampleRequest(list(tokens.ids), room)
            new_ids = [int(i) for i in out[0]][:room]
            versions = list(out[2])[: len(new_ids)] if len(out) > 2 else None
            tokens.add_sampled(new_ids, list(out[1])[: len(new_ids)], versions)
            ep.turns += 1
            finished = bool(new_ids) and new_ids[-1] in self.stop_ids
            # decoded to be read, never encoded again
            text = self.tokenizer.decode(new_ids[:-1] if finished else new_ids, skip_special_tokens=False)
            last_turn = turn == s.max_turns - 1
            if self.env.kind == "turns":
                ep.messages.append({"role": "assistant", "content": text})
                reply = self._call(instance.step, f"{self.env.name}.step", text)
                observation, reward, done = _step_result(reply, self.env.name)
                step_rewards.append(reward)
                if done or observation is None:
                    return
                env_messages = [{"role": "user", "content": observation}]
            else:
                parsed = parse_reply(text, self.schemas)
                ep.messages.append(assistant_message(text, parsed, self.format))
                if not parsed.calls:
                    ep.truncated = not finished
                    return
                if not finished or last_turn:  # calls in a cut turn, or in the last turn (as TRL), are not run
                    ep.truncated = True
                    return
                results = [run_tool(tools, c, timeout_s=s.timeout_s, tool_exceptions=s.tool_exceptions)
                           for c in parsed.calls]
                ep.tool_calls += len(results)
                ep.tool_errors += sum(r.error for r in results)
                ep.tool_results.extend(results)
                env_messages = tool_result_messages(results, self.format)
            if not finished or last_turn:
                ep.truncated = True
                return
            suffix = env_suffix_ids(self.tokenizer, env_messages, self.schemas, self.format, tuple(self.stop_ids))
            if len(tokens) + len(suffix) >= s.max_episode_tokens:  # no room for the message and a reply
                ep.truncated = True
                return
            tokens.add_context(suffix)
            ep.messages.extend(env_messages)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise EnvFault(f"{what} returned {value!r:.60}, not a finite number")
    return float(value)


def _step_result(reply: Any, name: str) -> tuple[Optional[str], float, bool]:
    if not isinstance(reply, (tuple, list)) or len(reply) != 3:
        raise EnvFault(f"{name}.step returned {reply!r:.60}, not (observation, reward, done)")
    observation, reward, done = reply
    if observation is not None and not isinstance(observation, str):
        raise EnvFault(f"{name}.step returned an observation of type {type(observation).__name__}, not a string or None")
    return observation, _number(reward, f"{name}.step's reward"), bool(done)
