"""The package stays readable: no module over 450 lines, no function over 100 (issue 23's limits).

A module that grows past the limit splits by role (as sigmoid.py's R0 rules moved to data.py);
a function past it splits into named steps (as run_sweep did: validate, open, schedule, finish).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 100


def test_no_module_is_over_450_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def test_no_function_is_over_100_lines():
    long = {}
    for p in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(PACKAGE)}:{node.lineno} {node.name}"] = n
    assert not long, long


def test_session_keeps_to_control_and_constructors():
    """workbench/session.py stays under 300 lines (issue 53): control, polling and constructors; a new job
    goes to the module that owns it (finding a run that exists: session_attach.py)."""
    n = len((PACKAGE / "session.py").read_text().splitlines())
    assert n < 300, f"workbench/session.py has {n} lines: move a cohesive part to its own module"
