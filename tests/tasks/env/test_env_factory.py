"""workbench/tasks/env/factory.py: a factory is read the way TRL reads `environment_factory`, and a
bad one is one line (UserError) naming the problem, found without constructing anything."""

from __future__ import annotations

import sys
import types

import pytest

from workbench.errors import UserError
from workbench.tasks.env import inspect_env, load_env_factory


class Tools:
    def __init__(self):
        self.constructed = True

    def reset(self, **row):
        return None

    def lookup(self, word: str, limit: int = 3) -> str:
        """Look a word up.

        Args:
            word: The word.
            limit: How many senses at most.
        """
        return word

    def get_reward(self) -> float:
        return 1.0

    def _helper(self):
        return 0


class Game:
    def reset(self, **row) -> str:
        return "go"

    def step(self, reply: str):
        return None, 1.0, True


def module_with(name: str, **classes) -> str:
    mod = types.ModuleType(name)
    for k, v in classes.items():
        setattr(mod, k, v)
    sys.modules[name] = mod
    return name


def test_a_trl_class_public_methods_are_tools_with_transformers_schemas():
    env = inspect_env(Tools)
    assert env.kind == "tools" and env.has_reward and env.name == "Tools"
    assert env.tool_names == ("lookup",)  # reset, get_reward and _private are not tools
    fn = env.schemas[0]["function"]
    assert fn["name"] == "lookup" and fn["description"] == "Look a word up."
    assert fn["parameters"]["properties"]["limit"] == {"type": "integer", "description": "How many senses at most."}
    assert fn["parameters"]["required"] == ["word"]
    inst = env.new()
    assert inst.constructed and env.bound_tools(inst)["lookup"]("hi") == "hi"


def test_the_schema_is_what_apply_chat_template_tools_gets_from_a_bound_method():
    from transformers.utils import get_json_schema

    assert inspect_env(Tools).schemas[0] == get_json_schema(Tools().lookup)


def test_a_class_with_step_is_turn_based_and_has_no_tools():
    env = inspect_env(Game)
    assert env.kind == "turns" and env.tool_names == () and not env.has_reward


def test_a_factory_function_is_called_once_to_find_the_class():
    calls = []

    def make():
        calls.append(1)
        return Game()

    env = inspect_env(make)
    assert env.cls is Game and len(calls) == 1


def test_the_shipped_environments_load_by_path():
    calc = load_env_factory("workbench.envs.calculator:CalculatorEnv")
    assert calc.kind == "tools" and set(calc.tool_names) == {"add", "subtract", "multiply", "submit"} and calc.has_reward
    assert load_env_factory("workbench.envs.guess:GuessNumberEnv").kind == "turns"


def one_line_error(spec: str) -> str:
    with pytest.raises(UserError) as e:
        load_env_factory(spec)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("task.env:")
    return msg


def test_a_bad_factory_path_is_one_line():
    assert "cannot import 'no_such_pkg.mod:Env': ModuleNotFoundError" in one_line_error("no_such_pkg.mod:Env")
    assert "is not package.module:name" in one_line_error("workbench.envs.calculator")
    assert "AttributeError" in one_line_error("workbench.envs.calculator:Nope")


def test_a_factory_without_reset_is_one_line():
    class NoReset:
        def add(self, a: int) -> int:
            """Add.

            Args:
                a: A number.
            """
            return a

    name = module_with("env_no_reset_mod", NoReset=NoReset)
    assert "has no reset method" in one_line_error(f"{name}:NoReset")


def test_a_tool_without_type_hints_or_docstring_args_is_one_line_naming_it():
    class NoHints:
        def reset(self, **row):
            return None

        def add(self, a, b: int) -> int:
            """Add.

            Args:
                a: A number.
                b: Another.
            """
            return a + b

    class NoArgsDoc:
        def reset(self, **row):
            return None

        def add(self, a: int, b: int) -> int:
            """Add two numbers."""
            return a + b

    class VarArgs:
        def reset(self, **row):
            return None

        def add(self, *numbers: int) -> int:
            """Add.

            Args:
                numbers: Numbers.
            """
            return sum(numbers)

    name = module_with("env_bad_tools_mod", NoHints=NoHints, NoArgsDoc=NoArgsDoc, VarArgs=VarArgs)
    msg = one_line_error(f"{name}:NoHints")
    assert "tool NoHints.add" in msg and "missing a type hint" in msg
    msg = one_line_error(f"{name}:NoArgsDoc")
    assert "tool NoArgsDoc.add" in msg and "no description for the argument 'a'" in msg
    assert "*numbers cannot be described" in one_line_error(f"{name}:VarArgs")


def test_checking_a_class_constructs_nothing():
    class Loud:
        def __init__(self):
            raise RuntimeError("constructed")

        def reset(self, **row):
            return None

    assert inspect_env(Loud).kind == "tools"


def test_a_factory_function_that_raises_is_one_line():
    def broken():
        raise RuntimeError("no GPU here")

    with pytest.raises(UserError, match="calling the factory raised RuntimeError: no GPU here"):
        inspect_env(broken)
