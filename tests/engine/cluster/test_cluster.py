"""A run started from one kernel survives that kernel and is attached to from the next one; the
cluster is stopped by the last process that used it once no run is going; `workbench cluster`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from workbench.engine import cluster

pytestmark = pytest.mark.slow

KERNEL_1 = """
import json, sys
from workbench import Session
s = Session(overrides=json.loads(sys.argv[1]), name="survivor", tracking=False)
s.start()
print(s.name, flush=True)
# the kernel dies here without stopping its run
"""

KERNEL_2 = """
import json, sys
from workbench import Session
s = Session.attach(sys.argv[1], tracking=False)
summary = s.wait(timeout=300)
print(json.dumps({"steps": summary["steps"], "status": summary["status"], "evals": len(s.curve)}), flush=True)
"""


def test_run_outlives_its_kernel_and_is_attached_again(tmp_path, model_cache, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    overrides = {
        "out_dir": str(tmp_path / "run"),
        "recipe": {"base": "scalerl", "length_control": {"type": "none"}},
        "model.sft_steps": 150, "model.n_embd": 32, "model.n_layer": 1, "model.n_head": 2,
        "model.cache_dir": str(model_cache),
        "task.difficulty": 1, "task.num_train": 80, "task.num_val": 20,
        "generation.max_new_tokens": 4,
        "train.prompts_per_step": 4, "train.generations_per_prompt": 4, "train.lr": 1e-4, "train.max_steps": 30,
        "eval.every_steps": 10, "eval.num_prompts": 10, "eval.samples_per_prompt": 2,
        "resources.generator_cpus": 0.5, "resources.trainer_cpus": 0.5,
    }  # fmt: skip
    address = None
    try:
        first = subprocess.run([sys.executable, "-c", textwrap.dedent(KERNEL_1), json.dumps(overrides)],
                               capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
        assert first.returncode == 0, first.stderr
        name = first.stdout.strip().splitlines()[-1]
        address = (tmp_path / "state" / "ray_address").read_text().strip()
        assert cluster.cluster_pids(address), "the run's cluster must outlive the kernel that started it"
        status = subprocess.run([sys.executable, "-m", "workbench.cli", "cluster", "status"],
                                capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
        assert status.returncode == 0, status.stderr
        assert f"{name}  " in status.stdout and "1 run(s)" in status.stdout
        assert cluster.cluster_pids(address), "`workbench cluster status` must not stop the cluster"
        second = subprocess.run([sys.executable, "-c", textwrap.dedent(KERNEL_2), name],
                                capture_output=True, text=True, timeout=400, env=env)  # fmt: skip
        assert second.returncode == 0, second.stderr
        result = json.loads(second.stdout.strip().splitlines()[-1])
        assert result == {"steps": 30, "status": "finished", "evals": 4}
        # the second kernel ended with no run going and nobody else on the cluster: it stopped it
        deadline = time.monotonic() + 60  # (through a stopper process that outlives the kernel)
        while (cluster.cluster_pids(address) or (tmp_path / "state" / "ray_address").exists()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not cluster.cluster_pids(address), "Ray processes left behind by the cluster"
    finally:
        if address is None and (tmp_path / "state" / "ray_address").exists():
            address = (tmp_path / "state" / "ray_address").read_text().strip()
        if address:
            cluster.stop(address)
    assert not (tmp_path / "state" / "ray_address").exists()


def test_cluster_stop_ends_the_recorded_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    address = cluster.start(num_cpus=1)
    try:
        pids = cluster.cluster_pids(address)
        assert len(pids) >= 2  # a GCS and a raylet at least, found by their marker
        proc = subprocess.run([sys.executable, "-m", "workbench.cli", "cluster", "stop"],
                              capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert f"stopped the Ray cluster at {address}" in proc.stdout
        assert not cluster.cluster_pids(address) and not any(os.path.exists(f"/proc/{p}") for p in pids)
        assert not (tmp_path / "state" / "ray_address").exists()
        proc = subprocess.run([sys.executable, "-m", "workbench.cli", "cluster", "status"],
                              capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
        assert proc.returncode == 0 and "no workbench Ray cluster is running" in proc.stdout
    finally:
        cluster.stop(address)
