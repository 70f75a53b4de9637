"""MkDocs hook: the reference pages generated from the code at build time (never edited by hand).

    reference/config.md   every RunConfig key: type, default and meaning (the fields' attribute
                          docstrings, read by workbench.commands.config.config_keys)
    reference/cli.md      every `workbench` subcommand's --help (from the CLI's own argparse parser)
    reference/api.md      every name in `workbench.__all__` and `workbench.scaling.__all__` (mkdocstrings),
                          headed by the import path users type
    reference/trl-verl.md TRL's and verl's config names and their workbench keys (workbench/config_aliases.py)

mkdocs.yml names this file under `hooks:`; tests/docs/ build the site with it and read the pages.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
from typing import Any

CONFIG_INTRO = """# Configuration reference

Generated from `workbench/config/` (one module per section) and `workbench/rl/recipe.py`: each
key's meaning is its field's docstring there. A run config is the defaults, then a YAML file (`--config`), then
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


ALIASES_INTRO = """# TRL and verl names

Coming from TRL's `GRPOConfig` (and the transformers `TrainingArguments` it extends, `GRPOTrainer`'s
arguments and TRL's `ModelConfig`), from PEFT's `LoraConfig`, or from verl's `ppo_trainer.yaml`?
Each row gives the workbench key for a name you know, and where the meaning differs; the
[metrics](#metrics) below map the names TRL and verl log to the workbench's. Generated from
`workbench/config_aliases.py`, which the config loader reads too: a TRL, PEFT or verl name in a YAML
file or a `--set` is refused with its workbench key, and a file with several such names is refused
once, naming them all:

    $ workbench config show --set train.learning_rate=1e-6
    workbench config: error: unknown config key 'train.learning_rate' (did you mean train.lr (TRL's learning_rate)?)

Every key is in the [configuration reference](config.md). A TRL default is not a workbench default:
`workbench config show` prints the resolved values.
"""
METRICS_INTRO = """## Metrics

What TRL and verl log, and the workbench metric that measures the same thing (every one is in the
[metrics glossary](../metrics.md)); none: the workbench does not log it. TRL's `eval_` names are its
metrics over the eval set; the workbench's are `val/*`.
"""


def aliases_page() -> str:
    from workbench.config_aliases import ALIASES, METRIC_ALIASES

    lines = [ALIASES_INTRO]
    for tool, title in (("TRL", "TRL (`GRPOConfig`, `GRPOTrainer`, `ModelConfig`)"),
                        ("PEFT", "PEFT (`LoraConfig`, under `model.lora`)"), ("verl", "verl (`ppo_trainer.yaml`)")):
        lines += ["", f"## {title}", "", f"| {tool} | workbench | where it differs |", "|---|---|---|"]
        for a in (a for a in ALIASES if a.tool == tool):
            ours = f"`{a.ours}`" if a.ours else "none"
            lines.append(f"| `{a.theirs}` | {ours} | {_cell(a.note, text=True)} |")
    lines += ["", METRICS_INTRO]
    for tool in ("TRL", "verl"):
        lines += ["", f"### {tool}'s metrics", "", f"| {tool} logs | workbench | where it differs |", "|---|---|---|"]
        for m in (m for m in METRIC_ALIASES if m.tool == tool):
            ours = f"`{m.ours}`" if m.ours else "none"
            lines.append(f"| `{m.theirs}` | {ours} | {_cell(m.note, text=True)} |")
    return "\n".join(lines) + "\n"


API_INTRO = """# Python API

Every public name, from its docstring: `workbench.__all__` (the notebook face), the run
configuration, and `workbench.scaling.__all__` (fit, forecast and compare curves; numpy and scipy
only). Each heading is the import path: `workbench.Session`, `from workbench.scaling import
fit_sigmoid`. `import workbench` is light: `workbench.Session` and `workbench.RunView` load on first use.
"""
# workbench.scaling's names by the sub-package that defines them (docs/concepts/layout.md)
SCALING_SECTIONS = {"fit": "Fit a curve", "forecast": "Forecast", "decide": "Decide"}


def _entry(path: str) -> list[str]:
    return [f"::: {path}", ""]


def _scaling_section(name: str, obj: Any) -> tuple[int, str]:
    """(order, title) of a workbench.scaling name: by its defining sub-package; constants last."""
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return len(SCALING_SECTIONS) + 1, "Constants"
    room = obj.__module__.split(".")[2]  # workbench.scaling.<room>...
    titles = list(SCALING_SECTIONS)
    return (titles.index(room), SCALING_SECTIONS[room]) if room in titles else (len(titles), "Curves and charts")


def api_page() -> str:
    import workbench
    import workbench.scaling as scaling

    lines = [API_INTRO, "## The notebook face (`workbench`)", ""]
    for name in workbench.__all__:
        lines += _entry(f"workbench.{name}")
    lines += ["## Configuration (`workbench.config`)", "",
              "Every key, its type, default and meaning: the [configuration reference](config.md).", ""]
    lines += _entry("workbench.config.load_run_config") + _entry("workbench.config.RunConfig")
    sections: dict[tuple[int, str], list[tuple[int, str]]] = {}
    for name in scaling.__all__:
        obj = getattr(scaling, name)
        kind = 0 if inspect.isfunction(obj) else 1  # functions first, then the classes they return
        sections.setdefault(_scaling_section(name, obj), []).append((kind, name))
    for (_, title), names in sorted(sections.items()):
        lines += [f"## {title} (`workbench.scaling`)", ""]
        for _, name in sorted(names, key=lambda kn: kn[0]):  # stable: __all__ order within a kind
            lines += _entry(f"workbench.scaling.{name}")
    return "\n".join(lines)


# Element names of HTML. Anything else written as <name> in a docstring is a placeholder
# (<run>/policy, val/pass_rate/<domain>) that Markdown passed through as a tag and a browser would hide.
HTML_TAGS = frozenset("""a abbr address area article aside audio b bdi bdo blockquote body br button canvas caption
cite code col colgroup data datalist dd del details dfn dialog div dl dt em embed fieldset figcaption figure footer
form h1 h2 h3 h4 h5 h6 head header hr html i iframe img input ins kbd label legend li link main mark meta nav
noscript object ol optgroup option output p param picture pre progress q rp rt ruby s samp script section select
small source span strong style sub summary sup svg table tbody td template textarea tfoot th thead time title tr
track u ul var video wbr path g rect circle line polyline polygon use defs symbol""".split()) | {"autoref"}  # autorefs' own element
_TAG = re.compile(r"<(/?)([A-Za-z_][\w.-]*)>")


def placeholders_as_text(html: str) -> str:
    """`<run>` and `</think>` as text (&lt;run&gt;), real tags without attributes (<p>, </code>) kept."""
    return _TAG.sub(lambda m: m.group(0) if m.group(2).lower() in HTML_TAGS else f"&lt;{m.group(1)}{m.group(2)}&gt;", html)


PAGES = {"reference/config.md": config_page, "reference/cli.md": cli_page, "reference/api.md": api_page,
         "reference/trl-verl.md": aliases_page}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, make in PAGES.items():
        files.append(File.generated(config, path, content=make()))
    return files


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    # docstrings are Markdown; the API page is the only page made of them
    return placeholders_as_text(html) if page.file.src_uri == "reference/api.md" else html
