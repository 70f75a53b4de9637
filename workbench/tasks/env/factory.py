"""An environment factory (`task.env: package.module:Factory`), loaded and read the way TRL reads one.

    env = load_env_factory("workbench.envs.calculator:CalculatorEnv")   # one line (UserError) if it is wrong
    env.kind, env.tool_names, env.schemas      # "tools", ("add", ...), [{"type": "function", ...}, ...]
    instance = env.new()                        # one instance per rollout
    tools = env.bound_tools(instance)           # {"add": instance.add, ...}

Two shapes are accepted, told apart by `step`: a class whose `step` is a turn's (no tool description,
or an (observation, reward, done) return) is turn-based; a `step` written as a tool is a tool, as TRL,
which reserves only reset and get_reward, has it:

- **tools** (TRL's `environment_factory`): `reset(**row) -> None | str`; every public method other
  than `reset` and `get_reward` is a tool, described by its type hints and Google-style docstring
  (the schema `transformers.utils.get_json_schema` builds, which `apply_chat_template(tools=...)`
  renders); `get_reward() -> float` is optional.
- **turns** (Gymnasium, Tinker, OpenEnv): `reset(**row) -> str` and
  `step(reply: str) -> (observation: str | None, reward: float, done: bool)`; no tools.

Methods are listed on the class, not the instance (as TRL does: getattr on an instance would run
properties). When the factory is a class, nothing is constructed to check it; a factory function is
called once, as TRL probes one instance.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from workbench.configtools import import_spec
from workbench.errors import UserError, one_line

RESERVED = ("reset", "get_reward")  # as TRL reserves them: `step` may be a tool (see _step_is_a_tool)


@dataclass(frozen=True)
class EnvFactory:
    """An environment factory, checked: its shape, its tools and their JSON schemas."""

    spec: str
    """What the config named ("package.module:Factory"), or the factory's qualified name."""
    factory: Callable[[], Any]
    """Called with no argument, it returns a fresh environment instance (one per rollout)."""
    cls: type
    """The class of the instances (the factory itself when it is a class)."""
    kind: Literal["tools", "turns"]
    """"tools": TRL's shape (public methods are tools); "turns": reset/step."""
    tool_names: tuple[str, ...] = ()
    """The tools' names, in the order their schemas are rendered (sorted, as inspect lists them)."""
    schemas: tuple[dict, ...] = field(default=(), repr=False)
    """One JSON schema per tool ({"type": "function", "function": {...}}), as transformers builds it."""
    has_reward: bool = False
    """Whether the class defines `get_reward()` (the environment owns the episode's reward)."""

    @property
    def name(self) -> str:
        """The class name (how the environment is named in logs and reward columns, as in TRL)."""
        return self.cls.__name__

    def new(self) -> Any:
        """A fresh instance (may raise: the caller turns that into an errored episode)."""
        return self.factory()

    def bound_tools(self, instance: Any) -> dict[str, Callable[..., Any]]:
        """{tool name: the instance's bound method}."""
        return {n: getattr(instance, n) for n in self.tool_names}


def load_env_factory(spec: str, what: str = "task.env") -> EnvFactory:
    """The factory `spec` names ("package.module:Factory"), imported and checked. Every problem is one
    UserError naming `what` and the spec: the import, no `reset`, a tool without type hints or without
    an Args entry in its docstring, a tool taking *args or **kwargs."""
    return inspect_env(import_spec(spec, what), what=what, spec=str(spec))


def inspect_env(factory: Callable[[], Any], *, what: str = "task.env", spec: str | None = None) -> EnvFactory:
    """Check `factory` (a class, or a callable returning instances) and read its shape and tools."""
    spec = spec or getattr(factory, "__qualname__", repr(factory))
    if inspect.isclass(factory):
        cls = factory
    else:
        try:
            cls = type(factory())
        except Exception as e:  # noqa: BLE001 - the user's factory runs
            raise UserError(f"{what}: {spec!r}: calling the factory raised {type(e).__name__}: {one_line(e)}") from None
    members = dict(inspect.getmembers(cls, predicate=inspect.isfunction))
    if "reset" not in members:
        raise UserError(f"{what}: {spec!r} ({cls.__name__}) has no reset method: an environment needs reset(**row)")
    if "step" in members and not _step_is_a_tool(members["step"]):
        return EnvFactory(spec=spec, factory=factory, cls=cls, kind="turns", has_reward="get_reward" in members)
    names = tuple(n for n in members if n not in RESERVED and not n.startswith("_"))
    schemas = tuple(tool_schema(members[n], what=f"{what}: {spec!r}: tool {cls.__name__}.{n}") for n in names)
    return EnvFactory(spec=spec, factory=factory, cls=cls, kind="tools", tool_names=names, schemas=schemas,
                      has_reward="get_reward" in members)  # fmt: skip


def _step_is_a_tool(step: Callable[..., Any]) -> bool:
    """Whether a class's `step` is a tool (TRL reserves only reset and get_reward: its echo example's one
    tool is `step(message: str)`): described as tools are (type hints, an Args docstring) and returning
    no (observation, reward, done) tuple. Otherwise the class is turn-based."""
    ret = inspect.signature(step).return_annotation
    if ret is not inspect.Signature.empty and ("tuple" in str(ret).lower()):
        return False
    try:
        tool_schema(step, what="step")
    except UserError:
        return False
    return True


def tool_schema(fn: Callable[..., Any], *, what: str) -> dict:
    """The JSON schema `apply_chat_template(tools=[fn])` renders for `fn` (an unbound method: `self`
    is left out), or one UserError starting with `what`."""
    from transformers.utils import get_json_schema

    params = list(inspect.signature(fn).parameters.values())
    target = fn
    if params and params[0].name in ("self", "cls"):
        target = _without_first_parameter(fn)
    for p in inspect.signature(target).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            stars = "*" if p.kind == p.VAR_POSITIONAL else "**"
            raise UserError(f"{what}: {stars}{p.name} cannot be described to the model; name each argument")
    try:
        return get_json_schema(target)
    except Exception as e:  # noqa: BLE001 - TypeHintParsingException, DocstringParsingException, ...
        raise UserError(f"{what}: {one_line(e)} (a tool needs type hints and a Google-style docstring "
                        "with an Args entry per argument)") from None


def _without_first_parameter(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A stand-in of `fn` without its `self` (what a bound method looks like to get_json_schema),
    built without an instance."""
    sig = inspect.signature(fn)

    def stand_in(*args: Any, **kwargs: Any) -> Any:  # pragma: no cover - never called
        raise NotImplementedError

    stand_in.__name__ = fn.__name__
    stand_in.__doc__ = fn.__doc__
    stand_in.__signature__ = sig.replace(parameters=list(sig.parameters.values())[1:])  # type: ignore[attr-defined]
    hints = dict(getattr(fn, "__annotations__", {}))
    hints.pop("self", None)
    stand_in.__annotations__ = hints
    stand_in.__module__ = fn.__module__
    stand_in.__wrapped__ = fn  # type: ignore[attr-defined]  # get_type_hints resolves names in fn's module
    return stand_in
