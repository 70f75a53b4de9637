"""The token-exact property with a real tokenizer (SmolLM2-135M-Instruct's, read from its GGUF file):
sampled ids stay as sampled at their positions, the mask covers exactly them, and the environment's
parts are what the chat template renders for the final conversation. Two templates:

- SmolLM2's own (no tool support): the tools' schema in the system turn, tool results as a user turn;
- Qwen2.5's (QWEN_LIKE, given to the same tokenizer): tools through apply_chat_template(tools=...),
  results as `tool` messages.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.tasks.env.env_helpers import QWEN_LIKE, smollm2_tokenizer
from workbench.tasks.env import EnvSettings, EpisodeRunner, load_env_factory, template_format
from workbench.tasks.env.render import render_ids, tools_system_text

pytestmark = pytest.mark.slow
CALC = load_env_factory("workbench.envs.calculator:CalculatorEnv")
ROW = {"prompt": "A box holds 47 pencils. How many pencils are in 3 boxes?", "answer": 141, "kind": "times"}
REPLIES = [
    'I will multiply.\n<tool_call>\n{"name": "multiply", "arguments": {"a": 47, "b": 3}}\n</tool_call>',
    '<tool_call>\n{"name": "submit", "arguments": {"answer": 141}}\n</tool_call>',
    "There are 141 pencils.",
]


@pytest.fixture(scope="module")
def smol():
    return smollm2_tokenizer()


@pytest.fixture(scope="module")
def qwen_like(smol):
    tok = copy.deepcopy(smol)
    tok.chat_template = QWEN_LIKE
    return tok


def scripted(tok):
    """sample(): each reply pre-tokenised (+ <|im_end|>), recorded with where it was placed."""
    turns = []

    def sample(ids, max_new):
        new = tok.encode(REPLIES[len(turns)], add_special_tokens=False) + [tok.eos_token_id]
        turns.append((len(ids), new))
        return new, [-0.25 - 0.01 * k for k in range(len(new))]

    return sample, turns


def check_token_exact(tok, ep, turns, tools_kw):
    assert ep.error is None and ep.turns == 3 and ep.reward == 1.0 and not ep.truncated
    sampled_positions = set()
    for start, new in turns:  # (a) each sampled turn, unchanged, where it was sampled
        assert ep.token_ids[start:start + len(new)] == new
        assert ep.logprobs[start:start + len(new)] == [-0.25 - 0.01 * k for k in range(len(new))]
        sampled_positions |= set(range(start, start + len(new)))
    # (b) the mask covers exactly the sampled tokens
    assert {i for i, m in enumerate(ep.mask) if m} == sampled_positions
    # (c) the rest is the template's rendering of the final conversation (its trailing "\n" aside)
    rendered = render_ids(tok, ep.messages, **tools_kw)
    assert rendered[: len(ep.token_ids)] == ep.token_ids
    assert tok.decode(rendered[len(ep.token_ids):]) == "\n"
    prompt = render_ids(tok, ep.messages[: 2 if ep.messages[0]["role"] == "system" else 1], add_generation_prompt=True, **tools_kw)
    assert ep.token_ids[: ep.prompt_len] == prompt


def test_smollm2_without_tool_support_puts_the_schema_in_the_system_turn(smol):
    fmt = template_format(smol)
    assert not fmt.renders_tools and not fmt.tool_role
    sample, turns = scripted(smol)
    ep = EpisodeRunner(CALC, smol, EnvSettings(max_turns=4)).run(ROW, sample)
    check_token_exact(smol, ep, turns, {})
    assert ep.messages[0] == {"role": "system", "content": tools_system_text(CALC.schemas)}
    assert json.dumps(CALC.schemas[0]) in ep.messages[0]["content"]
    assert [m["role"] for m in ep.messages] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert ep.messages[3]["content"] == "<tool_response>\n141\n</tool_response>"
    assert ep.messages[2]["content"] == REPLIES[0]  # the assistant turn as written: the template has no tool_calls


def test_a_qwen_template_renders_the_tools_and_the_tool_role(qwen_like):
    fmt = template_format(qwen_like)
    assert fmt.renders_tools and fmt.tool_role
    sample, turns = scripted(qwen_like)
    ep = EpisodeRunner(CALC, qwen_like, EnvSettings(max_turns=4)).run(ROW, sample)
    check_token_exact(qwen_like, ep, turns, {"tools": list(CALC.schemas)})
    assert [m["role"] for m in ep.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert ep.messages[1]["content"] == "I will multiply."
    assert ep.messages[1]["tool_calls"] == [{"type": "function", "function": {"name": "multiply", "arguments": {"a": 47, "b": 3}}}]
    assert ep.messages[2] == {"role": "tool", "name": "multiply", "content": "141"}
    prompt_text = qwen_like.decode(ep.token_ids[: ep.prompt_len])
    assert "# Tools" in prompt_text and '"name": "submit"' in prompt_text


def test_sampled_ids_that_do_not_round_trip_are_kept_as_sampled(smol):
    """A turn sampled as ids the tokenizer would never produce from its text (here: a word spelled
    one character a token): decoding and encoding again would change them; the episode keeps them."""
    word = "pencils"
    odd = [smol.convert_tokens_to_ids(c) for c in word]
    assert smol.encode(word, add_special_tokens=False) != odd  # the re-encoded ids differ
    turn = odd + [smol.eos_token_id]

    def sample(ids, max_new):
        return turn, [-1.0] * len(turn)

    ep = EpisodeRunner(CALC, smol, EnvSettings(max_turns=2)).run(ROW, sample)
    assert ep.turns == 1 and ep.completion_ids == turn and ep.completion_mask == [1] * len(turn)
