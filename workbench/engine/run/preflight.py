"""Checks and resolutions in the driver before any actor starts, so mistakes fail fast in one line.

    cfg = absolute_paths(cfg)          # Ray workers do not share the driver's working directory
    preflight(cfg, build_model=True)   # the task loads, the model folder is valid (builtin: built)
    check_resources(cfg)               # the connected Ray cluster can hold the run's actors
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from workbench.config import RunConfig
from workbench.engine.cluster import required_resources
from workbench.errors import UserError


def absolute_paths(cfg: RunConfig) -> RunConfig:
    """Ray workers do not share the driver's working directory: make every path absolute."""
    out = str(cfg.output_dir().resolve())
    model = cfg.model
    if not model.path.startswith("builtin:"):
        model = dataclasses.replace(model, path=str(Path(model.path).expanduser().resolve()))
    model = dataclasses.replace(model, cache_dir=str(Path(model.cache_dir).expanduser().resolve()))
    task = cfg.task
    if task.path:
        task = dataclasses.replace(task, path=str(Path(task.path).expanduser().resolve()))
    return dataclasses.replace(cfg, out_dir=out, model=model, task=task)


def preflight(cfg: RunConfig, *, build_model: bool) -> None:
    """Fail fast in the driver on bad tasks, model folders and run folders, with a clear message."""
    from workbench.engine.model.load import load_policy
    from workbench.tasks.base import load_task

    out = cfg.output_dir()
    if out.exists() and not out.is_dir():
        raise UserError(f"run folder {out} is a file, not a folder: pick another out_dir (--out)")
    try:  # here, not in the Coordinator actor, where it would fail as a remote traceback
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the run folder {out}: {e.strerror or e}") from None

    task = load_task(cfg.task)
    if build_model or not cfg.model.path.startswith("builtin:"):
        load_policy(cfg.model, task, device="cpu", progress=True)


def check_resources(cfg: RunConfig) -> None:
    """A UserError naming what is short when the connected cluster cannot hold the run."""
    import ray

    total = ray.cluster_resources()
    need = required_resources(cfg)
    r = cfg.resources
    if r.trainer_gpus > 0 and r.trainer_workers > 1 and r.trainer_workers > float(total.get("GPU", 0.0)) + 1e-9:
        raise UserError(
            f"resources.trainer_workers={r.trainer_workers} needs one GPU per worker but the Ray cluster "
            f"has {float(total.get('GPU', 0.0)):g} GPUs: lower resources.trainer_workers"
        )
    for kind in ("GPU", "CPU"):
        have = float(total.get(kind, 0.0))
        if need[kind] > have + 1e-9:
            raise UserError(
                f"the run asks for {need[kind]:g} {kind}s ({cfg.generation.num_generators} generators x "
                f"{getattr(cfg.resources, 'generator_' + kind.lower() + 's'):g} + trainer "
                f"{cfg.resources.trainer_workers} x {getattr(cfg.resources, 'trainer_' + kind.lower() + 's'):g} + evaluator "
                f"{getattr(cfg.resources, 'evaluator_' + kind.lower() + 's'):g}) but the Ray cluster has {have:g}"
            )
