"""Imports point one way: no import cycle in workbench/, no module importing from a layer above it.

The imports are read from the source (ast), not executed; imports inside functions (lazy ones)
count like the others, unless listed in LAZY_EXCEPTIONS with the reason. Implicit imports of
parent packages (importing a.b.c runs a/__init__ and a/b/__init__) are not edges: a package's
__init__ may be its door and import its own modules.

The layers, lowest first. A module may import from its own layer and the ones below:

    errors, configtools, config_aliases   leaf helpers
    scaling               the science of the curve: stdlib, numpy, scipy (+ pandas, altair for tables and charts)
    rl                    the recipe's math: torch, never Ray
    tasks, envs           verifiable tasks (tasks/env: environments' episodes); the shipped environments (stdlib only)
    config                RunConfig, one module per section beside its checks (workbench/config/)
    tracking              recording: the metrics.jsonl sink, the MLflow store and queries, a session's MLflow run
    runs                  the run record, read by everyone: folder, view, fit and report, forecast, fits of many runs
    engine, kernel        the run on Ray (its sub-packages free among themselves, cycles aside); the Jupyter kernel
    widgets, sweep, session, session_attach   the notebook face
    doors                 workbench/__init__, workbench.cli and workbench.commands (compare, ui, check)

A room's own command module (scaling.fit_command, engine.run.run_command, ...) sits in its room: a command that
needs a room above its own lives in workbench/commands. This order is the one place it is written.

The rooms in PARTS_ONLY (engine/train, engine/rollout) never name the RunConfig: their components
take their config parts, which engine/run/actors.py picks from it.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"

LAYERS: list[tuple[str, ...]] = [
    ("errors", "configtools", "config_aliases"),
    ("scaling",),
    ("rl",),
    ("tasks", "envs"),
    ("config",),
    ("tracking",),
    ("runs",),
    ("engine", "kernel"),
    ("widgets", "sweep", "session", "session_attach"),
    ("cli", "commands"),  # the doors: workbench.cli and workbench.commands.*; workbench/__init__ too
]
# (importer, imported) -> why this upward import inside a function is fine. Keep it empty if you can.
LAZY_EXCEPTIONS: dict[tuple[str, str], str] = {}
# third-party packages a room may import (None: any); the standard library is always allowed
SCALING_THIRD_PARTY = {"numpy", "scipy", "pandas", "altair", "vl_convert"}
NEVER = {"rl": {"ray", "mlflow", "ipywidgets", "papermill", "vllm"}, "scaling": {"ray", "torch", "mlflow", "ipywidgets"}}
# rooms whose components get their config parts (sections, values), never the whole RunConfig:
# engine/run/actors.py picks each role's parts from it, in one place
PARTS_ONLY = ("engine.train", "engine.rollout")


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package __init__) for every .py under `root`."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def imports(root: Path) -> tuple[set[tuple[str, str, int, bool]], set[tuple[str, str, int]]]:
    """(internal edges (importer, imported, line, lazy), external imports (importer, top-level name, line))."""
    mods = modules(root)
    top = root.name
    edges, external = set(), set()
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        lazy_nodes = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                      for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the importer's package
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                if t.split(".")[0] != top:
                    external.add((name, t.split(".")[0], node.lineno))
                    continue
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t != name:
                    edges.add((name, t, node.lineno, id(node) in lazy_nodes))
    return edges, external


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:  # workbench/__init__: the package's door
        return len(LAYERS) - 1
    for i, room in enumerate(LAYERS):
        if parts[1] in room:
            return i
    raise AssertionError(f"{module}: not in any layer of tests/test_imports.py: add its room to LAYERS")


def cycles(edges: set[tuple[str, str, int, bool]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in edges:
        graph.setdefault(a, set()).add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward(edges: set[tuple[str, str, int, bool]]) -> list[str]:
    return sorted(
        f"{a}:{line} imports {b}" + (" (inside a function)" if lazy else "")
        for a, b, line, lazy in edges
        if layer(b) > layer(a) and not (lazy and (a, b) in LAZY_EXCEPTIONS)
    )


def forbidden_external(external: set[tuple[str, str, int]]) -> list[str]:
    bad = []
    for mod, name, line in external:
        room = mod.split(".")[1] if "." in mod else ""
        if name in NEVER.get(room, ()):
            bad.append(f"{mod}:{line} imports {name}")
        elif room == "scaling" and name not in SCALING_THIRD_PARTY and name not in sys.stdlib_module_names:
            bad.append(f"{mod}:{line} imports {name} (scaling: stdlib, {', '.join(sorted(SCALING_THIRD_PARTY))})")
    return sorted(bad)


def _annotation(node: ast.AST) -> str:
    """The text of the annotation on `node` (an argument's, a variable's, a function's return), else ""."""
    if isinstance(node, (ast.arg, ast.AnnAssign)):
        ann = node.annotation
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        ann = node.returns
    else:
        ann = None
    return ast.unparse(ann) if ann is not None else ""


def whole_config_uses(root: Path, rooms: tuple[str, ...] = PARTS_ONLY) -> list[str]:
    """`module:line names RunConfig` wherever a module under `rooms` imports the RunConfig, refers
    to it, or takes or returns it (annotations, quoted ones too)."""
    out = set()
    for name, (path, _) in modules(root).items():
        room = name.split(".", 1)[1] if "." in name else ""
        if not any(room == r or room.startswith(r + ".") for r in rooms):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            named = (
                (isinstance(node, ast.alias) and node.name.split(".")[-1] == "RunConfig")
                or (isinstance(node, ast.Name) and node.id == "RunConfig")
                or (isinstance(node, ast.Attribute) and node.attr == "RunConfig")
                or re.search(r"\bRunConfig\b", _annotation(node)) is not None
            )
            if named:
                out.add(f"{name}:{node.lineno} names RunConfig")
    return sorted(out)


def write_package(pkg: Path, files: dict[str, str]) -> None:
    """A package on disk for the walk's own tests: relative path -> source."""
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)


def test_no_import_cycle_in_workbench():
    edges, _ = imports(PACKAGE)
    assert cycles(edges) == []


def test_no_module_imports_from_a_layer_above_it():
    edges, _ = imports(PACKAGE)
    assert upward(edges) == []


def test_scaling_and_rl_know_nothing_of_ray_or_notebooks():
    _, external = imports(PACKAGE)
    assert forbidden_external(external) == []


def test_the_engines_components_take_their_config_parts_not_the_run_config():
    assert whole_config_uses(PACKAGE) == []


def test_the_parts_check_finds_imports_references_and_annotations(tmp_path):
    pkg = tmp_path / "workbench"
    files = {
        "__init__.py": "",
        "config.py": "class RunConfig: ...\n",
        "engine/__init__.py": "",
        "engine/train/__init__.py": "",
        "engine/train/trainer.py": "from workbench.config import RunConfig\n",
        "engine/train/group.py": "import workbench.config as c\n\n\ndef f(x):\n    return c.RunConfig(x)\n",
        "engine/rollout/__init__.py": "",
        "engine/rollout/vllm/backend.py": "def g(cfg: 'RunConfig') -> None: ...\n\n\ndef h() -> \"list[RunConfig]\": ...\n",
        "engine/rollout/worker.py": '"""Gets parts, not the RunConfig."""\nfrom workbench.config import ModelConfig  # RunConfig\n',
        "engine/trainer.py": "from workbench.config import RunConfig\n",  # not in a parts-only room
        "engine/run/actors.py": "from workbench.config import RunConfig\n",  # the place that picks the parts
    }
    write_package(pkg, files)
    assert whole_config_uses(pkg) == [
        "workbench.engine.rollout.vllm.backend:1 names RunConfig",
        "workbench.engine.rollout.vllm.backend:4 names RunConfig",
        "workbench.engine.train.group:5 names RunConfig",
        "workbench.engine.train.trainer:1 names RunConfig",
    ]


def test_every_exception_is_still_needed():
    edges, _ = imports(PACKAGE)
    used = {(a, b) for a, b, _, lazy in edges if lazy and layer(b) > layer(a)}
    assert set(LAZY_EXCEPTIONS) <= used, "an exception no longer needed: remove it"


def test_the_walk_finds_cycles_upward_and_lazy_imports(tmp_path):
    pkg = tmp_path / "workbench"
    files = {
        "__init__.py": "",
        "errors.py": "from workbench.scaling import fit  # upward, module level\n",
        "scaling/__init__.py": "from .fit import f\n",
        "scaling/fit.py": "import numpy\nimport ray\n\ndef f():\n    from workbench.scaling import g\n",
        "scaling/g.py": "from . import fit\n",
        "rl/__init__.py": "def h():\n    import workbench.engine.run  # lazy, upward\n",
        "engine/__init__.py": "",
        "engine/run.py": "from workbench.rl import h\n",
    }
    write_package(pkg, files)
    edges, external = imports(pkg)
    # fit -> g (a lazy import) -> fit; rl -> engine.run (lazy) -> rl
    assert sorted(cycles(edges)) == [["workbench.engine.run", "workbench.rl"], ["workbench.scaling.fit", "workbench.scaling.g"]]
    assert upward(edges) == [
        "workbench.errors:1 imports workbench.scaling.fit",
        "workbench.rl:2 imports workbench.engine.run (inside a function)",
    ]
    assert forbidden_external(external) == ["workbench.scaling.fit:2 imports ray"]


def test_a_rooms_own_cli_may_not_import_upward_but_a_command_may(tmp_path):
    pkg = tmp_path / "workbench"
    files = {
        "__init__.py": "",
        "runs/__init__.py": "",
        "runs/fits.py": "",
        "tracking/__init__.py": "",
        "tracking/cli.py": "def run(args):\n    from workbench.runs import fits\n",
        "commands/__init__.py": "",
        "commands/compare.py": "from workbench.runs import fits\nfrom workbench.tracking import cli\n",
    }
    write_package(pkg, files)
    edges, _ = imports(pkg)
    assert upward(edges) == ["workbench.tracking.cli:2 imports workbench.runs.fits (inside a function)"]
