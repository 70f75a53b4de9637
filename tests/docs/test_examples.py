"""The command examples a user copies stay runnable: those of README.md, env/README.md, docs/**/*.md
and every `workbench COMMAND --help` parse with the CLI's own parser (tests/docs/test_docs_sync.py:
optional [--flags] and placeholders included), a doc that shows a flag the parser lacks fails, and
the cheap examples run for real, exactly as written, from the repository root."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.docs.test_docs_sync import REPO, command_lines, doc_files, help_command_lines, parse_error, subparsers
from workbench.cli import build_parser, main

# The examples cheap enough to run in a test (seconds, no Ray, no network), by command; each is run
# when every file it names is shipped, it writes no file and fits at most MAX_CURVES curves.
CHEAP = ("config show", "fit")
WRITES = ("--plot", "--out", "--markdown-out", "--export")
MAX_CURVES = 5  # `workbench fit` on a folder backtests every CSV in it: 24 curves take 12 s of CPU


def all_examples() -> list[tuple[str, str]]:
    """(where, invocation) for every example in the docs and in the --help texts."""
    out = [(str(p.relative_to(REPO)), line) for p in doc_files() for line in command_lines(p.read_text())]
    return out + [(f"workbench {name} --help", line) for name, line in help_command_lines()]


def runnable(line: str) -> bool:
    """A cheap example that needs only shipped files and writes none."""
    argv = shlex.split(line)[1:]
    if not any(" ".join(argv).startswith(c + " ") for c in CHEAP) or "..." in argv or any(w in WRITES for w in argv):
        return False
    named = [REPO / w for w in argv if not w.startswith("-") and ("/" in w or re.search(r"\.(csv|yaml|jsonl)$", w))]
    curves = sum(len(list(p.glob("*.csv"))) if p.is_dir() else p.suffix == ".csv" for p in named)
    return bool(named) and all(p.exists() for p in named) and curves <= MAX_CURVES


def test_a_doc_showing_a_flag_the_parser_lacks_fails():
    page = ("Train it:\n\n    workbench run --config configs/quickstart.yaml --max-step 3\n\n"
            "then `workbench check --config CFG --completions FILE.jsonl [--jsn]` and\n\n"
            "    workbench export RUN --step N --out DIR   # a checkpoint\n")
    run, check, export = ("workbench run --config configs/quickstart.yaml --max-step 3",
                          "workbench check --config CFG --completions FILE.jsonl --jsn",  # [--jsn] is checked too
                          "workbench export RUN --step N --out DIR")
    assert sorted(command_lines(page)) == sorted([run, check, export])
    assert "--max-step" in parse_error(run)  # argparse would take the abbreviation; the docs spell options out
    assert "--jsn" in parse_error(check)
    assert parse_error(export) is None  # N is a placeholder: --step gets a number
    assert "--stepp" in parse_error("workbench export <run> --stepp N")
    assert "invalid int" in parse_error("workbench export runs/x --step two")  # a real value of the wrong type


@pytest.fixture(scope="module")
def cheap_examples() -> list[tuple[str, str]]:
    return [(where, line) for where, line in all_examples() if runnable(line)]


def test_cheap_examples_are_found_in_the_docs_and_the_help(cheap_examples):
    wheres = {where for where, _ in cheap_examples}
    assert any(w.endswith(".md") for w in wheres) and any(w.endswith("--help") for w in wheres), wheres
    assert {c for c in CHEAP if any(line.startswith(f"workbench {c} ") for _, line in cheap_examples)} == set(CHEAP)


def test_the_cheap_examples_run_as_written(cheap_examples, monkeypatch, capsys):
    """Each runs in this process from the repository root, as a user would type it, and does its job."""
    monkeypatch.chdir(REPO)
    for line, where in dict(reversed([(line, where) for where, line in cheap_examples])).items():  # each line once
        argv = shlex.split(line)[1:]
        assert main(argv) == 0, f"{where}: {line}"
        out = capsys.readouterr().out
        if argv[0] == "fit":  # one curve's fit, or the backtest of a folder's curves
            assert re.search(r"^(sigmoid|flat) fit on \d+ points|^prefix 0\.\d+ over \d+ curves", out, re.M), \
                f"{where}: {line}\n{out[:500]}"
        else:  # config show: the keys (under PREFIX when one is given), each --set KEY=VALUE applied
            shown = dict(re.findall(r"^(\S+) = (.*?)  #", out, re.M))
            prefix = build_parser().parse_args(argv).prefix
            assert len(shown) >= 5 and all(k.startswith(prefix) for k in shown), f"{where}: {line}\n{out[:500]}"
            for key, value in (argv[i + 1].split("=", 1) for i, w in enumerate(argv) if w == "--set"):
                got = shown[key if "." in key else f"{key}.name"].strip('"')
                assert got == value or float(got) == float(value), f"{where}: {line}: {key} shows {got}"


def test_every_command_help_describes_it_and_shows_an_example():
    """`workbench COMMAND --help` says what the command does beyond its name, shows a runnable
    example, and is complete in itself (no pointer to pydoc)."""
    examples = {name for name, _ in help_command_lines()}
    for name, sub in subparsers(build_parser()).items():
        text = sub.format_help()
        assert sub.description and len(sub.description.split()) >= 8, f"workbench {name} --help has no description"
        assert name in examples, f"workbench {name} --help shows no example"
        assert "pydoc" not in text, f"workbench {name} --help sends users to pydoc"


def test_the_manuals_front_page_links_every_how_to_guide():
    index = (REPO / "docs" / "index.md").read_text()
    missing = [p.name for p in sorted((REPO / "docs" / "howto").glob("*.md")) if f"](howto/{p.name})" not in index]
    assert not missing, f"docs/index.md does not link: {missing}"


def test_findings_explains_why_its_compute_axis_is_flops():
    """`findings` alone defaults to compute/flops (a study's runs are compared across machine loads);
    its --help and guide say so, so a user of the other commands' device-hours is not surprised."""
    findings = subparsers(build_parser())["findings"]
    x = next(a for a in findings._actions if "--x" in a.option_strings)
    assert x.default == "compute/flops"
    assert "compute/device_hours" in findings.epilog and "compute/device_hours" in x.help
    guide = " ".join((REPO / "docs" / "howto" / "findings.md").read_text().split())
    assert "this command's own default" in guide and "default to `compute/device_hours`" in guide
    for other in ("compare", "sweep"):
        sub = subparsers(build_parser())[other]
        assert next(a for a in sub._actions if "--x" in a.option_strings).default == "compute/device_hours"
