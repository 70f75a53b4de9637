"""Chat prompts: conversations in JSONL, Parquet and hf tasks (TRL's conversational format), the system
prompt through the chat template, and one-line refusals naming the row."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.helpers.tiny_hf import CHATML, train_bpe
from workbench.config import TaskConfig, run_config_from_dict
from workbench.configtools import ConfigError
from workbench.engine.model.hf_dir import prompt_ids
from workbench.errors import UserError
from workbench.tasks.base import load_task
from workbench.tasks.chat import prompt_input

SYSTEM = "You are a careful calculator."


def _conversation(i):
    return [{"role": "user", "content": f"What is {i} + {i}?"}]


def _rows(n):
    rows = [{"messages": _conversation(i), "solution": 2 * i, "level": i % 3} for i in range(n)]
    rows[0]["messages"] = [{"role": "system", "content": "Its own system turn."}, *_conversation(0)]
    return rows


@pytest.fixture(scope="module")
def chatml_tokenizer():
    tok = train_bpe([f"What is {i} + {i}? {SYSTEM}" for i in range(30)], "qwen2")
    tok.chat_template = CHATML
    return tok


def _write(tmp_path, kind, rows):
    if kind == "jsonl":
        path = tmp_path / "d.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        path = tmp_path / "d.parquet"
        pd.DataFrame(rows).to_parquet(path)
    return path


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "hf"])
def test_conversations_go_through_the_chat_template_with_the_system_prompt(tmp_path, kind, chatml_tokenizer):
    path = _write(tmp_path, "parquet" if kind == "parquet" else "jsonl", _rows(20))
    task = load_task(TaskConfig(name=kind, path=str(path), prompt_key="messages", answer_key="solution", num_val=4,
                                chat_template=True, system_prompt=SYSTEM))  # fmt: skip
    by_n = {ex.answer: ex for ex in task.train + task.val}
    ex = by_n["6"]  # "What is 3 + 3?"
    assert ex.messages == (("user", "What is 3 + 3?"),) and ex.columns["level"] == 0
    text = chatml_tokenizer.decode(prompt_ids(chatml_tokenizer, prompt_input(task, ex), chat_template=True))
    assert text == f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nWhat is 3 + 3?<|im_end|>\n<|im_start|>assistant\n"
    own = by_n["0"]  # a conversation with its own system turn keeps it, and gets no second one
    text = chatml_tokenizer.decode(prompt_ids(chatml_tokenizer, prompt_input(task, own), chat_template=True))
    assert text.count("<|im_start|>system") == 1 and "Its own system turn." in text and SYSTEM not in text


def test_a_plain_string_prompt_gets_the_system_turn_too(tmp_path, chatml_tokenizer):
    task = load_task(TaskConfig(name="addition", difficulty=1, num_train=20, num_val=5, chat_template=True, system_prompt=SYSTEM))
    ex = task.val[0]
    text = chatml_tokenizer.decode(prompt_ids(chatml_tokenizer, prompt_input(task, ex), chat_template=True))
    assert text.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{ex.prompt}<|im_end|>")
    plain = load_task(TaskConfig(name="addition", difficulty=1, num_train=20, num_val=5))
    assert prompt_input(plain, plain.val[0]) == plain.val[0].prompt  # no template: the text as it is


@pytest.mark.parametrize(
    "messages, said",
    [
        ([], "'messages' must be a non-empty string or a non-empty list of {role, content} messages"),
        ([{"role": "robot", "content": "hi"}], "'messages' message 0 has role 'robot' (one of system, user, assistant)"),
        ([{"role": "user", "content": 7}], "'messages' message 0 (user) has content 7, not a string"),
        ([{"content": "hi"}], "'messages' message 0 must be a mapping with 'role' and 'content'"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "'messages' ends with a assistant message"),
    ],
)
def test_a_malformed_conversation_is_one_line_naming_the_row(tmp_path, messages, said):
    rows = _rows(10)
    rows[6]["messages"] = messages
    path = _write(tmp_path, "jsonl", rows)
    with pytest.raises(UserError) as e:
        load_task(TaskConfig(name="jsonl", path=str(path), prompt_key="messages", answer_key="solution", num_val=2, chat_template=True))
    assert str(e.value).startswith(f"{path}:7: {said}") and "\n" not in str(e.value)


def test_a_conversation_without_the_chat_template_is_refused_naming_the_row(tmp_path):
    path = _write(tmp_path, "parquet", _rows(10))
    with pytest.raises(UserError, match=r"d.parquet: row 0: the prompt is a message list.*set task.chat_template: true"):
        load_task(TaskConfig(name="parquet", path=str(path), prompt_key="messages", answer_key="solution", num_val=2))


def test_a_system_prompt_without_the_chat_template_is_refused_at_config_load():
    with pytest.raises(ConfigError, match="task.system_prompt is set but task.chat_template is false"):
        run_config_from_dict({"task": {"system_prompt": SYSTEM}})
    run_config_from_dict({"task": {"system_prompt": SYSTEM, "chat_template": True}})  # with it: fine


def test_a_mix_gives_its_system_prompt_to_each_source_unless_the_source_has_its_own():
    from workbench.config import MixSource
    from workbench.tasks.mixture import part_for

    mix = [MixSource(name="addition", difficulty=1, num_train=20, num_val=5, domain="a"),
           MixSource(name="word_problems", difficulty=1, num_train=20, num_val=5, domain="w", system_prompt="Words.")]  # fmt: skip
    task = load_task(TaskConfig(chat_template=True, system_prompt=SYSTEM, mix=mix))
    first = {ex.domain: prompt_input(part_for(task, ex), ex)[0] for ex in task.val}
    assert first == {"a": {"role": "system", "content": SYSTEM}, "w": {"role": "system", "content": "Words."}}
