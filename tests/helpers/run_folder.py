"""A finished run folder (config.json, metrics.jsonl, summary.json) with a known sigmoid curve, written
the way the engine writes it, so the notebook face and the run record can be tested without Ray."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from workbench.config import load_run_config
from workbench.configtools import to_dict
from workbench.runs.folder import default_config_path

TRUE = {"A": 0.62, "B": 1.8, "C_mid": 0.01, "R0": 0.10}


def _sigmoid(t: dict, C: float) -> float:
    return t["R0"] + (t["A"] - t["R0"]) / (1 + (t["C_mid"] / C) ** t["B"]) if C > 0 else t["R0"]


def write_run(folder: Path, n_evals: int, *, every: int = 10, seed: int = 0, status: str = "finished", true: dict = TRUE,
              domains: dict | None = None) -> Path:
    """Evaluations at steps 0, every, 2*every, ... on R(C) with C = 0.0005 device-hours per step
    (`true`: the curve's A, B, C_mid, R0; A = R0 gives a run that does not learn). `domains`
    (name -> true curve): a task mixture's run, each domain's val/pass_rate/<name> on its own
    curve and the overall val/pass_rate their mean."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = load_run_config(default_config_path(), {"name": folder.name, "eval.every_steps": every})
    (folder / "config.json").write_text(json.dumps(to_dict(cfg), default=str))
    rng = np.random.default_rng(seed)
    rows = []
    last = max(0, (n_evals - 1) * every)
    for step in range(0, last + 1):
        C = step * 5e-4
        if step:
            rows.append({"step": step, "train/reward_mean": -0.5 + step / 1000, "train/pass_rate": 0.2, "train/entropy": 0.9,
                         "train/staleness_mean": 3.0, "train/staleness_max": 7.0, "train/truncation_rate": 0.0,
                         "sampler/retired_share": min(0.25, step / 400),
                         "compute/device_hours": C, "compute/flops": C * 1e12})
        if step % every == 0 and step // every < n_evals:
            row = {"step": step, "val/pass_rate_se": 0.01, "compute/device_hours": C, "compute/flops": C * 1e12}
            if domains:
                for name, t in domains.items():
                    row[f"val/pass_rate/{name}"] = float(_sigmoid(t, C) + (rng.normal(0, 0.004) if C > 0 else 0.0))
                    row[f"val/pass_rate_se/{name}"] = 0.01
                row["val/pass_rate"] = float(np.mean([row[f"val/pass_rate/{n}"] for n in domains]))
            else:
                row["val/pass_rate"] = float(_sigmoid(true, C) + rng.normal(0, 0.004)) if C > 0 else true["R0"]
            rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps({"status": status, "steps": last}))
    return folder


@pytest.fixture
def run_folder(tmp_path):
    return lambda n_evals, **kw: write_run(tmp_path / f"run{n_evals}", n_evals, **kw)


def checkpointed_run(folder: Path, cfg, saves: dict) -> Path:
    """A run folder as the engine leaves it for `export_policy`: config.json (the resolved model
    folder), an empty metrics.jsonl and a committed checkpoint per `saves` entry (step -> a function
    that writes a trainer checkpoint into the folder it is given, e.g. `Trainer.save`), in order."""
    from workbench.runs.checkpoint import CheckpointStore

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(to_dict(cfg)))
    (folder / "metrics.jsonl").touch()
    store = CheckpointStore(folder / "checkpoints")
    for step, save in saves.items():
        save(str(store.begin(step)))
        store.commit(step, {"step": step})
    return folder
