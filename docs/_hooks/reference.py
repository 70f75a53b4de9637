"""MkDocs hook: the reference pages generated from the code at build time (never edited by hand).

    reference/config.md   every RunConfig key: type, default and meaning (the fields' attribute
                          docstrings, read by workbench.commands.config.config_keys)
    reference/cli.md      every `workbench` subcommand's --help (from the CLI's own argparse parser)

mkdocs.yml names this file under `hooks:`; tests/docs/ build the site with it and read the pages.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

CONFIG_INTRO = """# Configuration reference

Generated from `workbench/config.py` and `workbench/rl/recipe.py`: each key's meaning is its
field's docstring there. A run config is the defaults, then a YAML file (`--config`), then
`--set key=value` overrides; unknown keys fail with the dotted path and a suggestion. `recipe:`
is a preset name (`scalerl`, `qwen-dapo`, ...) or `{base: scalerl, ...changes}`; `recipe=NAME`
as an override swaps the whole preset. Print a resolved config with its meanings:

    workbench config show --config configs/quickstart.yaml --set train.lr=3e-4

`task.mix[].KEY` are the keys of each `task.mix` source, beside every `task.*` key.
"""


def _cell(value: Any, *, text: bool = False) -> str:
    """A table cell: pipes escaped; in running text, <name> kept as text, not read as an HTML tag."""
    s = str(value).replace("|", "\\|").replace("\n", " ")
    return s.replace("<", "&lt;").replace(">", "&gt;") if text else s


def config_page() -> str:
    from workbench.commands.config import config_keys

    keys = config_keys()
    meanings = {k.key: k.meaning for k in keys if k.section}
    tables: dict[str, list[str]] = {}  # section ("" for the top level) -> its rows, in declaration order
    for k in keys:
        if k.section:
            tables.setdefault(k.key, [])
            continue
        parent = k.key.rsplit(".", 1)[0] if "." in k.key else ""
        default = json.dumps(k.default, default=str)
        tables.setdefault(parent, []).append(f"| `{k.key}` | `{_cell(k.type)}` | `{_cell(default)}` | {_cell(k.meaning, text=True)} |")
    lines = [CONFIG_INTRO]
    for section, rows in tables.items():
        if not rows:
            continue
        title = f"`{section}`" if section else "Top-level keys"
        lines += ["", f"## {title}", ""]
        if section in meanings:
            lines += [_cell(meanings[section], text=True), ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|", *rows]
    return "\n".join(lines) + "\n"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse offers no public way to list subcommands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_page() -> str:
    from workbench.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: the same page on every machine
    parser = build_parser()
    lines = ["# Command-line reference", "",
             "Generated from the CLI's own argparse parsers: each section is what "
             "`workbench COMMAND --help` prints.", "",
             "```text", parser.format_help().rstrip(), "```"]
    for name, sub in _subparsers(parser).items():
        lines += ["", f"## workbench {name}", "", "```text", sub.format_help().rstrip(), "```"]
        for action, subsub in _subparsers(sub).items():
            lines += ["", f"### workbench {name} {action}", "", "```text", subsub.format_help().rstrip(), "```"]
    return "\n".join(lines) + "\n"


PAGES = {"reference/config.md": config_page, "reference/cli.md": cli_page}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, make in PAGES.items():
        files.append(File.generated(config, path, content=make()))
    return files
