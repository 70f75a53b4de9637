"""Run folders and configs: where a run lives, how it was configured, what it left behind.

    cfg = resolve_config("configs/my.yaml", recipe="qwen-dapo", overrides={"train.lr": 1e-4})
    path = default_config_path()            # <source tree>/configs/quickstart.yaml, or None
    items = override_items(["train.lr=1e-4"])   # {'train.lr': 0.0001}; a dict passes through
    folder = run_folder("my-run")           # a path, else <project>/runs/<name>
    cfg = saved_config(folder)              # config.json, else the latest checkpoint's config
    summary = read_summary(folder, wait=10) # summary.json (written when the run ends), or None
    cfg = with_max_steps(cfg, 400)          # the step target (train.max_steps), checked
    cfg = attached_config(status, "my-run") # the config of a live run from its actor's status

A run folder holds config.json, metrics.jsonl (the engine's rows), summary.json, checkpoints/
and the fit artifacts (`workbench.runs.report.FIT_FILES`).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from workbench.config import RunConfig, load_run_config, run_config_from_dict
from workbench.configtools import flatten, parse_override, to_dict
from workbench.errors import UserError, as_number


def default_config_path() -> Optional[Path]:
    """configs/quickstart.yaml of the source tree this package lives in (None if absent)."""
    path = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
    return path if path.is_file() else None


def override_items(overrides: dict[str, Any] | list[str] | None) -> dict[str, Any]:
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    if isinstance(overrides, (list, tuple)):
        return dict(parse_override(o) for o in overrides)
    raise UserError(
        f"overrides must be a dict {{'train.lr': 1e-4}} or a list of 'key=value' strings, not {type(overrides).__name__}"
    )


def unique_name(base: str) -> str:
    return f"{base}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def run_folder(target: str | Path) -> Path:
    """`target` as a run folder: a path, else <project>/runs/<target>."""
    from workbench.tracking.store import project_root

    if not isinstance(target, (str, Path)):
        raise UserError(f"a run is named by its folder or its name (a str or Path), got a {type(target).__name__}: {target!r}")
    path = Path(target)
    if (path / "metrics.jsonl").is_file() or (path / "checkpoints").is_dir():
        return path.resolve()
    by_name = project_root() / "runs" / str(target)
    if (by_name / "metrics.jsonl").is_file() or (by_name / "checkpoints").is_dir():
        return by_name
    raise UserError(f"no run in {path} (nor in {by_name}): expected metrics.jsonl or checkpoints/ there")


def saved_config(out_dir: Path) -> Optional[RunConfig]:
    """The run's config: config.json (written at run start), else the latest checkpoint's state."""
    from workbench.runs.checkpoint import CheckpointStore

    path = out_dir / "config.json"
    data = None
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise UserError(f"{path} is not valid JSON ({e}): the run's config cannot be read") from None
        if not isinstance(data, dict) or not data:
            raise UserError(f"{path} holds no run config (expected the JSON object a run writes at its start)")
    if data is None:
        store = CheckpointStore(out_dir / "checkpoints")
        state = store.latest_state()
        data = state.get("config") if state else None
        path = store.path_for(store.latest_step() or 0) / "state.json"  # where the config came from, for errors
    if not data:
        return None
    try:
        return run_config_from_dict(data)
    except UserError as e:
        raise UserError(f"{path}: {e}") from None


def resolve_config(config: str | Path | None = None, recipe: str | None = None,
                   overrides: dict[str, Any] | list[str] | None = None, name: str | None = None) -> RunConfig:
    """The config of a new run: the file `config` (default: `default_config_path()`), with the
    preset `recipe` swapped in (keeping the file's own recipe adjustments, see
    `workbench.rl.recipe.swap_recipe`) and `overrides` applied; named `name`, else
    `<config name>-<time>-<4 hex>`; writing to <project>/runs/<name> unless it sets out_dir."""
    from workbench.configtools import load_yaml
    from workbench.rl.recipe import swap_recipe
    from workbench.tracking.store import project_root

    items = override_items(overrides)
    if config is None:
        config = default_config_path()
    elif not Path(config).is_file():
        raise UserError(f"config file not found: {config}")
    if recipe is not None:
        items["recipe"] = swap_recipe(load_yaml(config).get("recipe") if config else None, recipe)
    cfg = load_run_config(config, items)
    if name is not None and (not str(name).strip() or "/" in str(name)):
        raise UserError(f"run name {name!r} must be non-empty and contain no '/'")
    cfg = dataclasses.replace(cfg, name=str(name) if name is not None else unique_name(cfg.name))
    if cfg.out_dir is None:
        cfg = dataclasses.replace(cfg, out_dir=str(project_root() / "runs" / cfg.name))
    return cfg


def read_summary(out_dir: Path, *, wait: float = 0.0) -> Optional[dict[str, Any]]:
    """The run's summary.json; None when absent after waiting up to `wait` seconds for it (the
    engine's status turns final just before it writes the file)."""
    path = Path(out_dir) / "summary.json"
    deadline = time.monotonic() + wait
    while True:
        if path.is_file():
            text = path.read_text()
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                # a writer that is not atomic (an older engine, a copy in progress) leaves it
                # empty or cut for a moment: wait for the rest, then name the file
                if time.monotonic() >= deadline:
                    raise UserError(f"{path} is not valid JSON ({e}); the run may still be writing it") from None
        elif time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def has_checkpoint(out_dir: Path) -> bool:
    """True when the run folder holds a checkpoint to resume from."""
    return (Path(out_dir) / "checkpoints" / "LATEST").is_file()


# Config keys that say how a run executes, not what it trains (prefixes): a resume may change them.
# The policy's parameter count, counted by the trainer: summary.json's PARAMS_SUMMARY_KEY and the MLflow
# tag PARAMS_KEY; `workbench predict --by model.params` predicts along it (runs/by_setting.py).
PARAMS_KEY = "model.params"
PARAMS_SUMMARY_KEY = "model/params"

EXECUTION_KEYS = (
    "name", "out_dir", "tracking.", "resources.", "checkpoint.", "model.cache_dir", "train.max_steps", "train.micro_batch_",
    "train.gradient_checkpointing", "train.max_nonfinite_in_a_row", "generation.backend", "generation.num_generators",
    "generation.max_batch_sequences", "generation.vllm_", "eval.every_steps",
)


def resume_changes(saved: RunConfig, new: RunConfig) -> list[str]:
    """The keys outside EXECUTION_KEYS on which `new` differs from the run's `saved` config, as
    "key: old -> new" (both with absolute paths, as a run saves them): what a resume must not change,
    or the curve would mix two settings."""
    a, b = flatten(to_dict(saved)), flatten(to_dict(new))
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if not k.startswith(EXECUTION_KEYS) and a.get(k) != b.get(k)]


def checkpoint_step(out_dir: Path) -> Optional[int]:
    """The step of the run folder's last complete checkpoint (None without one)."""
    from workbench.runs.checkpoint import CheckpointStore

    return CheckpointStore(Path(out_dir) / "checkpoints").latest_step()


def with_max_steps(cfg: RunConfig, max_steps: int) -> RunConfig:
    """`cfg` with the step target `max_steps` (train.max_steps, its one owner)."""
    as_number("max_steps", max_steps, integer=True)
    if int(max_steps) < 1:
        raise UserError(f"max_steps must be >= 1, got {max_steps}")
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=int(max_steps)))


def attached_config(status: dict[str, Any], name: str) -> RunConfig:
    """The config of a live run from its actor's `status` (out_dir, max_steps): the folder's saved
    config (the built-in defaults when it has none), with the engine's step target."""
    out = Path(status["out_dir"])
    cfg = saved_config(out) or dataclasses.replace(RunConfig(), name=name, out_dir=str(out))
    return with_max_steps(cfg, status["max_steps"]) if status.get("max_steps") else cfg
