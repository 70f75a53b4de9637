"""env/: the GPU cluster config validates with Ray's own schema; the GPU requirements match the
project's dependencies. (Nothing here starts a cluster or installs vLLM: CI has no GPU.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _name(req: str) -> str:
    return re.split(r"[\[<>=!~; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_ray_cluster_config_passes_ray_up_validation():
    from ray.autoscaler._private.util import prepare_config, validate_config  # what `ray up` runs

    cfg = yaml.safe_load((ROOT / "env" / "ray-cluster.yaml").read_text())
    validate_config(prepare_config(cfg))
    assert cfg["head_node_type"] in cfg["available_node_types"]
    setup = " ".join(cfg["setup_commands"])
    assert "env/requirements-gpu.txt" in setup and "[gpu]" in setup and "kernel install" in setup
    assert any("mlflow server" in c for c in cfg["head_start_ray_commands"])
    # run folders: the head exports ~/workbench/runs, every worker mounts it at the same path
    # before it joins (checkpoint shards and the run's commit must land in one folder)
    assert any("$HOME/workbench/runs *(" in c for c in cfg["head_setup_commands"])
    start = cfg["worker_start_ray_commands"]
    mount = next(i for i, c in enumerate(start) if "mount -t nfs" in c)
    assert "$RAY_HEAD_IP:$HOME/workbench/runs ~/workbench/runs" in start[mount]
    assert mount < next(i for i, c in enumerate(start) if "ray start" in c)


def test_gpu_requirements_cover_the_project_dependencies_and_vllm():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [ln.split("#")[0].strip() for ln in (ROOT / "env" / "requirements-gpu.txt").read_text().splitlines()]
    have = {_name(ln) for ln in lines if ln}
    wanted = {_name(d) for d in project["dependencies"] + project["optional-dependencies"]["gpu"]}
    assert "vllm" in have
    assert wanted <= have, f"missing from env/requirements-gpu.txt: {sorted(wanted - have)}"
