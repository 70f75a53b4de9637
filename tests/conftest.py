"""Shared fixtures: one Ray local cluster (2 CPUs) for the whole session, tiny run configs.

`ray.init` costs tens of seconds on a busy 2-core machine, so every test that needs Ray uses
the session-scoped `ray_cluster`. The built-in model is built once per session into a
temporary cache with a short warm-up (`tiny_config`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.run_folder import run_folder  # noqa: F401  (a fixture: a finished run folder without Ray)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
HELPERS = Path(__file__).resolve().parent / "helpers"
# Session overrides for a tiny run on quickstart's model and task (session, notebook, browser tests).
TINY_SESSION = {
    "eval.every_steps": 2,
    "eval.num_prompts": 40,
    "train.lr": 1.0e-4,  # a gentle policy change: the curve must not collapse to one value (nothing to fit)
    "eval.samples_per_prompt": 4,
    "train.prompts_per_step": 8,
    "resources.generator_cpus": 0.5,
    "resources.trainer_cpus": 0.5,
    "resources.evaluator_cpus": 0.5,
}
# Ray workers inherit the environment at ray.init: make the test-only checkers importable there, and
# the benchmarks' (tests/engine/test_real_vocab.py runs bench_real_shape's hash checker in the workers).
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(HELPERS), str(REPO / "benchmarks"), os.environ.get("PYTHONPATH", "")] if p)


@pytest.fixture(scope="session", autouse=True)
def session_cluster_state(tmp_path_factory):
    """Sessions (also in notebook kernels the tests start) record their own Ray cluster here;
    whatever cluster they started is shut down when the test session ends."""
    state = tmp_path_factory.mktemp("workbench-state")
    os.environ["WORKBENCH_STATE_DIR"] = str(state)
    # `workbench run` tracks in MLflow by default: the tests' runs go to a store of their own, not the
    # project's mlflow.db (tests of the default store unset it)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{state / 'mlflow.db'}")
    yield state
    from workbench.engine import cluster

    for address in cluster.started_addresses():
        cluster.stop(address)


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    from workbench.engine.cluster import connect

    # the one bootstrap (it retries a start-up that times out on a loaded machine); address
    # "local": never a cluster some `ray start` left recorded on this machine
    connect(num_cpus=2, lasting=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture
def tiny_config(tmp_path, model_cache):
    """A run config small enough for a few seconds per run on 2 CPUs."""
    from workbench.config import run_config_from_dict

    def make(overrides: dict | None = None, name: str = "t", *, for_actors: bool = False):
        """`for_actors`: the config as the driver hands it to the actors (model folder resolved),
        for tests that build a Trainer or Generator in-process."""
        base = {
            "name": name,
            "out_dir": str(tmp_path / name),
            "recipe": {"base": "scalerl", "length_control": {"type": "none"}},
            "model": {"path": "builtin:tiny", "sft_steps": 150, "n_embd": 32, "n_layer": 1, "n_head": 2,
                      "cache_dir": str(model_cache)},
            "task": {"name": "addition", "difficulty": 1, "num_train": 80, "num_val": 20},
            "generation": {"max_new_tokens": 4, "max_batch_sequences": 64},
            "train": {"prompts_per_step": 4, "generations_per_prompt": 4, "lr": 1e-4, "warmup_steps": 1,
                      "max_steps": 4, "micro_batch_size": 8},
            "eval": {"every_steps": 2, "num_prompts": 10, "samples_per_prompt": 2},
            "resources": {"generator_cpus": 0.5, "trainer_cpus": 0.5, "evaluator_cpus": 0.5},
            # the final policy's export (on by default) is asserted by the coordinator's tests alone
            "checkpoint": {"every_steps": 2, "keep": 2, "export_policy": False},
        }
        cfg = run_config_from_dict(base, overrides or {})
        if for_actors:
            from workbench.engine.run.actors import actor_config
            from workbench.tasks.base import load_task

            cfg = actor_config(cfg, load_task(cfg.task))
        return cfg

    return make
