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


def command_lines(text: str) -> list[str]:
    """`workbench ...` invocations: continuation lines joined, `$ ` prompts and comments dropped,
    [--optional ARGS] of usage lines removed. An output line (`workbench run: error: ...`) and a
    placeholder (`workbench COMMAND --help`) are not invocations."""
    text = re.sub(r"\\\n\s*", " ", text)
    out = []
    for span in code_spans(text):
        span = span.removeprefix("$ ").strip()
        words = span.split()
        if len(words) < 2 or words[0] != "workbench" or not re.fullmatch(r"[a-z]+", words[1]):
            continue
        line = span.split("  #")[0].split(" # ")[0].strip()
        out.append(re.sub(r"\[[^\[\]]*\]", "", line))
    return out


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((dict(a.choices) for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def elided_error(argv: list[str]) -> str | None:
    """A line shortened with `...` or naming only the command: the command (and action) must
    exist and every --option named must be one of its own."""
    parser = _subparsers(build_parser()).get(argv[0])
    if parser is None:
        return f"no command {argv[0]!r}"
    actions = _subparsers(parser)
    if actions and len(argv) > 1 and argv[1] in actions:
        parser = actions[argv[1]]
    unknown = [w.split("=")[0] for w in argv if w.startswith("--") and w.split("=")[0] not in _options(parser)]
    return f"unknown option(s) {unknown}" if unknown else None


def parse_error(line: str) -> str | None:
    """Why `line` does not parse with the CLI's own parser (None: it does)."""
    err = io.StringIO()
    try:
        argv = shlex.split(line)[1:]
    except ValueError as e:
        return f"not a shell line: {e}"
    if "..." in argv or len(argv) == 1:
        return elided_error([w for w in argv if w != "..."])
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
        for token in re.split(r"[\s(),;'\"=]+", span):
            token = token.rstrip(".:")
            if re.fullmatch(rf"(?:{'|'.join(TOP_DIRS)})/[\w./-]+", token) and not re.search(r"[*{}<>]|\.\.\.", token):
                out.append(token)
            elif re.fullmatch(r"[\w/]+/[\w]+\.py", token):  # engine/run/preflight.py: relative to workbench/
                out.append(token)
    return out


def package_files() -> list[str]:
    return [p.as_posix() for p in (REPO / "workbench").rglob("*.py")]


def test_every_path_named_in_the_docs_exists():
    missing = []
    for path in doc_files():
        for name in sorted(set(paths_named(path.read_text()))):
            candidates = [REPO / name, REPO / "workbench" / name, path.parent / name, REPO / f"{name}.py"]
            # a shorthand under a package the page names (`sandbox/harness.py`): a file of workbench/ ending so
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


def test_every_example_in_the_help_parses():
    """The examples `workbench COMMAND --help` prints (and the CLI reference page shows) are real command lines."""
    bad, seen = [], 0
    for name, sub in _subparsers(build_parser()).items():
        for parser in [sub, *_subparsers(sub).values()]:
            for line in re.split(r"\n|; ", parser.epilog or ""):
                line = line.strip().removeprefix("examples: ").removeprefix("example: ").split("  #")[0]
                if line.startswith("workbench "):
                    seen += 1
                    why = parse_error(line)
                    if why:
                        bad.append(f"workbench {name} --help: {line!r}: {why}")
    assert seen >= 15 and not bad, "\n".join(bad) or f"only {seen} examples found"
