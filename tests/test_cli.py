"""workbench.cli: every command module is imported by name, so a missing one fails `workbench` loudly
instead of dropping its sub-command from the help."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from workbench.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]


def test_the_parser_offers_exactly_the_commands_each_with_its_handler():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    assert list(sub.choices) == list(COMMANDS)
    for name, module in COMMANDS.items():
        assert sub.choices[name].get_default("_handler") is module.run, name


def test_a_missing_command_module_fails_the_import_with_its_name():
    # a finder that hides one command module, as a deleted or renamed file would
    script = textwrap.dedent("""
        import importlib.abc, sys

        class Hide(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "workbench.commands.ui":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, Hide())
        import workbench.cli
        print("imported with", sorted(workbench.cli.COMMANDS))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert "ImportError" in last or "ModuleNotFoundError" in last, proc.stderr
    assert "'ui'" in last or "workbench.commands.ui" in last, last


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    """`workbench samples RUN | head -3`: no BrokenPipeError traceback, the SIGPIPE status (141)."""
    from tests.helpers.samples_folder import write_samples_run

    run = write_samples_run(tmp_path / "run")
    # stdout is a pipe whose reader has already gone (as after `head` exits): every write fails
    code = ("import os, sys; r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
            f"from workbench.cli import main; sys.exit(main(['samples', {str(run)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 141 and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
