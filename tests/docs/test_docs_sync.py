"""The manual stays true to the code, by test: every `workbench ...` command line in the README and
docs/ parses with the CLI's own parser, and every repository path and `section.key` config key
they name exists. (docs/_incoming/ holds notes waiting to be merged: not checked, not built.)"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from workbench.cli import build_parser
from workbench.commands.config import config_keys

REPO = Path(__file__).resolve().parents[2]
TOP_DIRS = ("workbench", "configs", "sweeps", "notebooks", "benchmarks", "examples", "tests", "env", "kernels", "docs")
SECTIONS = ("recipe", "model", "task", "generation", "train", "eval", "resources", "checkpoint", "tracking")
# dotted names that look like config keys but are not: `--by model.params` is the parameter count
# the trainer records (summary.json's model/params), not a key of RunConfig
NOT_CONFIG_KEYS = {"model.params"}


def doc_files() -> list[Path]:
    files = [REPO / "README.md", REPO / "env" / "README.md"]
    files += [p for p in sorted((REPO / "docs").rglob("*.md")) if "_incoming" not in p.parts]
    return files


def code_spans(text: str) -> list[str]:
    """Inline `code` spans, and each line of fenced or indented code blocks."""
    spans = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text)
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    "):
            spans.append(line.strip())
    return spans


def invocation(span: str) -> str | None:
    """The `workbench ...` invocation in a line of code, or None: a `$ ` prompt and a comment
    dropped, the brackets of [--optional ARGS] removed so that their options are checked too. An
    output line (`workbench run: error: ...`) and a placeholder (`workbench COMMAND --help`) are
    not invocations."""
    span = span.removeprefix("$ ").strip()
    words = span.split()
    if len(words) < 2 or words[0] != "workbench" or not re.fullmatch(r"[a-z]+", words[1]):
        return None
    line = span.split("  #")[0].split(" # ")[0].strip()
    return re.sub(r"(?<!\S)\[([^\[\]]*)\](?!\S)", r"\1", line)


def command_lines(text: str) -> list[str]:
    """The `workbench ...` invocations in a page's code, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", text)
    return [line for line in map(invocation, code_spans(text)) if line]


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's sub-commands (or actions, `config show`) by name; {} when it has none."""
    return next((dict(a.choices) for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def command_parser(argv: list[str]) -> argparse.ArgumentParser | None:
    """The parser of the command (and its action, `config show`) that `argv` names; None: no such command."""
    parser = subparsers(build_parser()).get(argv[0])
    actions = subparsers(parser) if parser else {}
    return actions[argv[1]] if len(argv) > 1 and argv[1] in actions else parser


def elided_error(argv: list[str]) -> str | None:
    """A line shortened with `...` or naming only the command: the command (and action) must
    exist and every --option named must be one of its own."""
    parser = command_parser(argv)
    if parser is None:
        return f"no command {argv[0]!r}"
    unknown = [w.split("=")[0] for w in argv if w.startswith("--") and w.split("=")[0] not in _options(parser)]
    return f"unknown option(s) {unknown}" if unknown else None


# a placeholder where a value goes: RUN, RUN_ID, N, C, FILE.jsonl, <run>
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(?:\.[a-z]+)?|<[\w .-]+>")


def with_values(argv: list[str]) -> list[str]:
    """`argv` with each placeholder that follows an option taking a number or a choice replaced by a
    value of that type (`--step N` -> `--step 1`, `--budget C` -> `--budget 1.0`); other
    placeholders stay, as any text is a valid path, name or run."""
    parser = command_parser(argv)
    by_option = {s: a for a in parser._actions for s in a.option_strings} if parser else {}
    out = list(argv)
    for i in range(1, len(out)):
        action = by_option.get(out[i - 1])
        if action is None or not PLACEHOLDER.fullmatch(out[i]):
            continue
        if action.choices:
            out[i] = str(next(iter(action.choices)))
        elif action.type in (int, float):
            out[i] = str(action.type(1))
    return out


def parse_error(line: str) -> str | None:
    """Why `line` does not parse with the CLI's own parser (None: it does), placeholders given values."""
    err = io.StringIO()
    try:
        argv = shlex.split(line)[1:]
    except ValueError as e:
        return f"not a shell line: {e}"
    if "..." in argv or len(argv) == 1 or elided_error(argv):  # also: an abbreviated --option argparse would take
        return elided_error([w for w in argv if w != "..."])
    argv = with_values(argv)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as e:
        return None if e.code == 0 else err.getvalue().strip().splitlines()[-1]
    return None


def test_every_workbench_command_line_in_the_docs_parses():
    bad, seen = [], 0
    for path in doc_files():
        for line in command_lines(path.read_text()):
            seen += 1
            why = parse_error(line)
            if why:
                bad.append(f"{path.relative_to(REPO)}: {line!r}: {why}")
    assert seen > 40, f"only {seen} command lines found: the extraction broke"
    assert not bad, "\n".join(bad)


def test_a_command_line_that_does_not_parse_is_caught():
    assert parse_error("workbench run --config configs/quickstart.yaml --max-stepz 3")  # a typo
    assert "--config" in parse_error("workbench run --max-steps 3")
    assert parse_error("workbench run") is None  # naming the command
    assert parse_error("workbench sweep ... --metrc val/pass_rate")  # elided, but a wrong option
    assert parse_error("workbench nosuch --x 1")
    assert parse_error("workbench config show --config configs/demo.yaml train") is None


def paths_named(text: str) -> list[str]:
    out = []
    for span in code_spans(text):
        for token in re.split(r"[\s(),;'\"]+", span):
            token = token.rstrip(".:")
            # a file under a top folder, `=` and a [123] class allowed in its name (model.n_layer=[123]_seed=0.csv)
            if re.fullmatch(rf"(?:{'|'.join(TOP_DIRS)})/[\w./=\[\]-]+", token) and not re.search(r"[*{}<>]|\.\.\.", token):
                out.append(token)
                continue
            token = token.split("=")[-1].rstrip(".:")
            if re.fullmatch(rf"(?:{'|'.join(TOP_DIRS)})/[\w./-]+", token) and not re.search(r"[*{}<>]|\.\.\.", token):
                out.append(token)
            elif re.fullmatch(r"[\w/]+/[\w]+\.py", token):  # engine/run/preflight.py: relative to workbench/
                out.append(token)
    return out


def package_files() -> list[str]:
    return [p.as_posix() for p in (REPO / "workbench").rglob("*.py")]


def test_every_path_named_in_the_docs_exists():
    from tests.docs.test_metrics_glossary import glossary_keys

    metrics = set(glossary_keys())  # env/turns_mean is a metric (docs/metrics.md), not a file under env/
    missing = []
    for path in doc_files():
        for name in sorted(set(paths_named(path.read_text())) - metrics):
            candidates = [REPO / name, REPO / "workbench" / name, path.parent / name, REPO / f"{name}.py"]
            # a shorthand under a package the page names (`sandbox/harness.py`): a file of workbench/ ending so
            if "[" in name and any(REPO.glob(name)):  # a shell glob's class: some file matches it
                continue
            if not any(c.exists() for c in candidates) and not any(f.endswith("/" + name) for f in package_files()):
                missing.append(f"{path.relative_to(REPO)}: {name}")
    assert not missing, "\n".join(missing)


def config_keys_named(text: str) -> list[str]:
    out = []
    for span in code_spans(text):
        for m in re.finditer(rf"(?<![\w./-])((?:{'|'.join(SECTIONS)})\.[A-Za-z_][\w.]*(?:\[\d*\][\w.]*)*)(?![\w*])", span):
            key = re.sub(r"\[\d*\]", "[]", m.group(1)).rstrip(".").removesuffix("[]")
            if key not in NOT_CONFIG_KEYS and not key.endswith((".py", ".yaml", ".md", ".csv", ".json")):
                out.append(key)
    return out


def test_every_config_key_named_in_the_docs_exists():
    known = {k.key for k in config_keys()}
    unknown = []
    for path in doc_files():
        for key in sorted(set(config_keys_named(path.read_text()))):
            if key not in known:
                unknown.append(f"{path.relative_to(REPO)}: {key}")
    assert not unknown, "\n".join(unknown)


@pytest.mark.parametrize("text, found", [
    ("set `train.lrr=1` here", ["train.lrr"]),
    ("`workbench run --set recipe.npr_max_epochs=null`", ["recipe.npr_max_epochs"]),
    ("`task.mix[1].weight`", ["task.mix[].weight"]),
    ("`fit.A` and `val/pass_rate`", []),
])
def test_config_keys_are_found_where_the_docs_name_them(text, found):
    assert config_keys_named(text) == found


def test_a_path_that_does_not_exist_is_caught():
    # the sweep docstring once cited this grid, which never existed
    assert paths_named("a grid such as `sweeps/lr.yaml` or `engine/run/preflight.py`") == [
        "sweeps/lr.yaml", "engine/run/preflight.py"]
    assert not (REPO / "sweeps/lr.yaml").exists()


def help_command_lines() -> list[tuple[str, str]]:
    """(command, invocation) for every `workbench ...` line that `workbench COMMAND [ACTION] --help`
    prints in its description or its examples (the CLI reference page shows the same text)."""
    out = []
    for name, sub in subparsers(build_parser()).items():
        for parser in [sub, *subparsers(sub).values()]:
            text = "\n".join(filter(None, [parser.description, parser.epilog]))
            for line in re.split(r"\n|; ", text):
                line = invocation(line.strip().removeprefix("examples: ").removeprefix("example: "))
                if line:
                    out.append((name, line))
    return out


def test_every_example_in_the_help_parses():
    """The examples `workbench COMMAND --help` prints are real command lines, their [--optional] flags included."""
    lines = help_command_lines()
    bad = [f"workbench {name} --help: {line!r}: {why}" for name, line in lines if (why := parse_error(line))]
    assert len(lines) >= 15 and not bad, "\n".join(bad) or f"only {len(lines)} examples found"
