"""Typed configuration from dataclasses: defaults, then YAML, then `key=value` overrides.

One dataclass per concern (lingua style). `from_dict` builds a dataclass tree from plain
mappings and refuses unknown keys with the full dotted path and the keys that would fit, so a
typo in a YAML file never becomes a silent default. `apply_overrides` takes CLI strings such as
`train.lr=1e-6` and parses their values as YAML scalars.

    cfg = from_dict(RunConfig, yaml.safe_load(open("run.yaml")))
    cfg = apply_overrides(cfg, ["train.lr=1e-6", "recipe.loss.type=ppo_clip"])
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from workbench.config_aliases import alias_for
from workbench.errors import UserError

T = TypeVar("T")


class ConfigError(UserError):
    """A configuration value or key is wrong; the message names the key."""


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
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{path}: {value!r} fits none of {tp}")
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
        items = [_coerce(v, inner, f"{path}[{i}]") for i, v in enumerate(value)]
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


def _alias_hint(key: str, value: Any) -> str:
    """The hint for an unknown key that is TRL's or verl's name (for a mapping, any key in it), else ""."""
    names = [key] + ([f"{key}.{k}" for k in flatten(value)] if isinstance(value, dict) else [])
    for name in names:
        alias = alias_for(name)
        if alias is not None:
            return alias.hint()
    return ""


def from_dict(cls: type[T], data: dict | None, path: str = "") -> T:
    """Build dataclass `cls` from a mapping; unknown keys raise ConfigError naming them."""
    data = dict(data or {})
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), list(fields), n=1)
        dotted = bool(re.fullmatch(r"[\w.]+", path))  # a key path like train.x (not a described context)
        hint = f" (did you mean '{f'{path}.' if dotted else ''}{close[0]}'?)" if close else ""
        where = f"{path}.{key}" if path else str(key)
        known = _alias_hint(f"{path}.{key}" if dotted and path else str(key), data[key])
        hint = f" ({known})" if known else hint  # a TRL or verl name: its workbench key beats a look-alike
        raise ConfigError(f"unknown config key '{where}'{hint}; valid keys here: {sorted(fields)}")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(value, hints[name], f"{path}.{name}" if path else name)
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
