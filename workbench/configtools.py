"""Typed configuration from dataclasses: defaults, then YAML, then `key=value` overrides.

One dataclass per concern (lingua style). `from_dict` builds a dataclass tree from plain
mappings and refuses unknown keys with the full dotted path and the keys that would fit, so a
typo in a YAML file never becomes a silent default. It reports every problem of the tree at once
(a verl YAML's dozen foreign keys in one error, each with its workbench key where it has one:
workbench/config_aliases.py), not the first one only. `apply_overrides` takes CLI strings such as
`train.lr=1e-6` and parses their values as YAML scalars.

    cfg = from_dict(RunConfig, yaml.safe_load(open("run.yaml")))
    cfg = apply_overrides(cfg, ["train.lr=1e-6", "recipe.loss.type=ppo_clip"])
    fn = import_spec("mypkg.rewards:correct", "reward.functions")   # a config value naming your code

`import_spec` is the one importer of `package.module:name` values (`task.checker`,
`reward.functions`): any failure of the import (it runs the user's module) is one UserError.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import re
import types
import typing
from pathlib import Path
from typing import Any, Optional, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from workbench.config_aliases import alias_for
from workbench.errors import UserError, one_line

T = TypeVar("T")


class ConfigError(UserError):
    """A configuration value or key is wrong; the message names the key. `problems`: each problem's
    own message, where one error reports several (`ConfigError.of`); else the message alone."""

    def __init__(self, message: str, problems: Optional[list[str]] = None) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems) if problems else [message]

    @classmethod
    def of(cls, problems: list[str]) -> "ConfigError":
        """One error for `problems` (at least one), on one line: a single problem is its own message."""
        if len(problems) == 1:
            return cls(problems[0])
        listed = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
        return cls(f"{len(problems)} problems in the config: {listed}", problems)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, path: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Union or origin is types.UnionType:
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, path)
            except ConfigError as e:
                errors.append(e)
        if len(errors) == 1:  # Optional[X]: X's own error, all its problems kept
            raise errors[0]
        raise ConfigError(f"{path}: {value!r} fits none of {tp}")
    if origin is typing.Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{path}: {value!r} is not one of {list(allowed)}")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, path)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        args = get_args(tp)
        inner = args[0] if args else Any
        items, problems = [], []
        for i, v in enumerate(value):
            try:
                items.append(_coerce(v, inner, f"{path}[{i}]"))
            except ConfigError as e:  # every item's problems, not the first item's alone
                problems += e.problems
        if problems:
            raise ConfigError.of(problems)
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return int(value)
    if tp is float:
        if isinstance(value, str):
            try:
                return float(value)  # YAML reads 1e-6 as a string
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{path}: expected {_type_name(tp)}, got {value!r}")
    return value


def _unknown_key(key: Any, value: Any, fields: list[str], path: str) -> list[str]:
    """The problems of an unknown key: a TRL or verl name points to its workbench key; a mapping of
    their names (verl's `actor_rollout_ref: {...}`) gets one problem per name under it that has one,
    and one for the rest; anything else a look-alike key and the keys valid here."""
    dotted = bool(re.fullmatch(r"[\w.]+", path))  # a key path like train.x (not a described context)
    where = f"{path}.{key}" if path else str(key)
    name = where if dotted else str(key)  # what alias_for matches: the dotted path where there is one
    alias = alias_for(name)
    if alias is not None:  # a TRL or verl name: its workbench key beats a look-alike
        return [f"unknown config key '{where}' ({alias.hint()})"]
    leaves = list(flatten(value)) if isinstance(value, dict) else []
    known = [(leaf, alias_for(f"{name}.{leaf}")) for leaf in leaves]
    problems = [f"unknown config key '{where}.{leaf}' ({a.hint()})" for leaf, a in known if a is not None]
    rest = [leaf for leaf, a in known if a is None]
    if problems and rest:
        shown = ", ".join(rest[:6]) + (f" and {len(rest) - 6} more" if len(rest) > 6 else "")
        problems.append(f"unknown config key '{where}' (no workbench key for its {shown})")
    if problems:
        return problems
    close = difflib.get_close_matches(str(key), fields, n=1)
    hint = f" (did you mean '{f'{path}.' if dotted and path else ''}{close[0]}'?)" if close else ""
    return [f"unknown config key '{where}'{hint}; valid keys here: {sorted(fields)}"]


def from_dict(cls: type[T], data: dict | None, path: str = "") -> T:
    """Build dataclass `cls` from a mapping; unknown keys and wrong values raise one ConfigError
    naming every one of them (`.problems`), in this section and the sections under it."""
    data = dict(data or {})
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    problems: list[str] = []
    kwargs = {}
    for name, value in data.items():
        if name not in fields:
            problems += _unknown_key(name, value, list(fields), path)
            continue
        try:
            kwargs[name] = _coerce(value, hints[name], f"{path}.{name}" if path else name)
        except ConfigError as e:
            problems += e.problems
    if problems:
        raise ConfigError.of(problems)
    try:
        obj = cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"{path or cls.__name__}: {e}") from None
    return obj


def to_dict(obj: Any) -> Any:
    """Plain (YAML/JSON-ready) form of a dataclass tree."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; used for MLflow params and sweep grids."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """'train.lr=1e-6' -> ('train.lr', 1e-06). Values are parsed as YAML scalars."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key=value (e.g. train.lr=1e-6)")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def set_dotted(data: dict, key: str, value: Any) -> None:
    """Set data['a']['b'] = value for key 'a.b', creating mappings on the way."""
    parts = key.split(".")
    node = data
    for p in parts[:-1]:
        nxt = node.get(p)
        if not isinstance(nxt, dict):
            nxt = {} if nxt is None else nxt
            if not isinstance(nxt, dict):
                raise ConfigError(f"override '{key}': '{p}' is a value, not a section")
            node[p] = nxt
        node = nxt
    node[parts[-1]] = value


def apply_overrides(obj: T, overrides: list[str] | dict[str, Any]) -> T:
    """Return a copy of dataclass `obj` with dotted overrides applied (validated like YAML)."""
    items = overrides.items() if isinstance(overrides, dict) else map(parse_override, overrides)
    data = to_dict(obj)
    for key, value in items:
        set_dotted(data, key, value)
    return from_dict(type(obj), data)


def load_yaml(path: str | Path) -> dict:
    """Read a YAML mapping; a missing file or a non-mapping gives a ConfigError naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:  # one line: the problem and where (PyYAML's text spans several)
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{p}: not valid YAML{where}: {what}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def import_spec(spec: str, what: str) -> Any:
    """The callable named 'package.module:name' (dots after the colon reach attributes, e.g.
    'mypkg.judges:Judge.score'). `what` names the setting in the one-line UserError a failure gives:
    "<what>: cannot import '<spec>': <Error>: <message>", or "<what>: '<spec>' is not callable"; a
    UserError the module raises itself (its own clear refusal) goes through unchanged."""
    module_name, _, attr = str(spec).partition(":")
    if not module_name or not attr:
        raise UserError(f"{what}: {spec!r} is not package.module:name")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except UserError:
        raise  # the user's module refused with a message of its own: it is already the one line
    except Exception as e:  # noqa: BLE001 - an import runs the user's module: any failure is one line
        raise UserError(f"{what}: cannot import {spec!r}: {type(e).__name__}: {one_line(e)}") from None
    if not callable(obj):
        raise UserError(f"{what}: {spec!r} is not callable")
    return obj
