"""A TRL `environment_factory` class from TRL's own docs (trl_example_env.IncrementEnv, verbatim) runs
here unchanged: loaded by name, its tool schema is the one transformers builds for the bound method
(what GRPOTrainer hands apply_chat_template(tools=...)), and a scripted episode reads reset()'s task
from the prompt, calls the tool, reads the result back, and gets the reward the class computes.

The row is the one TRL builds when the environment owns the data (no train_dataset):
{"prompt": [{"role": "user", "content": ""}]}; reset()'s text is appended to that user turn.
"""

from __future__ import annotations

import json
import random
import re

import pytest

from tests.helpers.tiny_hf import CHATML
from tests.tasks.env.env_helpers import QWEN_LIKE, tiny_tokenizer
from tests.tasks.env.trl_example_env import IncrementEnv
from workbench.tasks.env import EnvSettings, EpisodeRunner, ToolResult, load_env_factory

SPEC = "tests.tasks.env.trl_example_env:IncrementEnv"
TRL_ROW = {"prompt": [{"role": "user", "content": ""}]}  # TRL's placeholder row without a train_dataset
TASK = re.compile(r"Increment the counter by (\d+)\.")


def call(name: str, **args) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


@pytest.fixture(scope="module", params=["qwen-template", "no-tool-template"])
def tok(request):
    """Qwen2.5's template (tools via apply_chat_template, `tool` role) and a plain ChatML one without
    tool support (schema in the system turn, results as a user turn)."""
    return tiny_tokenizer(QWEN_LIKE if request.param == "qwen-template" else CHATML)


class Agent:
    """A scripted policy: reads the task from the ids it is given (never from the instance), answers
    with `plan(target)` (a list of replies, one per turn), and records what it saw each turn."""

    def __init__(self, tok, plan):
        self.tok, self.plan, self.seen, self.target = tok, plan, [], None

    def __call__(self, ids, max_new):
        text = self.tok.decode(ids, skip_special_tokens=False)
        self.seen.append(text)
        if self.target is None:
            self.target = int(TASK.findall(text)[-1])
        reply = self.plan(self.target)[len(self.seen) - 1]
        out = self.tok.encode(reply, add_special_tokens=False) + [self.tok.eos_token_id]
        return out[:max_new], [-0.1] * len(out[:max_new])


def episode(tok, plan, seed=0, **settings):
    random.seed(seed)  # reset() draws its target from the module-level random
    agent = Agent(tok, plan)
    runner = EpisodeRunner(load_env_factory(SPEC), tok,
                           EnvSettings(**{"max_new_tokens": 100, "max_episode_tokens": 3000, **settings}))
    return runner.run(dict(TRL_ROW), agent), agent


def test_the_class_loads_unchanged_and_its_schema_is_transformers_own():
    from transformers.utils import get_json_schema

    env = load_env_factory(SPEC)
    assert env.cls is IncrementEnv and env.kind == "tools" and env.has_reward
    assert env.tool_names == ("increment",)  # reset and get_reward are reserved, as in TRL
    # TRL lists the methods on the class and hands the bound methods to apply_chat_template(tools=...)
    instance = IncrementEnv()
    assert list(env.schemas) == [get_json_schema(getattr(instance, n)) for n in env.tool_names]
    assert env.schemas[0] == {
        "type": "function",
        "function": {
            "name": "increment",
            "description": "Increment the internal counter.",
            "parameters": {"type": "object", "properties": {"step": {"type": "integer", "description": "Value to add to the counter."}},
                           "required": ["step"]},
            "return": {"type": "integer", "description": "The updated counter value."},
        },
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_right_increment_is_rewarded_and_the_result_goes_back(tok, seed):
    ep, agent = episode(tok, lambda n: [call("increment", step=n), f"The counter is {n}."], seed=seed)
    n = agent.target
    assert 1 <= n <= 6
    assert ep.error is None and not ep.truncated and ep.turns == 2
    # reset()'s text was appended to TRL's empty user turn
    first_user = next(m for m in ep.messages if m["role"] == "user")
    assert first_user == {"role": "user", "content": f"Increment the counter by {n}."}
    # the tool ran on the instance and its return value is what the model read next turn
    assert ep.tool_results == [ToolResult(name="increment", content=str(n))]
    assert f"<tool_response>\n{n}\n</tool_response>" in agent.seen[1][len(agent.seen[0]):]
    # get_reward(): float(counter == target)
    assert ep.reward == 1.0 and ep.passed is True
    # the tool's schema was in the prompt the model saw
    assert '"name": "increment"' in agent.seen[0]


def test_a_wrong_increment_gets_the_class_reward_of_zero(tok):
    ep, agent = episode(tok, lambda n: [call("increment", step=n + 1), "Done."])
    assert ep.tool_results == [ToolResult(name="increment", content=str(agent.target + 1))]
    assert ep.reward == 0.0 and ep.passed is False


def test_state_lives_across_calls_and_turns_within_an_episode(tok):
    # seed 0 draws a target above 2: 1 + 1 in one turn (two calls), the rest in a second turn
    plan = lambda n: [call("increment", step=1) + "\n" + call("increment", step=1), call("increment", step=n - 2), "Done."]  # noqa: E731
    ep, agent = episode(tok, plan, seed=0)
    n = agent.target
    assert n > 2 and [r.content for r in ep.tool_results] == ["1", "2", str(n)]
    assert ep.turns == 3 and ep.tool_calls == 3 and ep.reward == 1.0
    # both results of the first turn went back, in order, before the second turn
    after_first = agent.seen[1][len(agent.seen[0]):]
    assert after_first.index("<tool_response>\n1\n</tool_response>") < after_first.index("<tool_response>\n2\n</tool_response>")


def test_no_tool_call_leaves_the_counter_at_zero(tok):
    ep, _ = episode(tok, lambda n: [f"The counter is now {n}."])
    assert ep.turns == 1 and ep.tool_calls == 0 and ep.reward == 0.0 and not ep.truncated
