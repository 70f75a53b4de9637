"""Trainer workers on two Ray nodes: a 2-node cluster started here (`ray start`), one FSDP2
worker per node (STRICT_SPREAD), and a short quickstart-shaped run that learns; and the same
cluster with the second node seeing another folder at the run's path (its own tmpfs mounted
there, in a private mount namespace: storage that is not shared), which the run refuses.

Only the Ray processes this test started are stopped (they all carry its own --temp-dir).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from workbench.engine.cluster import free_port

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
RAY = str(Path(sys.executable).with_name("ray"))


def _ray_pids(temp_dir: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out if int(p) != os.getpid()]


def _ray_start(args: list[str], env: dict, hide: Path | None = None) -> None:
    cmd = [RAY, "start", *args]
    if hide is not None:  # this node (its raylet and workers) sees an empty tmpfs at `hide`
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
               'mount -t tmpfs none "$0" && exec "$@"', str(hide), *cmd]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"ray start {' '.join(args[:2])} failed:\n{(proc.stdout + proc.stderr)[-3000:]}"


@contextlib.contextmanager
def _two_node_cluster(hide: Path | None = None):
    """A head and a worker node (the worker with its own view of `hide`); yields (address, env)."""
    temp_dir = f"/tmp/rmn{uuid.uuid4().hex[:8]}"  # short: Ray's socket paths must stay short
    port = free_port()
    # Token authentication, as a user's cluster has it: both nodes and the driver send the token.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
    common = ["--disable-usage-stats", f"--temp-dir={temp_dir}"]
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, capture_output=True, timeout=60)
    try:
        _ray_start(["--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                    "--resources={\"node_a\": 1}", "--include-dashboard=false", *common], env)
        _ray_start([f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                    "--resources={\"node_b\": 1}", "--disable-usage-stats"], env, hide)  # inherits the head's temp dir
        yield f"127.0.0.1:{port}", env
    finally:
        import time

        deadline = time.monotonic() + 15  # a killed process takes a moment to go; Ray may still be spawning
        while _ray_pids(temp_dir) and time.monotonic() < deadline:
            for pid in _ray_pids(temp_dir):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        assert not _ray_pids(temp_dir), "a Ray process of this test's cluster is still alive"


@pytest.fixture
def two_nodes():
    with _two_node_cluster() as cluster:
        yield cluster


def _run(address: str, env: dict, out: Path, model_cache: Path, steps: int) -> subprocess.CompletedProcess:
    sets = [
        f"resources.ray_address={address}", "resources.trainer_workers=2", "resources.trainer_placement=strict_spread",
        "resources.generator_cpus=0.5", "resources.trainer_cpus=0.5", "resources.evaluator_cpus=0.5",
        f"model.cache_dir={model_cache}", f"train.max_steps={steps}", f"eval.every_steps={steps}",
        f"checkpoint.every_steps={steps // 2}", "name=multinode",
    ]
    cmd = [sys.executable, "-m", "workbench.cli", "run", "--config", "configs/quickstart.yaml", "--out", str(out),
           "--fresh", "--quiet", "--no-report"] + [a for s in sets for a in ("--set", s)]
    return subprocess.run(cmd, cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=900)


def test_one_trainer_worker_per_node_and_the_run_learns(two_nodes, tmp_path, model_cache):
    address, env = two_nodes
    out = tmp_path / "mn"
    proc = _run(address, env, out, model_cache, steps=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 60
    assert summary["trainer_workers"] == 2 and summary["trainer_nodes"] == 2
    # learns a little: the sampled pass rate of the last 15 steps (7,680 samples) beats the first 15
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rate = [r["train/pass_rate"] for r in rows if "train/pass_rate" in r]
    assert len(rate) == 60 and sum(rate[-15:]) > sum(rate[:15]), rate


@pytest.mark.long  # a second two-node cluster; the learning test above is CI's multi-node run
def test_an_out_dir_the_other_node_does_not_share_is_refused_in_one_line(tmp_path, model_cache):
    view = tmp_path / "view"  # the second node mounts its own empty tmpfs here
    view.mkdir()
    out = view / "mn"
    with _two_node_cluster(hide=view) as (address, env):
        proc = _run(address, env, out, model_cache, steps=4)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    refusal = f"workbench run: run failed: out_dir {out} is not shared with the trainer worker on node "
    assert last.startswith(refusal), last
    assert "NFS" in last
    # refused before any step: no checkpoint, and the check's token file is gone
    assert not list(out.glob("checkpoints/step_*")) and not list(out.glob(".shared-check-*"))
