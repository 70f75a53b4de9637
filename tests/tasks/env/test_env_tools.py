"""workbench/tasks/env/tools.py and deadline.py: the model's Hermes tool calls are read, checked and
run; nothing the model writes raises (wrong calls come back as the tool's error text, as in TRL),
and a tool that hangs is abandoned at its deadline."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from workbench.tasks.env import EnvFault, EnvHang, ToolCall, call_with_deadline, inspect_env, parse_reply, run_tool


class Calc:
    def reset(self, **row):
        return None

    def add(self, a: int, b: int) -> int:
        """Add.

        Args:
            a: First.
            b: Second.
        """
        return a + b

    def scale(self, x: float, unit: str = "m") -> str:
        """Scale.

        Args:
            x: A number.
            unit: The unit.
        """
        return f"{x * 2}{unit}"

    def boom(self, a: int) -> int:
        """Fail.

        Args:
            a: Anything.
        """
        raise ZeroDivisionError("division by zero")

    def sleepy(self, s: float) -> str:
        """Sleep.

        Args:
            s: Seconds.
        """
        time.sleep(s)
        return "woke"


ENV = inspect_env(Calc)
TOOLS = ENV.bound_tools(Calc())


def call(name: str, **args) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def test_a_good_call_is_read_with_the_text_before_it():
    reply = parse_reply("I will add.\n" + call("add", a=47, b=38), ENV.schemas)
    assert reply.content == "I will add." and reply.well_formed
    assert reply.calls == (ToolCall(name="add", arguments={"a": 47, "b": 38}),)
    assert run_tool(TOOLS, reply.calls[0]).content == "85"  # the result as text


def test_several_calls_in_one_turn_and_no_call():
    reply = parse_reply(call("add", a=1, b=2) + "\n" + call("scale", x=1.5), ENV.schemas)
    assert [c.name for c in reply.calls] == ["add", "scale"]
    assert [run_tool(TOOLS, c).content for c in reply.calls] == ["3", "3.0m"]
    assert parse_reply("The answer is 85.", ENV.schemas).calls == ()


@pytest.mark.parametrize(
    "text, error",
    [
        ('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}</tool_call>', "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", 'needs a JSON object with a "name"'),
        (call("divide", a=1, b=2), "tool 'divide' not found (tools: add, boom, scale, sleepy)"),
        (call("add", a=1), "add: missing argument b"),
        (call("add", a=1, b=2, c=3), "add: unexpected argument c (arguments: a, b)"),
        (call("add", a="1", b=2), 'argument a must be integer, got "1"'),
        (call("add", a=True, b=2), "argument a must be integer, got true"),
        ('<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>', '"arguments" of add must be a JSON object'),
        ('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}', "opened and never closed"),
    ],
)
def test_a_wrong_call_becomes_the_error_the_model_reads(text, error):
    reply = parse_reply(text, ENV.schemas)
    assert not reply.well_formed and len(reply.calls) == 1
    result = run_tool(TOOLS, reply.calls[0])
    assert result.error and result.content.startswith("Error:") and error in result.content


def test_arguments_given_as_a_json_string_are_read_and_an_int_is_a_number():
    text = '<tool_call>{"name": "scale", "arguments": "{\\"x\\": 2}"}</tool_call>'
    assert run_tool(TOOLS, parse_reply(text, ENV.schemas).calls[0]).content == "4m"


def test_run_tool_checks_arguments_itself_when_given_the_schemas():
    result = run_tool(TOOLS, ToolCall(name="add", arguments={"a": "x", "b": 1}), schemas=ENV.schemas)
    assert result.error and "argument a must be integer" in result.content


def test_a_tool_that_raises_replies_its_error_or_drops_the_episode():
    c = ToolCall(name="boom", arguments={"a": 1})
    result = run_tool(TOOLS, c)
    assert result.error and result.content == "Error: ZeroDivisionError: division by zero"
    with pytest.raises(EnvFault, match="tool boom raised ZeroDivisionError: division by zero"):
        run_tool(TOOLS, c, tool_exceptions="drop")


def test_a_tool_that_hangs_is_abandoned_at_its_deadline():
    start = time.perf_counter()
    with pytest.raises(EnvHang, match=r"tool sleepy did not return within 0.2 s"):
        run_tool(TOOLS, ToolCall(name="sleepy", arguments={"s": 3.0}), timeout_s=0.2)
    assert time.perf_counter() - start < 1.5
    assert run_tool(TOOLS, ToolCall(name="sleepy", arguments={"s": 0.0}), timeout_s=2).content == "woke"


def test_call_with_deadline_returns_raises_and_leaves_a_daemon_thread():
    assert call_with_deadline(lambda x: x + 1, 1.0, "f", 1) == 2
    with pytest.raises(KeyError):
        call_with_deadline(lambda: {}["k"], 1.0, "f")
    release = threading.Event()
    with pytest.raises(EnvHang):
        call_with_deadline(release.wait, 0.05, "env.reset")
    hung = [t for t in threading.enumerate() if t.name == "env:env.reset"]
    assert hung and all(t.daemon for t in hung)  # it cannot be killed; it does not keep the process alive
    release.set()
    assert call_with_deadline(lambda: "inline", None, "f") == "inline"


def test_async_tools_are_awaited_as_trl_awaits_them():
    class Async:
        def reset(self, **row):
            return None

        async def fetch(self, key: str) -> str:
            """Fetch.

            Args:
                key: The key.
            """
            await asyncio.sleep(0)
            return key.upper()

    env = inspect_env(Async)
    assert env.tool_names == ("fetch",)
    tools = env.bound_tools(Async())
    assert run_tool(tools, ToolCall(name="fetch", arguments={"key": "ab"}), timeout_s=2).content == "AB"
    assert run_tool(tools, ToolCall(name="fetch", arguments={"key": "ab"})).content == "AB"
