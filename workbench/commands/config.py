"""`workbench config show`: the resolved run config, every key with its value and meaning.

    workbench config show                                   # the defaults
    workbench config show --config configs/quickstart.yaml --set train.lr=3e-4
    workbench config show --config configs/demo.yaml train  # only the keys under train.

A key's meaning is its field's attribute docstring in workbench/config/ (a module per section;
workbench/rl/recipe.py for recipe.*): `config_keys()` walks the RunConfig dataclass tree and
reads them, for this command, the generated config reference (docs/_hooks/reference.py) and the
test that fails on a field without one.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import textwrap
import typing
from dataclasses import dataclass
from typing import Any

from workbench.config import RunConfig, load_run_config
from workbench.configtools import ConfigError
from workbench.errors import UserError

EXAMPLES = """examples:
  workbench config show
  workbench config show --config configs/quickstart.yaml --set train.lr=3e-4 --set recipe=qwen-dapo
  workbench config show --config configs/demo.yaml train"""


@dataclass(frozen=True)
class ConfigKey:
    """One key of the run config: `key` dotted (`train.lr`; a list's items as `task.mix[].weight`)."""

    key: str
    type: str  # as the dataclass annotates it
    default: Any
    meaning: str  # the field's attribute docstring, whitespace collapsed ("" when it has none)
    section: bool  # a nested dataclass (its own keys follow), not a value


@functools.lru_cache(maxsize=None)
def field_meanings(cls: type) -> dict[str, str]:
    """Field name -> its attribute docstring, for the fields `cls` itself annotates."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    out = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            out[node.target.id] = " ".join(nxt.value.value.split())
    return out


def _meaning(cls: type, name: str) -> str:
    for klass in cls.__mro__:  # an inherited field's docstring sits in the class that annotates it
        if dataclasses.is_dataclass(klass) and name in klass.__dict__.get("__annotations__", {}):
            return field_meanings(klass).get(name, "")
    return ""


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def config_keys(cls: type = RunConfig, prefix: str = "", *, own_only: bool = False) -> list[ConfigKey]:
    """Every key of `cls` (RunConfig by default), depth first in declaration order; `own_only`:
    only the fields `cls` itself declares (a list item that extends its parent, as task.mix's)."""
    hints = typing.get_type_hints(cls)
    own = cls.__dict__.get("__annotations__", {})
    keys = []
    for f in dataclasses.fields(cls):
        if own_only and f.name not in own:
            continue
        hint, key = hints[f.name], prefix + f.name
        nested = hint if dataclasses.is_dataclass(hint) else None
        item = typing.get_args(hint)[0] if typing.get_origin(hint) is list and typing.get_args(hint) else None
        # Optional[a dataclass] (model.lora): a value of its own (null: off) whose keys follow
        optional = [a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)] if type(None) in typing.get_args(hint) else []
        default = _default(f)
        shown = None if nested else (dataclasses.asdict(default) if dataclasses.is_dataclass(default) else default)
        keys.append(ConfigKey(key, str(f.type), shown, _meaning(cls, f.name), section=nested is not None))
        if nested:
            keys += config_keys(nested, key + ".")
        elif dataclasses.is_dataclass(item):  # task.mix: the item's own fields (the rest are task's)
            keys += config_keys(item, key + "[].", own_only=True)
        elif optional:
            keys += config_keys(optional[0], key + ".")
    return keys


_OFF = object()  # a key under an optional section that is null (model.lora.rank with model.lora: null)


def _lookup(cfg: Any, key: str) -> Any:
    value = cfg
    for part in key.split("."):
        if value is None:
            return _OFF
        value = getattr(value, part)
    return value


def show_lines(cfg: RunConfig, prefix: str = "") -> list[str]:
    """`key = value  # meaning` for every value key of `cfg` under `prefix` (all when empty)."""
    lines = []
    for k in config_keys():
        if k.section or "[]" in k.key or not (k.key == prefix or k.key.startswith(prefix.rstrip(".") + ".") or not prefix):
            continue
        value = _lookup(cfg, k.key)
        if value is _OFF:
            continue
        if dataclasses.is_dataclass(value):  # an optional section that is on: its keys follow
            value = dataclasses.asdict(value)
        if isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            value = [dataclasses.asdict(v) for v in value]
        lines.append(f"{k.key} = {json.dumps(value, default=str)}  # {k.meaning}")
    return lines


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="print the resolved run config, each key with its meaning",
                       description="Inspect run configs: `show` prints every key of the resolved config "
                                   "(defaults <- YAML <- --set) with its value and one-line meaning.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="config_command", metavar="ACTION")
    show = actions.add_parser("show", help="print the resolved config: key = value  # meaning",
                              description="Print the resolved run config, one `key = value  # meaning` line per key.",
                              epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("prefix", nargs="?", default="", metavar="PREFIX",
                      help="only the keys under this section or key, e.g. train or recipe.loss")
    show.add_argument("--config", default=None, help="run config YAML (default: the built-in defaults)")
    show.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config value, e.g. train.lr=1e-4 or recipe=qwen-dapo (repeatable)")
    return p


def run(args: argparse.Namespace) -> int:
    if args.config_command != "show":
        raise UserError("name an action: workbench config show [--config FILE] [--set KEY=VALUE] [PREFIX]")
    try:
        cfg = load_run_config(args.config, args.overrides)
    except ConfigError as e:
        raise UserError(str(e)) from None
    lines = show_lines(cfg, args.prefix)
    if not lines:
        raise UserError(f"no config key {args.prefix!r}: try a section such as train, model or recipe.loss")
    print("\n".join(lines))
    return 0
