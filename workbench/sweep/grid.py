"""Sweep grids: read and check a grid file, name its points, expand seeds, check the x-axis unit.

    g = load_grid("sweeps/smoke.yaml")               # Grid: points (base merged in), labels, groups
    validate_grid(g, notebook_parameters(nb), nb)    # every parameter is declared by the notebook
    g = with_seeds(g, 3, declared)                   # each point 3 times, seed = base seed + i
    check_x_unit(g, "compute/device_hours")          # points must measure compute in one unit

The format is in `python -m pydoc workbench.sweep`.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from workbench.configtools import ConfigError, load_yaml
from workbench.errors import UserError

INJECTED = ("run_id", "tracking_uri", "experiment", "parent_run_id")
REQUIRED_INJECTED = ("run_id", "tracking_uri")
GRID_KEYS = ("name", "description", "experiment", "base", "grid", "points")


@dataclass
class Grid:
    name: str
    points: list[dict[str, Any]]  # full parameters of each point (base merged in)
    labels: list[str]
    experiment: str | None = None
    path: Path | None = None
    groups: list[str] = field(default_factory=list)  # the point each run belongs to (seeds of one point share it)

    def __post_init__(self) -> None:
        if not self.groups:
            self.groups = list(self.labels)

    def keys(self) -> list[str]:
        return [point_key(p) for p in self.points]


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


def point_key(params: dict[str, Any]) -> str:
    """Stable 12-hex-digit hash of a point's parameters (independent of key order)."""
    text = json.dumps(params, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def short(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else str(v)


def _leaves(p: dict[str, Any], prefix: tuple = ()) -> dict[tuple, Any]:
    """A point's parameters as path -> value: mappings (overrides) opened key by key, so that
    points are told apart by the override that differs, not by the whole merged mapping."""
    out: dict[tuple, Any] = {}
    for k, v in p.items():
        if isinstance(v, dict) and v:
            out.update(_leaves(v, prefix + (str(k),)))
        else:
            out[prefix + (str(k),)] = v
    return out


def _labels(points: list[dict], own: list[dict]) -> list[str]:
    # Name points by what differs between them: "scalerl-loo-no-fp32", "recipe=a,seed=1", or an
    # override by its own name ("train.lr=1e-06"); what all points share (base) is left out. A
    # function of the grid alone: the same grid gives the same labels (resumed sweeps match
    # points by key, the hash of the parameters; labels name files and runs).
    leaves = [_leaves(p) for p in points]
    paths = sorted({k for lv in leaves for k in lv})
    varying = [k for k in paths if len({short(lv[k]) if k in lv else None for lv in leaves}) > 1]
    if not varying:  # a single point: name it by what its entry in the grid file set (base left out)
        varying = sorted({k for p in own for k in _leaves(p)})
    names = {k: ".".join(k[1:]) if len(k) > 1 else k[0] for k in varying}
    counts: dict[str, int] = {}
    for n in list(names.values()) + [k[0] for k in paths if len(k) == 1 and k not in names]:
        counts[n] = counts.get(n, 0) + 1
    names = {k: n if counts[n] == 1 else ".".join(k) for k, n in names.items()}  # "seed" and overrides.seed
    by_value = len(varying) == 1 and len(varying[0]) == 1 and all(isinstance(lv.get(varying[0]), str) for lv in leaves)
    labels = []
    for lv in leaves:
        if by_value:
            labels.append(lv[varying[0]])
        else:
            labels.append(",".join(f"{names[k]}={short(lv[k])}" for k in varying if k in lv) or "default")
    seen: dict[str, int] = {}
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
    return [lab if seen[lab] == 1 else f"{lab}#{point_key(p)[:6]}" for lab, p in zip(labels, points)]


def _check_unique(points: list[dict], where: str) -> None:
    keys = [point_key(p) for p in points]
    for i, k in enumerate(keys):
        if k in keys[:i]:
            raise ConfigError(f"{where}: points {keys.index(k) + 1} and {i + 1} have the same parameters {points[i]}")


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid YAML (format in the package doc); errors name the bad key."""
    path = Path(path)
    if not path.is_file():  # load_yaml would call it a config file
        raise ConfigError(f"grid file not found: {path}")
    data = load_yaml(path)
    unknown = [k for k in data if k not in GRID_KEYS]
    if unknown:
        raise ConfigError(f"{path}: unknown key '{unknown[0]}'; a grid file has: {list(GRID_KEYS)}")
    base = data.get("base") or {}
    if not isinstance(base, dict):
        raise ConfigError(f"{path}: 'base' must be a mapping of parameter: value")
    grid = data.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"{path}: 'grid' must be a mapping of parameter: [values]")
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"{path}: grid.{k} must be a non-empty list of values, got {v!r}")
    explicit = data.get("points") or []
    if not isinstance(explicit, list) or not all(isinstance(p, dict) for p in explicit):
        raise ConfigError(f"{path}: 'points' must be a list of mappings (parameter: value)")
    if not grid and not explicit:
        raise ConfigError(f"{path}: give 'grid' (a cartesian product) and/or 'points' (a list)")
    own = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())] if grid else []
    own += explicit
    points = [_merge(base, p) for p in own]
    _check_unique(points, str(path))
    name = str(data.get("name") or path.stem)
    experiment = data.get("experiment")
    return Grid(name, points, _labels(points, own), str(experiment) if experiment else None, path)


def notebook_parameters(notebook: str | Path) -> dict[str, Any]:
    """Parameters declared in the notebook's `parameters` cell (UserError when there is none)."""
    import papermill

    nb = Path(notebook)
    if not nb.is_file():
        raise UserError(f"notebook not found: {nb}")
    try:
        params = papermill.inspect_notebook(str(nb))
    except Exception as e:  # noqa: BLE001 - papermill raises many kinds for a broken file
        raise UserError(f"cannot read notebook {nb}: {e}") from None
    if not params:
        raise UserError(
            f"{nb} has no cell tagged 'parameters' (or it declares nothing): tag the cell that "
            "assigns the defaults with 'parameters' so a sweep can set them"
        )
    return params


def validate_grid(grid: Grid, declared: dict[str, Any], notebook: str | Path) -> None:
    """Every grid parameter must be declared by the notebook; run_id/tracking_uri too."""
    valid = sorted(k for k in declared if k not in INJECTED)
    for p in grid.points:
        for k in p:
            if k in INJECTED:
                raise UserError(f"grid {grid.name}: '{k}' is set by the sweep itself; remove it from the grid")
            if k not in declared:
                raise UserError(f"grid {grid.name}: unknown parameter '{k}' for {notebook}; its parameters are: {valid}")
    missing = [k for k in REQUIRED_INJECTED if k not in declared]
    if missing:
        raise UserError(
            f"{notebook} must declare {missing} in its parameters cell: the sweep passes the MLflow "
            "run to log to through them"
        )


def _default(declared: dict[str, Any], name: str) -> Any:
    text = (declared.get(name) or {}).get("default")
    try:
        return ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError):
        return text


def with_seeds(grid: Grid, n: int, declared: dict[str, Any]) -> Grid:
    """Each point `n` times, with seed = its seed (or the notebook's default) + i, i < n.

    The runs of one point share its label as their group (fitted jointly); each run is labelled
    `<label>/seed=<s>`. n = 1 leaves the grid as it is."""
    if not isinstance(n, int) or n < 1:
        raise UserError(f"--seeds must be a whole number >= 1 (runs per point), got {n!r}")
    if n == 1:
        return grid
    if "seed" not in declared:
        raise UserError(f"--seeds {n}: the notebook declares no 'seed' parameter to vary")
    points, labels, groups = [], [], []
    for p, label in zip(grid.points, grid.labels):
        base = p.get("seed", _default(declared, "seed"))
        if not isinstance(base, int):
            raise UserError(f"--seeds {n}: point {label} has seed {base!r}, not a whole number to count from")
        for i in range(n):
            points.append({**p, "seed": base + i})
            labels.append(f"{label}/seed={base + i}")
            groups.append(label)
    _check_unique(points, f"grid {grid.name} with --seeds {n}")
    return replace(grid, points=points, labels=labels, groups=groups)


def _flat_overrides(p: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, w in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), w)
        else:
            out[prefix] = v

    walk("", p.get("overrides") or {})
    return out


def x_unit(params: dict[str, Any], x: str) -> str:
    """The unit a point's compute axis `x` is measured in. compute/device_hours counts the devices
    the run holds, so a GPU run's device-hours (GPU-hours) and a CPU run's are different units;
    FLOPs and steps are the same unit everywhere."""
    if x != "compute/device_hours":
        return x
    o = _flat_overrides(params)
    gpu = o.get("generation.backend") == "vllm" or any(
        k.startswith("resources.") and k.endswith("gpus") and float(v or 0) > 0 for k, v in o.items())
    return "GPU-hours" if gpu else "CPU device-hours"


def check_x_unit(grid: Grid, x: str, declared: dict[str, Any] | None = None) -> None:
    """UserError when the points do not share the x-axis unit: a notebook parameter `x` set to
    different compute axes, or device-hours measured on GPUs for some points and CPUs for others."""
    declared = declared or {}
    if "x" in declared:
        axes = {short(p.get("x", _default(declared, "x"))) for p in grid.points}
        if len(axes) > 1:
            raise UserError(f"grid {grid.name}: points do not share the x-axis unit: they set x to {sorted(axes)}; "
                            "a sweep compares every point on one compute axis")
    units: dict[str, str] = {}
    for p, label in zip(grid.points, grid.labels):
        units.setdefault(x_unit(p, x), label)
    if len(units) > 1:
        (u1, a), (u2, b) = list(units.items())[:2]
        raise UserError(f"grid {grid.name}: points do not share the x-axis unit: {x} is {u1} for {a} and {u2} for {b}; "
                        "compare them on --x compute/flops, or run every point on one kind of device")
