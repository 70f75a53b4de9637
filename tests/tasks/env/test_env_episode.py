"""workbench/tasks/env/episode.py: the driver's turns, budgets, rewards and faults, with a scripted
`sample` and a small real BPE tokenizer (the token-exact property with real tokenizers is in
test_env_token_exact.py)."""

from __future__ import annotations

import json
import time

import pytest

from tests.tasks.env.env_helpers import QWEN_LIKE, tiny_tokenizer
from workbench.errors import UserError
from workbench.tasks.env import EnvSettings, EpisodeRunner, inspect_env, load_env_factory

CALC = load_env_factory("workbench.envs.calculator:CalculatorEnv")
ROW = {"prompt": "What is 47 + 38?", "answer": 85}


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(QWEN_LIKE)


def call(name: str, **args) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


class Script:
    """sample(): the next scripted reply's ids (+ EOS unless `cut`), log-probs -0.5 each."""

    def __init__(self, tok, replies, cut=()):
        self.tok, self.replies, self.cut, self.seen = tok, list(replies), set(cut), []

    def __call__(self, ids, max_new):
        i = len(self.seen)
        self.seen.append((len(ids), max_new))
        out = self.tok.encode(self.replies[i], add_special_tokens=False)
        if i not in self.cut:
            out = out + [self.tok.eos_token_id]
        return out[:max_new], [-0.5] * len(out[:max_new])


def run(tok, replies, env=CALC, row=ROW, cut=(), **settings):
    script = Script(tok, replies, cut)
    ep = EpisodeRunner(env, tok, EnvSettings(**{"max_new_tokens": 200, "max_episode_tokens": 4000, **settings})).run(row, script)
    return ep, script


def test_a_tool_episode_calls_submits_and_is_rewarded(tok):
    ep, _ = run(tok, [call("add", a=47, b=38), call("submit", answer=85), "The answer is 85."])
    assert ep.error is None and not ep.truncated
    assert (ep.turns, ep.tool_calls, ep.tool_errors) == (3, 2, 0)
    assert [r.content for r in ep.tool_results] == ["85", "Answer submitted."]
    assert ep.reward == 1.0 and ep.passed is True
    roles = [m["role"] for m in ep.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert ep.messages[1]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 47, "b": 38}}
    assert ep.sampled_tokens == sum(ep.mask) and ep.env_tokens > 0
    assert len(ep.token_ids) == len(ep.mask) == len(ep.logprobs)
    assert all((lp is None) == (m == 0) for lp, m in zip(ep.logprobs, ep.mask))


def test_a_wrong_answer_fails_and_wrong_calls_cost_a_turn_not_the_run(tok):
    ep, _ = run(tok, ['<tool_call>{"name": "add"</tool_call>', call("divide", a=1), call("submit", answer=84), "84"])
    assert ep.error is None and ep.tool_errors == 2 and ep.tool_calls == 3
    assert "not valid JSON" in ep.tool_results[0].content and "tool 'divide' not found" in ep.tool_results[1].content
    assert ep.reward == 0.0 and ep.passed is False
    assert ep.messages[1] == {"role": "assistant", "content": '<tool_call>{"name": "add"</tool_call>'}  # as written


def test_pass_threshold_decides(tok):
    ep, _ = run(tok, [call("submit", answer=85), "done"], pass_threshold=1.0)
    assert ep.reward == 1.0 and ep.passed is False


def test_max_turns_cuts_the_episode_and_the_last_turns_calls_are_not_run(tok):
    """As TRL (max_tool_calling_iterations = max_turns - 1): the calls of the last allowed turn are not run."""
    ep, script = run(tok, [call("add", a=47, b=38), call("submit", answer=85), "never"], max_turns=2)
    assert ep.turns == 2 and ep.truncated and len(script.seen) == 2
    assert ep.reward == 0.0 and ep.tool_calls == 1  # submit was not run
    assert ep.messages[-1]["role"] == "assistant"
    ep, _ = run(tok, [call("add", a=47, b=38), call("submit", answer=85), "Done."], max_turns=3)
    assert ep.reward == 1.0 and ep.tool_calls == 2 and not ep.truncated


def test_a_turn_cut_by_max_new_tokens_is_truncated_and_its_calls_are_not_run(tok):
    ep, script = run(tok, [call("submit", answer=85)], max_new_tokens=5)
    assert ep.truncated and ep.tool_calls == 0 and ep.reward == 0.0
    assert script.seen[0][1] == 5 and ep.sampled_tokens == 5


def test_max_episode_tokens_bounds_the_whole_context(tok):
    first, _ = run(tok, [call("add", a=47, b=38), "85"])
    prompt_len = first.prompt_len
    limit = prompt_len + 30
    ep, script = run(tok, [call("add", a=47, b=38), "85", "x"], max_episode_tokens=limit)
    assert ep.truncated and len(ep.token_ids) <= limit
    assert all(seen + room <= limit for seen, room in script.seen)


def test_the_turn_budget_shrinks_to_the_room_left(tok):
    free, _ = run(tok, [call("add", a=47, b=38), "85"], max_new_tokens=64)
    limit = len(free.token_ids) + 10  # room for the whole episode, but not for 64 more tokens in the last turn
    ep, script = run(tok, [call("add", a=47, b=38), "85"], max_new_tokens=64, max_episode_tokens=limit)
    (start1, room1), (start2, room2) = script.seen
    assert room1 == 64 and room2 == limit - start2 < 64
    assert start2 > start1 + room1 // 4  # the second turn sees the first and the tool's suffix
    assert ep.token_ids == free.token_ids and not ep.truncated


class Faulty:
    where = ""

    def reset(self, **row):
        if self.where == "reset":
            raise KeyError("answer")
        if self.where == "hang":
            time.sleep(5)
        return None

    def ping(self, x: int) -> str:
        """Ping.

        Args:
            x: A number.
        """
        if self.where == "tool-hang":
            time.sleep(5)
        return "pong"

    def get_reward(self) -> float:
        if self.where == "reward":
            raise RuntimeError("scorer down")
        return "high" if self.where == "reward-type" else 1.0


@pytest.mark.parametrize(
    "where, message",
    [
        ("reset", "Faulty.reset raised KeyError: 'answer'"),
        ("hang", "Faulty.reset did not return within 0.3 s"),
        ("tool-hang", "tool ping did not return within 0.3 s"),
        ("reward", "Faulty.get_reward raised RuntimeError: scorer down"),
        ("reward-type", "Faulty.get_reward returned 'high', not a finite number"),
    ],
)
def test_an_environment_fault_errors_the_episode_with_its_first_message(tok, where, message):
    cls = type("Faulty", (Faulty,), {"where": where})
    ep, _ = run(tok, [call("ping", x=1), "ok"], env=inspect_env(cls), timeout_s=0.3)
    assert ep.error is not None and ep.error.startswith(message)
    assert ep.passed is None


class Counter:
    """Turn-based: done after three replies; the reward of each step is its number."""

    def reset(self, **row):
        self.n = 0
        return " Count."

    def step(self, reply: str):
        self.n += 1
        return (None if self.n == 3 else f"again {self.n}"), float(self.n), self.n == 3


def test_a_turn_based_episode_sums_step_rewards_and_appends_reset_to_the_user_turn(tok):
    ep, _ = run(tok, ["one", "two", "three", "four"], env=inspect_env(Counter), row={"prompt": "Go."})
    assert ep.error is None and ep.turns == 3 and ep.reward == 6.0 and ep.passed
    assert ep.messages[0] == {"role": "user", "content": "Go. Count."}  # as TRL: content + reset()'s text
    assert [m["content"] for m in ep.messages[1:]] == ["one", "again 1", "two", "again 2", "three"]


def test_a_turn_based_environment_still_going_after_max_turns_is_truncated(tok):
    ep, _ = run(tok, ["one", "two", "three"], env=inspect_env(Counter), max_turns=2)
    assert ep.truncated and ep.reward == 3.0


class BadStep(Counter):
    def step(self, reply: str):
        return "only two", 1.0


def test_a_step_returning_the_wrong_shape_errors_the_episode(tok):
    ep, _ = run(tok, ["one"], env=inspect_env(BadStep))
    assert ep.error.startswith("BadStep.step returned ('only two', 1.0), not (observation, reward, done)")


def test_a_tokenizer_without_a_chat_template_is_one_line():
    t = tiny_tokenizer()
    t.chat_template = None
    with pytest.raises(UserError, match="needs the tokenizer's chat template"):
        EpisodeRunner(CALC, t)


@pytest.mark.parametrize("field, value", [("max_turns", 0), ("max_new_tokens", -1), ("max_episode_tokens", 1.5), ("tool_exceptions", "ignore")])
def test_bad_settings_are_one_line(field, value):
    with pytest.raises(UserError, match=f"env.{field} must be"):
        EnvSettings(**{field: value})
