"""The chat template and the environment: tools in the prompt, environment messages as token suffixes.

    fmt = template_format(tokenizer)          # TemplateFormat(renders_tools=..., tool_role=...)
    messages = prompt_messages(row_prompt, schemas, fmt)
    ids = prompt_ids(tokenizer, messages, schemas, fmt)            # the prompt, generation prompt included
    msgs = tool_result_messages(results, fmt)                      # tool role, or one user turn
    suffix = env_suffix_ids(tokenizer, msgs, schemas, fmt)         # ONLY what follows a sampled turn

Where the template renders tools (Qwen2.5's: its source reads `tools` and a probe render shows the
schema), the tools go through `apply_chat_template(tools=...)`. Where it does not (SmolLM2's), the
tools' JSON schemas and the calling convention go into the system turn, in the same Hermes format
the parser reads. A tool result goes back as a `tool` message where the template renders the whole
exchange (user -> assistant with tool_calls -> tool: TRL's `supports_tool_calling` probe), else as a
user turn holding `<tool_response>` blocks.

`env_suffix_ids` is TRL's `_get_tool_suffix_ids`: render a dummy conversation that ends with an
assistant turn, then the same with the new messages and the generation prompt; cut the first at its
last end-of-turn (EOS) token, check that it is a prefix of the second, and return the rest. The
sampled ids are never decoded and encoded again: the suffix is appended after them as they are.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from workbench.errors import UserError
from workbench.tasks.env.tools import ParsedReply, ToolResult

TOOLS_SYSTEM = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    'XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
_SENTINEL = {"name": "tool_name_a8f3e2b1", "key": "tool_arg_key_b9d4f5c2", "value": "tool_arg_val_d6e7a9f3",
             "content": "tool_content_c4f9a8e2"}  # fmt: skip


@dataclass(frozen=True)
class TemplateFormat:
    """What the tokenizer's chat template does with tools."""

    renders_tools: bool
    """`apply_chat_template(tools=...)` puts the schemas in the prompt (else: our system turn does)."""
    tool_role: bool
    """It renders assistant tool_calls and `tool` messages (else: results go back as a user turn)."""


def _template_source(tokenizer: Any) -> str:
    t = getattr(tokenizer, "chat_template", None)
    if isinstance(t, dict):
        return "\n".join(str(v) for v in t.values())
    return t or ""


def render_text(tokenizer: Any, messages: list[dict], **kw: Any) -> str:
    """The template's text for `messages` (tokenize=False)."""
    return tokenizer.apply_chat_template(messages, tokenize=False, **kw)


def render_ids(tokenizer: Any, messages: list[dict], **kw: Any) -> list[int]:
    """The template's token ids for `messages`, as a plain list (whatever transformers returns)."""
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, **kw)
    if hasattr(out, "input_ids"):
        out = out["input_ids"]
    if out and isinstance(out[0], list):
        out = out[0]
    return [int(i) for i in out]


def template_format(tokenizer: Any) -> TemplateFormat:
    """Detect what the template does with tools; a tokenizer without a chat template is one UserError."""
    source = _template_source(tokenizer)
    if not source:
        raise UserError("an environment task needs the tokenizer's chat template, and this tokenizer has none")
    s = _SENTINEL
    params = {"type": "object", "properties": {}}
    schema = {"type": "function", "function": {"name": s["name"], "description": "probe", "parameters": params}}
    user = [{"role": "user", "content": "hi"}]
    renders_tools = False
    if re.search(r"\btools\b", source):
        try:
            renders_tools = s["name"] in render_text(tokenizer, user, tools=[schema], add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - jinja errors of a template that cannot take tools
            renders_tools = False
    exchange = user + [
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": s["name"], "arguments": {s["key"]: s["value"]}}}]},
        {"role": "tool", "name": s["name"], "content": s["content"]},
    ]
    try:
        text = render_text(tokenizer, exchange)
        tool_role = all(v in text for v in s.values())
    except Exception:  # noqa: BLE001 - a template that refuses the roles has no tool role
        tool_role = False
    return TemplateFormat(renders_tools=renders_tools, tool_role=tool_role)


def tools_system_text(schemas: Sequence[dict]) -> str:
    """The system-turn text that teaches a template without tools the schemas and the call format."""
    return TOOLS_SYSTEM.format(tools="\n".join(json.dumps(s) for s in schemas))


def prompt_messages(prompt: Any, observation: Optional[str], schemas: Sequence[dict], fmt: TemplateFormat,
                    system_prompt: str = "") -> list[dict]:  # fmt: skip
    """The conversation the episode starts from: the row's prompt (text, or a list of messages), with
    reset()'s text appended to the last message's content (as TRL does), `system_prompt`
    (task.system_prompt) as the system turn where the prompt has none, and, where the template does
    not render tools, the tools' text in the system turn (after the system turn's own text)."""
    if prompt is None:
        messages = [{"role": "user", "content": ""}]
    elif isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    else:
        messages = [dict(m) for m in prompt]
        if not messages:
            messages = [{"role": "user", "content": ""}]
    if observation is not None:
        messages[-1] = {**messages[-1], "content": messages[-1]["content"] + observation}
    if system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    if schemas and not fmt.renders_tools:
        text = tools_system_text(schemas)
        if messages[0]["role"] == "system":
            messages[0] = {**messages[0], "content": messages[0]["content"] + "\n\n" + text}
        else:
            messages.insert(0, {"role": "system", "content": text})
    return messages


def _tools_kw(schemas: Sequence[dict], fmt: TemplateFormat) -> dict:
    return {"tools": list(schemas)} if schemas and fmt.renders_tools else {}


def prompt_ids(tokenizer: Any, messages: list[dict], schemas: Sequence[dict], fmt: TemplateFormat) -> list[int]:
    """The prompt's token ids, generation prompt included."""
    return render_ids(tokenizer, messages, add_generation_prompt=True, **_tools_kw(schemas, fmt))


def assistant_message(text: str, parsed: Optional[ParsedReply], fmt: TemplateFormat) -> dict:
    """The sampled turn as a chat message (for the samples and the reward functions; never rendered
    into the episode's ids): content + tool_calls where the template has the tool role and every call
    was read, else the text as the model wrote it."""
    if parsed is not None and parsed.calls and fmt.tool_role and parsed.well_formed:
        return {"role": "assistant", "content": parsed.content, "tool_calls": [c.as_message_call() for c in parsed.calls]}
    return {"role": "assistant", "content": text}


def tool_result_messages(results: Sequence[ToolResult], fmt: TemplateFormat) -> list[dict]:
    """The results as `tool` messages where the template has the role, else one user turn of
    `<tool_response>` blocks (the format Qwen's template renders them in)."""
    if fmt.tool_role:
        return [{"role": "tool", "name": r.name, "content": r.content} for r in results]
    body = "\n".join(f"<tool_response>\n{r.content}\n</tool_response>" for r in results)
    return [{"role": "user", "content": body}]


def env_suffix_ids(tokenizer: Any, new_messages: list[dict], schemas: Sequence[dict], fmt: TemplateFormat,
                   eos_ids: Sequence[int] = ()) -> list[int]:  # fmt: skip
    """The token ids the template renders for `new_messages` after an assistant turn that ended with
    its end-of-turn token, generation prompt included: only the new suffix. EnvTemplateError (a
    UserError) when the template does not keep the dummy conversation as a prefix."""
    if new_messages and new_messages[0]["role"] == "tool":
        call = {"type": "function", "function": {"name": new_messages[0].get("name", "tool"), "arguments": {}}}
        assistant = {"role": "assistant", "content": "", "tool_calls": [call]}
    else:
        assistant = {"role": "assistant", "content": "dummy"}
    dummy = [{"role": "user", "content": "dummy"}, assistant]
    kw = _tools_kw(schemas, fmt)
    prefix = render_ids(tokenizer, dummy, add_generation_prompt=False, **kw)
    full = render_ids(tokenizer, dummy + list(new_messages), add_generation_prompt=True, **kw)
    ends = set(eos_ids) or {tokenizer.eos_token_id}
    last = [i for i, t in enumerate(prefix) if t in ends]
    if last:
        prefix = prefix[: last[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise EnvTemplateError("the chat template does not keep earlier turns unchanged when a message follows "
                               "(not prefix-preserving), so environment messages cannot be appended token-exactly")  # fmt: skip
    return full[len(prefix):]


class EnvTemplateError(UserError):
    """The chat template cannot be used for token-exact multi-turn episodes."""
