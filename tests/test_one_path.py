"""One path per name: no module exists only to re-export another under an old path (issue 44).

Before 1.0 a move is a move: the CHANGELOG lists the renames, and the old paths fail to import.
"""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "workbench"

# old paths removed by issue 44 (the CHANGELOG's rename table)
OLD_MODULES = [
    "workbench.scaling.moved",
    "workbench.scaling.sigmoid",
    "workbench.scaling.engine",
    "workbench.scaling.early_stop",
    "workbench.scaling.cli",
    "workbench.engine.reward",
    "workbench.sweep.stop",
]


def _alias_only(path: pathlib.Path) -> bool:
    """A module whose body is only a docstring, imports and `__all__`: it defines nothing."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            continue
        return False
    return True


def test_no_module_only_re_exports_another() -> None:
    aliases = [str(p.relative_to(PACKAGE.parent)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.name != "__init__.py" and _alias_only(p)]
    assert aliases == [], f"modules that only re-export: {aliases}"


@pytest.mark.parametrize("name", OLD_MODULES)
def test_old_module_paths_no_longer_import(name: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)


def test_old_attribute_names_are_gone() -> None:
    from workbench.rl import step
    from workbench.scaling import SigmoidFit

    assert not hasattr(step, "plan_step")
    assert not hasattr(SigmoidFit, "D")
