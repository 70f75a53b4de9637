"""An environment's episodes through a real torch Generator (tiny Qwen2-shaped model, its BPE tokenizer and
ChatML template), with a scripted `_decode` standing in for the policy so that every turn is known:

- a tool call, its result, then the answer: one Completion per episode, the group's prompt shared,
  `sampled` True exactly on the ids the policy returned (the loss mask), the tools' text in the prompt;
- a weight push between two turns: the second turn's tokens carry the new version;
- the environment's reward decides the verdict; env stats count turns, calls and tokens by origin;
- an environment that raises or hangs in each of its methods costs that episode's group, counted, and
  the chunk still comes back; a tool's exception goes back to the model by default (tool_exceptions).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.env_fixtures import make_rows
from workbench.engine.model.sampling import Completion

HELPERS = Path(__file__).resolve().parents[2] / "helpers"


@pytest.fixture(autouse=True)
def _fixtures_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.helpers.tiny_hf import build_tiny_hf

    d = tmp_path_factory.mktemp("envtiny")
    rows = make_rows(12)
    (d / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = [r["prompt"] for r in rows] + ['<tool_call>{"name": "add", "arguments": {"a": 10, "b": 20}}</tool_call>',
                                            "<tool_response>30</tool_response>", "Tools"]  # fmt: skip
    return build_tiny_hf(d / "m", "qwen2", corpus=corpus, max_positions=4096), d / "rows.jsonl"


def _generator(tiny, env: str = "env_fixtures:AddEnv", **overrides):
    from workbench.config import run_config_from_dict
    from workbench.engine.rollout.torch_backend import Generator
    from workbench.engine.run.actors import generator_parts

    model, rows = tiny
    cfg = run_config_from_dict({}, {"model.path": str(model), "task.name": "env", "task.env": env, "task.path": str(rows),
                                    "task.num_val": 4, "recipe.length_control.type": "none", "generation.max_new_tokens": 64,
                                    "generation.backend": "torch", "env.max_episode_tokens": 3000, "env.timeout_s": 0.5,
                                    "eval.num_prompts": 4, **overrides})  # fmt: skip

    class Scripted(Generator):
        """The policy: call add on the prompt's numbers, submit the result (odd calls: one too many), then say done."""

        submits = 0
        between_turns = None  # called before the second turn's decode (a weight push)

        def _decode(self, prompts, *, seed, budgets, on_step, limits=None):
            outs = []
            for p in prompts:
                text = self.tokenizer.decode(p)
                numbers = re.findall(r"<tool_response>\s*(-?\d+)", text)
                if "<tool_response>\nok" in text or ("<tool_response>" in text and not numbers):
                    reply = "Done."
                elif "<tool_response>" not in text:
                    a, b = re.findall(r"Add (\d+) and (\d+)", text)[-1]
                    reply = f'<tool_call>{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
                else:
                    if self.between_turns is not None:
                        self.between_turns()
                        self.between_turns = None
                    n = int(numbers[-1])
                    n += self.submits % 2
                    self.submits += 1
                    reply = f'<tool_call>{{"name": "submit", "arguments": {{"answer": {n}}}}}</tool_call>'
                if on_step is not None:
                    on_step()
                ids = self.tokenizer.encode(reply) + [self.eos_id]
                outs.append(Completion(prompt_tokens=list(p), tokens=ids, logprobs=[-0.25] * len(ids),
                                       versions=[self.version] * len(ids), sampled=[True] * len(ids), finished=True))  # fmt: skip
            return outs

    return Scripted(**generator_parts(cfg), rank=0)


def test_a_tool_episode_is_one_completion_masked_on_what_the_policy_sampled(tiny):
    gen = _generator(tiny)
    tok = gen.tokenizer
    chunk = gen.generate(chunk_id=0, prompt_ids=[0, 1], n_per_prompt=2, seed=0)
    assert chunk.dropped_groups == 0 and len(chunk.groups) == 2
    for g in chunk.groups:
        prompts = {tuple(c.prompt_tokens) for c in g.completions}
        assert len(prompts) == 1  # the trainer runs a group's prompt once
        assert "# Tools" in tok.decode(g.completions[0].prompt_tokens)  # no tool support in ChatML: the schema in the system turn
        for c in g.completions:
            # sampled: the three replies (each with its end-of-turn token); between them, the tools' results, not trained
            runs = _runs(c.sampled)
            assert [v for v, _ in runs] == [True, False, True, False, True]
            first, gap, second, _, last = (c.tokens[s:e] for _, (s, e) in runs)
            assert tok.decode(last) == "Done.<|im_end|>"
            assert tok.decode(first).startswith('<tool_call>{"name": "add"') and first[-1] == gen.eos_id
            assert "<tool_response>" in tok.decode(gap)
            assert tok.decode(second).startswith('<tool_call>{"name": "submit"')
            assert all(lp == -0.25 for lp, s in zip(c.logprobs, c.sampled) if s) and c.finished
        assert sorted(g.correct) == [False, True] and sorted(g.rewards) == [0.0, 1.0]  # the environment's get_reward
    env = chunk.env
    assert env.episodes == 4 and env.turns == 12 and env.tool_calls == 8 and env.errors == 0 and env.truncated == 0
    assert env.sampled_tokens == sum(sum(c.sampled) for g in chunk.groups for c in g.completions)
    assert env.env_tokens == sum(len(c.tokens) - sum(c.sampled) for g in chunk.groups for c in g.completions) > 0
    assert chunk.verdicts["pass"] == 2 and chunk.verdicts["fail"] == 2
    note = chunk.notes[0]
    assert "# Tools" in note["prompt"] and "<tool_response>" in note["texts"][0]
    turns = json.loads(note["turns"][0])  # the samples' turn-by-turn view: ChatML has no tool role, results come as user turns
    assert [t["role"] for t in turns] == ["assistant", "user", "assistant", "user", "assistant"]
    assert turns[0]["text"].startswith('<tool_call>{"name": "add"') and "<|im_end|>" not in turns[0]["text"]
    a, b = re.findall(r"Add (\d+) and (\d+)", note["prompt"])[-1]
    assert turns[1]["text"] == f"<tool_response>\n{int(a) + int(b)}\n</tool_response>" and turns[-1]["text"] == "Done."


def test_a_push_between_turns_is_seen_in_the_next_turns_versions(tiny):
    gen = _generator(tiny)
    gen.between_turns = lambda: gen.set_weights(gen.model.state_dict(), version=1)
    chunk = gen.generate(chunk_id=0, prompt_ids=[0], n_per_prompt=1, seed=0)
    c = chunk.groups[0].completions[0]
    (_, (s1, e1)), _, (_, (s2, e2)), _, _ = _runs(c.sampled)
    assert set(c.versions[s1:e1]) == {0} and set(c.versions[s2:e2]) == {1}


@pytest.mark.parametrize("env,fragment", [
    ("env_fixtures:InitFailsLater", "InitFailsLater() raised RuntimeError: no licence left"),
    ("env_fixtures:ResetRaises", "ResetRaises.reset raised KeyError"),
    ("env_fixtures:RewardRaises", "RewardRaises.get_reward raised ZeroDivisionError"),
    ("env_fixtures:ToolHangs", "tool add did not return within 0.5 s"),
])  # fmt: skip
def test_an_environment_that_fails_costs_its_group_not_the_chunk(tiny, env, fragment):
    import env_fixtures  # the module task.env names (tests/helpers on sys.path)

    env_fixtures.InitFailsLater.made = 1  # constructed once already, by the launch's check (config/env.check_env_factory)
    gen = _generator(tiny, env)
    chunk = gen.generate(chunk_id=0, prompt_ids=[0, 1], n_per_prompt=2, seed=0)
    assert chunk.groups == [] and chunk.dropped_groups == 2
    assert chunk.verdicts["env_error"] == 4 and chunk.env.errors == 4
    assert fragment in chunk.env.first_error
    metrics = gen.evaluate(None, 0, num_prompts=2, k=1, seed=0)  # validation leaves them out, counted
    assert metrics["val/verdict/env_error"] == 2.0 and metrics["val/prompts"] == 0.0


def test_a_tools_exception_goes_back_to_the_model_unless_told_to_drop(tiny):
    chunk = _generator(tiny, "env_fixtures:ToolRaises").generate(chunk_id=0, prompt_ids=[0], n_per_prompt=2, seed=0)
    assert chunk.dropped_groups == 0 and chunk.env.tool_errors == 2  # add raised: its error was the result
    tok_text = chunk.notes[0]["texts"][0]
    assert "adder broke" in tok_text
    dropped = _generator(tiny, "env_fixtures:ToolRaises", **{"env.tool_exceptions": "drop"})
    chunk = dropped.generate(chunk_id=0, prompt_ids=[0], n_per_prompt=2, seed=0)
    assert chunk.dropped_groups == 1 and "adder broke" in chunk.env.first_error


def test_a_turn_based_environment_that_raises_in_step_is_dropped(tiny):
    chunk = _generator(tiny, "env_fixtures:StepRaises").generate(chunk_id=0, prompt_ids=[0], n_per_prompt=2, seed=0)
    assert chunk.dropped_groups == 1 and "StepRaises.step raised RuntimeError: the simulator crashed" in chunk.env.first_error


def _runs(flags: list[bool]) -> list[tuple[bool, tuple[int, int]]]:
    """Consecutive runs of equal flags: [(flag, (start, end)), ...]."""
    out, start = [], 0
    for i in range(1, len(flags) + 1):
        if i == len(flags) or flags[i] != flags[start]:
            out.append((flags[start], (start, i)))
            start = i
    return out


def test_a_template_with_tool_support_given_in_the_config_renders_the_tools_and_the_tool_role(tiny, tmp_path):
    """model.chat_template (a .jinja file: Qwen2.5's, as TRL ships it) replaces the model's ChatML: the
    tools go through apply_chat_template(tools=...) and the results come back as the tool role."""
    from tests.tasks.env.env_helpers import QWEN_LIKE

    jinja = tmp_path / "qwen2_5.jinja"
    jinja.write_text(QWEN_LIKE)
    gen = _generator(tiny, **{"model.chat_template": str(jinja)})
    chunk = gen.generate(chunk_id=0, prompt_ids=[0], n_per_prompt=2, seed=0)
    note = chunk.notes[0]
    assert "# Tools" in note["prompt"] and "<tools>" in note["prompt"] and "You are Qwen" in note["prompt"]
    assert [t["role"] for t in json.loads(note["turns"][0])] == ["assistant", "tool", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("over,message", [
    ({"model.chat_template": "/no/such/template.jinja"}, "model.chat_template: no such file: /no/such/template.jinja"),
    ({"model.path": "builtin:tiny", "model.chat_template": "{{ messages }}"}, "builtin:tiny has no chat template"),
])  # fmt: skip
def test_a_bad_chat_template_is_one_line(over, message):
    from workbench.config import run_config_from_dict
    from workbench.configtools import ConfigError

    with pytest.raises(ConfigError, match=message):
        run_config_from_dict({}, {"model.path": "/tmp/some-model", **over})
