"""The one Ray bootstrap: a Session's cluster (the recorded one that outlives the kernel) gets
resources.num_cpus CPUs; without it, the machine's CPUs and at least what the run asks for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from workbench.config import run_config_from_dict
from workbench.engine import cluster

DRIVER = """
import json, sys
import ray
from workbench.config import run_config_from_dict
from workbench.engine.cluster import connect_for_session
address = connect_for_session(run_config_from_dict({}, {"resources.num_cpus": int(sys.argv[1])}))
print(json.dumps({"address": address, "cpus": ray.cluster_resources().get("CPU")}), flush=True)
"""


@pytest.mark.slow
def test_a_session_cluster_has_the_configured_cpus(tmp_path):
    env = dict(os.environ, WORKBENCH_STATE_DIR=str(tmp_path / "state"))
    env.pop("RAY_ADDRESS", None)
    wanted = (os.cpu_count() or 1) + 3  # more than the machine has: only the config can ask for it
    address = None
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(DRIVER), str(wanted)],
                              capture_output=True, text=True, timeout=400, env=env)  # fmt: skip
        recorded = tmp_path / "state" / "ray_address"
        address = recorded.read_text().strip() if recorded.exists() else None
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["cpus"] == wanted
        assert result["address"] in (tmp_path / "state" / "started").read_text().split()
    finally:
        if address is None and (tmp_path / "state" / "started").exists():
            address = (tmp_path / "state" / "started").read_text().split()[-1]
        if address:
            cluster.stop(address)
    assert not cluster.cluster_pids(address), "Ray processes left behind by the test's cluster"


def test_cluster_size_follows_resources_num_cpus_else_the_machine_and_the_run():
    assert cluster.cluster_cpus(run_config_from_dict({}, {"resources.num_cpus": 3})) == 3
    machine = os.cpu_count() or 1
    assert cluster.cluster_cpus(run_config_from_dict({}, {})) >= machine
    big = run_config_from_dict({}, {"generation.num_generators": 4, "resources.generator_cpus": machine})
    assert cluster.cluster_cpus(big) == 4 * machine + big.resources.trainer_cpus + big.resources.evaluator_cpus
