"""Tool calls: parsed from the model's reply (Hermes format), checked against the schema, run.

    turn = parse_reply('Let me add.\\n<tool_call>\\n{"name": "add", "arguments": {"a": 2, "b": 3}}\\n</tool_call>')
    turn.content, turn.calls            # "Let me add.", [ToolCall(name="add", arguments={"a": 2, "b": 3})]
    result = run_tool(tools, schemas, turn.calls[0], timeout_s=5)   # ToolResult(name="add", content="5")

The format is the one the Qwen family is trained on (and the one the system turn teaches a model
whose template has no tools): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, several per
turn allowed. Nothing the model writes raises: a call that is not JSON, names no tool, names an
unknown tool, or has wrong arguments becomes a ToolCall with `error` set, and running it returns that
error as the tool's result, so the model reads it next turn. TRL does so for an unknown tool, and for
arguments the call rejects (`{"error": ...}`); a call it cannot parse ends its episode as plain text
instead, and it passes wrong types to the tool unchecked. A tool that raises returns its error the
same way (`tool_exceptions="reply"`, TRL's behaviour) or faults the episode (`"drop"`). A tool that
hangs past `timeout_s` always faults the episode (EnvHang).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional

from workbench.errors import one_line
from workbench.tasks.env.deadline import EnvFault, call_with_deadline

CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
OPEN_TAG = "<tool_call>"
JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass(frozen=True)
class ToolCall:
    """One call the model wrote. `error` set: it could not be read or does not fit a tool (the text is
    the message the model gets back); `name` is then whatever could be read ("" if nothing)."""

    name: str
    arguments: dict = field(default_factory=dict)
    error: Optional[str] = None

    def as_message_call(self) -> dict:
        """The call as a chat message's `tool_calls` entry (what templates and TRL's parser use)."""
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ParsedReply:
    """An assistant reply read for tool calls: the text before the first call, and the calls."""

    content: str
    calls: tuple[ToolCall, ...] = ()

    @property
    def well_formed(self) -> bool:
        """Every call was read and names a known tool with fitting arguments (or there are none)."""
        return all(c.error is None for c in self.calls)


@dataclass(frozen=True)
class ToolResult:
    """What a call returned, as the text the model reads; `error` marks a failed call."""

    name: str
    content: str
    error: bool = False


def parse_reply(text: str, schemas: tuple[dict, ...] | list[dict] = ()) -> ParsedReply:
    """The tool calls in `text` (an assistant turn, decoded for reading only). With `schemas`, each
    call is checked against its tool (unknown tool, missing, unexpected or mistyped arguments: an
    error call). An opened `<tool_call>` never closed is an error call too."""
    by_name = {s["function"]["name"]: s for s in schemas}
    first = text.find(OPEN_TAG)
    if first < 0:
        return ParsedReply(content=text.strip())
    calls = [_read_call(body, by_name if schemas else None) for body in CALL_RE.findall(text)]
    tail = text[text.rfind("</tool_call>") + len("</tool_call>"):] if calls else text[first:]
    if OPEN_TAG in tail:
        calls.append(ToolCall(name="", error="Error: a <tool_call> was opened and never closed with </tool_call>."))
    return ParsedReply(content=text[:first].strip(), calls=tuple(calls))


def _read_call(body: str, by_name: Optional[dict[str, dict]]) -> ToolCall:
    try:
        obj = json.loads(body.strip())
    except json.JSONDecodeError as e:
        return ToolCall(name="", error=f"Error: the tool call is not valid JSON ({e.msg} at character {e.pos}). "
                                       'Write <tool_call>{"name": ..., "arguments": {...}}</tool_call>.')  # fmt: skip
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall(name="", error='Error: a tool call needs a JSON object with a "name" string '
                                       'and an "arguments" object.')
    name, args = obj["name"], obj.get("arguments", {})
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    if not isinstance(args, dict):
        got = json.dumps(args)[:80]
        return ToolCall(name=name, error=f'Error: the "arguments" of {name} must be a JSON object, got {got}.')
    if by_name is not None:
        if name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            return ToolCall(name=name, arguments=args, error=f"Error: tool {name!r} not found (tools: {known}).")
        problem = check_arguments(by_name[name], args)
        if problem:
            return ToolCall(name=name, arguments=args, error=f"Error: {name}: {problem}.")
    return ToolCall(name=name, arguments=args)


def check_arguments(schema: dict, args: dict) -> Optional[str]:
    """What is wrong with `args` for the tool `schema` describes (missing, unexpected or mistyped
    arguments, a value outside an enum), or None. An int passes for "number"; a bool never passes
    for "integer" or "number"."""
    params = schema["function"].get("parameters", {}) or {}
    props: dict = params.get("properties", {}) or {}
    missing = [p for p in params.get("required", []) if p not in args]
    if missing:
        return f"missing argument{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
    unexpected = [a for a in args if a not in props]
    if unexpected:
        s = "s" if len(unexpected) > 1 else ""
        return f"unexpected argument{s} {', '.join(unexpected)} (arguments: {', '.join(props) or 'none'})"
    for key, value in args.items():
        problem = _type_problem(props[key], value)
        if problem:
            return f"argument {key} {problem}"
    return None


def _type_problem(prop: dict, value: Any) -> Optional[str]:
    if "enum" in prop and value not in prop["enum"]:
        return f"must be one of {prop['enum']}, got {json.dumps(value)}"
    types = prop.get("type")
    if types is None:
        return None
    types = types if isinstance(types, list) else [types]
    for t in types:
        allowed = JSON_TYPES.get(t)
        if allowed is None:
            return None  # a type we do not check
        if isinstance(value, allowed) and not (isinstance(value, bool) and t in ("integer", "number")):
            return None
    return f"must be {' or '.join(types)}, got {json.dumps(value)[:40]}"


def run_tool(tools: dict[str, Callable[..., Any]], call: ToolCall, *, timeout_s: Optional[float] = None,
             tool_exceptions: Literal["reply", "drop"] = "reply",
             schemas: tuple[dict, ...] | list[dict] = ()) -> ToolResult:  # fmt: skip
    """Run one call: its result as text (`str(result)`), or the error the model reads. An error call
    (unreadable, unknown tool, wrong arguments) is not run. Raises EnvFault when the tool hangs past
    `timeout_s`, or raises with `tool_exceptions="drop"`."""
    if call.error is None and schemas:
        by_name = {s["function"]["name"]: s for s in schemas}
        call = _read_call(json.dumps({"name": call.name, "arguments": call.arguments}), by_name)
    if call.error is not None:
        return ToolResult(name=call.name or "unknown", content=call.error, error=True)
    fn = tools.get(call.name)
    if fn is None:
        known = ", ".join(sorted(tools)) or "none"
        return ToolResult(name=call.name, content=f"Error: tool {call.name!r} not found (tools: {known}).", error=True)
    try:
        value = call_with_deadline(fn, timeout_s, f"tool {call.name}", **call.arguments)
        return ToolResult(name=call.name, content=value if isinstance(value, str) else str(value))
    except EnvFault:
        raise
    except Exception as e:  # noqa: BLE001 - the environment's code: its error is the model's to read
        if tool_exceptions == "drop":
            raise EnvFault(f"tool {call.name} raised {type(e).__name__}: {one_line(e)}") from None
        return ToolResult(name=call.name, content=f"Error: {type(e).__name__}: {one_line(e)}", error=True)
