"""The run loop on a real Ray local cluster (2 CPUs): algorithms, staleness, resume, faults."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from workbench.engine.run import launch as launch_module
from workbench.engine.run.launch import launch
from workbench.errors import UserError
from workbench.tracking.sink import read_jsonl

pytestmark = pytest.mark.slow


def run_to_end(cfg, **kw):
    return launch_module.run_to_end(cfg, timeout=300, **kw)


def train_rows(out_dir):
    return [r for r in read_jsonl(f"{out_dir}/metrics.jsonl") if "train/loss" in r or "train/skipped" in r]


def wait_for_step(handle, step: int, timeout: float = 240) -> None:
    """Until the run has trained `step` steps (or `timeout` seconds passed: the test's asserts then say what is wrong)."""
    deadline = time.time() + timeout
    while handle.status()["step"] < step and time.time() < deadline:
        time.sleep(0.05)


def assert_version_is_step(out_dir):
    """policy/version counts the optimizer updates: the step, less the updates skipped so far, on
    every row (train and validation), also across a trainer restart."""
    rows = read_jsonl(f"{out_dir}/metrics.jsonl")
    # A validation row can land after a later train row (it runs beside training), so the skips that
    # count for a row are those at or before its own step, not those written before it.
    skipped_at = {r["step"]: int(r["train/skipped"]) for r in rows if "train/skipped" in r}
    seen = [
        (r["step"], r["policy/version"], r["step"] - sum(n for s, n in skipped_at.items() if s <= r["step"]))
        for r in rows
    ]
    assert seen and all(version == expected for _, version, expected in seen), seen


@pytest.mark.parametrize(
    "algorithm,k,steps",
    [("pipeline", 2, 6), ("ppo-off-policy", 3, 6), ("sync", 1, 3)],
)
def test_each_off_policy_algorithm_runs_and_bounds_staleness(ray_cluster, tiny_config, algorithm, k, steps):
    cfg = tiny_config(
        {"recipe.off_policy.algorithm": algorithm, "recipe.off_policy.k": k, "train.max_steps": steps,
         "checkpoint.export_policy": algorithm != "sync"},
        name=f"alg-{algorithm}",
    )
    summary = run_to_end(cfg)
    assert summary["status"] == "finished" and summary["steps"] == steps
    rows = train_rows(cfg.out_dir)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    # a skipped step trains nothing (every group had zero variance, or all were beyond the staleness bound: no staleness then)
    trained = [r for r in rows if not r.get("train/skipped")]
    assert trained and max(r["train/staleness_max"] for r in trained) <= k
    assert isinstance(summary["model/params"], int) and summary["model/params"] > 10_000  # `predict --by model.params`
    ret = summary["retirement"]  # No-Positive-Resampling's share, also on every step row
    assert ret["prompts"] == 80 and 0 <= ret["retired_share"] <= ret["max_retired_share"] == 0.1
    assert all(0 <= r["sampler/retired_share"] <= 0.1 for r in rows)
    if algorithm == "sync":
        assert all(r["train/staleness_max"] == 0 for r in trained)
    if algorithm == "ppo-off-policy":
        # one policy generates k steps' worth: within a round, staleness = updates applied so far
        for start in range(0, steps, k):
            round_rows = rows[start : start + k]
            updates = [0.0] + [float(sum(1 - r["train/skipped"] for r in round_rows[:i])) for i in range(1, k)]
            assert [r["train/staleness_max"] for r in round_rows] == updates[: len(round_rows)]
    evals = [r for r in read_jsonl(f"{cfg.out_dir}/metrics.jsonl") if "val/pass_rate" in r]
    assert [e["step"] for e in evals][0] == 0 and evals[-1]["step"] == steps
    assert all(e["compute/device_hours"] >= 0 and "compute/flops" in e for e in evals)
    assert evals[-1]["compute/flops"] > 0
    summary_file = json.loads(open(f"{cfg.out_dir}/summary.json").read())
    assert summary_file["steps"] == steps
    # a finished run leaves its final policy as a Hugging Face folder (runs/export.py), unless told not to
    if algorithm == "sync":
        assert summary["policy"] is None and not (Path(cfg.out_dir) / "policy").exists()
    else:
        assert summary["policy"] == {"path": f"{cfg.out_dir}/policy", "step": steps}
        files = {p.name for p in (Path(cfg.out_dir) / "policy").iterdir()}
        assert {"model.safetensors", "config.json", "tokenizer.json"} <= files


def test_pipeline_pushes_weights_in_flight(ray_cluster, tiny_config):
    cfg = tiny_config(
        {"recipe.off_policy.k": 4, "train.max_steps": 8, "generation.max_new_tokens": 6}, name="inflight"
    )
    run_to_end(cfg)
    rows = train_rows(cfg.out_dir)
    # generators picked up new weights while generating, and data trained on was off-policy
    assert sum(r["gen/weight_swaps_in_flight"] for r in rows) > 0
    assert max(r["train/staleness_max"] for r in rows) >= 1
    assert all(0 <= r["util/trainer"] <= 1 for r in rows)


def test_a_stop_evaluates_once_after_the_last_queued_step(ray_cluster, tiny_config):
    # checkpoints far apart let the trainer queue two steps; a stop lands while they are queued
    cfg = tiny_config({"train.max_steps": 400, "checkpoint.every_steps": 1000, "checkpoint.export_policy": True, "eval.every_steps": 1000, "recipe.off_policy.k": 8,
                       "generation.max_ahead_steps": 8, "generation.num_generators": 2}, name="stop-evals")
    handle = launch(cfg)
    try:
        handle.start()
        wait_for_step(handle, 4)
        handle.stop()
        summary = handle.wait(timeout=300)
    finally:
        handle.kill()
    assert summary["status"] == "stopped" and summary["steps"] < 400
    assert summary["policy"] is None  # a stopped run exports nothing by itself (`workbench export` can)
    evals = [r["step"] for r in read_jsonl(f"{cfg.out_dir}/metrics.jsonl") if "val/pass_rate" in r]
    assert evals == [0, summary["steps"]], "one evaluation at the stop, not one per step still queued"


def test_with_evaluation_off_the_run_trains_and_checkpoints_without_an_evaluator(ray_cluster, tiny_config):
    """eval.every_steps 0 (score the checkpoints afterwards): no evaluation at the start, during or
    at the end, no evaluator actor, every checkpoint kept for scoring."""
    from workbench.runs.checkpoint import CheckpointStore

    cfg = tiny_config({"train.max_steps": 4, "eval.every_steps": 0, "checkpoint.every_steps": 2, "checkpoint.keep": 4},
                      name="eval-off")  # fmt: skip
    summary = run_to_end(cfg)
    assert summary["status"] == "finished" and summary["steps"] == 4
    rows = read_jsonl(f"{cfg.out_dir}/metrics.jsonl")
    assert not [r for r in rows if any(k.startswith("val/") for k in r)] and len(rows) >= 4
    assert CheckpointStore(Path(cfg.out_dir) / "checkpoints").steps() == [2, 4]
    logs = sorted(p.name for p in (Path(cfg.out_dir) / "logs").iterdir())  # one log per actor started
    assert logs == ["Coordinator.log", "Generator-0.log", "Trainer-0.log"], logs  # no evaluator


def test_resume_after_kill_continues_the_same_curve(ray_cluster, tiny_config):
    cfg = tiny_config({"train.max_steps": 8, "checkpoint.every_steps": 2}, name="resume")
    handle = launch(cfg)
    handle.start()
    wait_for_step(handle, 5)
    handle.kill()  # the coordinator dies mid-run; its actors go with it
    time.sleep(1.0)
    from workbench.runs.checkpoint import CheckpointStore

    store = CheckpointStore(f"{cfg.out_dir}/checkpoints")
    ck_step = store.latest_step()
    assert ck_step is not None and ck_step >= 2 and ck_step % 2 == 0
    saved = store.latest_state()
    lost = len({r["step"] for r in train_rows(cfg.out_dir) if r["step"] > ck_step})  # redone after the resume
    handle2 = launch(cfg, resume=True)
    try:
        st = handle2.status()
        assert st["resumed_from"] == ck_step and st["step"] == ck_step
        restored = handle2.actor.checkpoint_state.remote()
        import ray

        restored = ray.get(restored)
        assert restored["sampler"] == saved["sampler"]
        axis = lambda c: {k: v for k, v in c.items() if not k.startswith("discarded_")}  # noqa: E731
        assert axis(restored["counters"]) == axis(saved["counters"]), "the compute axis continues from the checkpoint"
        assert restored["counters"]["discarded_steps"] == lost  # what the dead driver's timeline did after it
        assert (restored["counters"]["discarded_device_hours"] > 0) == (lost > 0)
        handle2.start()
        summary = handle2.wait(timeout=300)
    finally:
        handle2.kill()
    assert summary["steps"] == 8 and summary["resumed_from"] == ck_step
    steps = [r["step"] for r in train_rows(cfg.out_dir)]
    assert steps == list(range(1, 9)), "a step was lost or logged twice"
    devh = [r["compute/device_hours"] for r in train_rows(cfg.out_dir)]
    assert devh == sorted(devh), "compute must keep growing across the resume"


def test_killed_generator_is_restarted_and_the_run_completes(ray_cluster, tiny_config):
    import ray

    cfg = tiny_config({"train.max_steps": 10, "recipe.off_policy.k": 2}, name="genkill")
    handle = launch(cfg)
    try:
        handle.start()
        wait_for_step(handle, 2)
        gen = ray.get_actor("genkill/Generator/0", namespace="workbench")
        ray.kill(gen, no_restart=False)
        summary = handle.wait(timeout=300)
    finally:
        handle.kill()
    assert summary["status"] == "finished" and summary["steps"] == 10
    assert [r["step"] for r in train_rows(cfg.out_dir)] == list(range(1, 11))
    assert any("generator 0 died" in e for e in summary["events"]), summary["events"]
    assert_version_is_step(cfg.out_dir)  # the restarted generator took the pushed weights' version


def test_drained_prompt_pool_is_reported_once(tiny_config):
    from workbench.engine.run.coordinator import RunCoordinator

    cfg = tiny_config({"task.num_train": 80, "train.prompts_per_step": 4}, name="pool")
    coord = RunCoordinator(cfg, resume=False)  # no actors: the loop's bookkeeping only
    s = coord.prompts.sampler
    for pid in range(80):  # capped answers: the odd half was never solved
        s.update(pid, [pid % 2 == 0, False])
    s.retired = set(range(0, 40, 2))  # 20 of 40 solvable retired: 20 left = 5 steps' worth
    coord.prompts.warn_if_draining(coord.step, 4, coord.log.event)
    assert coord.log.events == [], "40 never-solved prompts are not a pool to learn from, but 20 solvable are"
    s.retired = set(range(0, 60, 2))  # 10 solvable left, although 50 prompts are still active
    coord.prompts.warn_if_draining(coord.step, 4, coord.log.event)
    coord.prompts.warn_if_draining(coord.step, 4, coord.log.event)
    pool = [e for e in coord.log.events if "solvable ones remain" in e]  # (the retired-share warning is told too: 38%)
    assert len(pool) == 1 and "retired 30 of 80 training prompts" in pool[0]
    assert "about 10 solvable ones remain" in (cfg.output_dir() / "events.log").read_text()
    assert coord.status_dict()["events"] == coord.log.events


def test_no_positive_resampling_is_off_with_the_reason_for_a_set_drawn_many_times_over(tiny_config):
    from workbench.engine.run.coordinator import RunCoordinator

    many = tiny_config({"task.num_train": 8, "train.prompts_per_step": 4, "train.max_steps": 20}, name="npr-epochs")
    coord = RunCoordinator(many, resume=False)  # 80 draws of 8 prompts: 10 epochs, over the default 8
    assert not coord.prompts.sampler.enabled and coord.prompts.sampler.retirement()["retired_share"] == 0
    said = [e for e in coord.log.events if e.startswith("No-Positive-Resampling is off for this run")]
    assert len(said) == 1 and "10.0 epochs of the 8 training prompts" in said[0] and "recipe.npr_max_epochs=null" in said[0]
    for over in ({"recipe.npr_max_epochs": None}, {"train.max_steps": 16}):  # kept on: asked for, or 8 epochs
        coord = RunCoordinator(tiny_config({"task.num_train": 8, "train.prompts_per_step": 4, "train.max_steps": 20, **over},
                                           name="npr-kept"), resume=False)  # fmt: skip
        assert coord.prompts.sampler.enabled and not any("No-Positive-Resampling is off" in e for e in coord.log.events)


def test_the_retired_share_is_warned_about_once_and_capped_by_default(tiny_config):
    from workbench.engine.run.coordinator import RunCoordinator
    from workbench.rl.sampler import RETIRED_SHARE_WARNING

    told = {}
    for cap in (None, RETIRED_SHARE_WARNING):
        cfg = tiny_config({"task.num_train": 80, "train.prompts_per_step": 4, "recipe.npr_max_retired_share": cap},
                          name=f"share-{cap}")  # fmt: skip
        coord = RunCoordinator(cfg, resume=False)  # no actors: the loop's bookkeeping only
        for pid in range(40):  # half the set solved: retired, as far as the cap lets it
            coord.prompts.sampler.update(pid, [True] * 8)
            coord.prompts.warn_if_draining(coord.step, 4, coord.log.event)
        told[cap] = [e for e in coord.log.events if "trains only on the prompts it still fails" in e]
        assert coord.prompts.sampler.retirement()["retired_share"] == (0.5 if cap is None else RETIRED_SHARE_WARNING)
    assert len(told[None]) == 1 and "has retired 21 of 80 training prompts (26%)" in told[None][0]
    assert told[RETIRED_SHARE_WARNING] == [], "the default cap keeps the share at the threshold: nothing to warn"


@pytest.mark.long  # a killed worker's recovery is CI's in test_two_trainer_workers_run_resume_and_survive_a_killed_worker
def test_killed_trainer_worker_leaves_a_clean_record_in_mlflow(ray_cluster, tiny_config, tmp_path):
    """Issue 17: a trainer worker killed mid-run with MLflow on. Afterwards MLflow's own metric
    history equals metrics.jsonl (each step once, the surviving timeline's values), the policy
    version is the trainer's step count at every row, no utilisation is above 1, and the summary says what the
    restart threw away."""
    import math
    import os
    import signal

    import ray
    from mlflow import MlflowClient

    from workbench.tracking.store import create_run, ensure_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ensure_experiment("faults", uri)
    run_id = create_run("faults", "tw2-mlflow", {"workbench.out_dir": str(tmp_path / "tw2m")}, tracking_uri=uri)
    over = {"resources.trainer_workers": 2, "train.max_steps": 10, "checkpoint.every_steps": 3, "recipe.off_policy.k": 2,
            "tracking.mlflow": True, "tracking.tracking_uri": uri, "tracking.run_id": run_id}
    cfg = tiny_config(over, name="tw2m")
    handle = launch(cfg)
    try:
        handle.start()
        wait_for_step(handle, 5, timeout=300)  # past the step-3 checkpoint
        worker = ray.get_actor("tw2m/Trainer/1", namespace="workbench")
        os.kill(ray.get(worker.pid.remote()), signal.SIGKILL)
        summary = handle.wait(timeout=400)
    finally:
        handle.kill()
    assert summary["status"] == "finished" and summary["trainer_restarts"] == 1, summary["events"]
    rows = read_jsonl(f"{cfg.out_dir}/metrics.jsonl")
    train = [r for r in rows if "train/loss" in r or "train/skipped" in r]
    assert [r["step"] for r in train] == list(range(1, 11))
    # the version counts the optimizer updates applied: the step, less the steps whose update was
    # skipped (zero-variance batches); after the restart it must not jump past that
    applied = [sum(1 for q in train[: i + 1] if not q.get("train/skipped")) for i in range(len(train))]
    assert [r["policy/version"] for r in train] == applied, "versions must mean trainer steps after a restart"
    for r in train:
        assert 0.0 <= r["util/trainer"] <= 1.0 and 0.0 <= r["util/generator"] <= 1.0, r
    assert summary["trainer_utilisation"] <= 1.0
    assert summary["compute/discarded_steps"] >= 1 and summary["compute/discarded_device_hours"] > 0
    client = MlflowClient(uri)
    for key in ("train/loss", "policy/version", "compute/device_hours", "val/pass_rate"):
        jsonl = sorted((r["step"], r[key]) for r in rows if r.get(key) is not None)
        # a skipped update's loss is NaN in MLflow and null in metrics.jsonl: compare the numbers
        history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, key) if not math.isnan(m.value))
        assert [s for s, _ in history] == [s for s, _ in jsonl], f"{key}: steps in MLflow differ from metrics.jsonl"
        assert [v for _, v in history] == pytest.approx([v for _, v in jsonl], rel=1e-6), key
    assert client.get_run(run_id).info.status == "FINISHED"


def test_mlflow_has_each_step_within_seconds_not_at_the_next_checkpoint(ray_cluster, tiny_config, tmp_path):
    """Issue 44: MLflow shows step k's metrics within 10 s of the step. No checkpoint comes before
    the end (checkpoint.every_steps past train.max_steps) and the run is paused mid-way, so what
    MLflow has then was sent live; after the end every step is there once."""
    from mlflow import MlflowClient

    from workbench.tracking.store import create_run, ensure_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ensure_experiment("live", uri)
    run_id = create_run("live", "live-mlflow", {}, tracking_uri=uri)
    cfg = tiny_config({"train.max_steps": 8, "checkpoint.every_steps": 100, "tracking.mlflow": True,
                       "tracking.tracking_uri": uri, "tracking.run_id": run_id}, name="live-mlflow")  # fmt: skip
    client = MlflowClient(uri)

    def steps_in_mlflow() -> dict[int, int]:  # step -> the time MLflow recorded it (ms)
        return {m.step: m.timestamp for m in client.get_metric_history(run_id, "train/loss")}

    handle = launch(cfg)
    try:
        handle.start()
        wait_for_step(handle, 3)
        handle.pause()
        k, quiet_since = handle.status()["step"], time.time()
        while time.time() < quiet_since + 3:  # a step in flight when the pause came still ends: wait for none for 3 s
            time.sleep(0.2)
            if handle.status()["step"] != k:
                k, quiet_since = handle.status()["step"], time.time()
        seen_at = time.time()  # step k's row is written by now, and no later step runs
        while not all(s in steps_in_mlflow() for s in range(1, k + 1)) and time.time() < seen_at + 10:
            time.sleep(0.1)
        live = steps_in_mlflow()
        assert not handle.done() and 3 <= k < 8, "the run must still be paused before its end"
        assert sorted(live) == list(range(1, k + 1)), f"MLflow had steps {sorted(live)} 10 s after step {k}"
        assert live[k] <= (seen_at + 10) * 1000
        handle.resume()
        summary = handle.wait(timeout=300)
    finally:
        handle.kill()
    assert summary["status"] == "finished"
    history = [m.step for m in client.get_metric_history(run_id, "train/loss")]
    assert sorted(history) == [r["step"] for r in train_rows(cfg.out_dir)] == list(range(1, 9))


def test_impossible_resources_are_refused_clearly(ray_cluster, tiny_config):
    cfg = tiny_config({"resources.trainer_gpus": 1}, name="nogpu")  # more than 1 per worker is refused at load
    with pytest.raises(UserError, match=r"asks for 1 GPUs .* the Ray cluster has 0"):
        launch(cfg)


def test_two_trainer_workers_run_resume_and_survive_a_killed_worker(ray_cluster, tiny_config):
    import os
    import signal

    import ray

    over = {"resources.trainer_workers": 2, "train.max_steps": 8, "checkpoint.every_steps": 2, "recipe.off_policy.k": 2}
    cfg = tiny_config(over, name="tw2")
    handle = launch(cfg)
    try:
        handle.start()
        wait_for_step(handle, 3, timeout=300)
        worker = ray.get_actor("tw2/Trainer/1", namespace="workbench")
        os.kill(ray.get(worker.pid.remote()), signal.SIGKILL)  # as an operator's kill -9 would
        summary = handle.wait(timeout=400)
    finally:
        handle.kill()
    assert summary["status"] == "finished" and summary["steps"] == 8
    assert [r["step"] for r in train_rows(cfg.out_dir)] == list(range(1, 9)), "a step was lost or logged twice"
    restarts = [e for e in summary["events"] if "restarted the trainer group" in e]
    assert len(restarts) == 1 and "restart 1 of 3" in restarts[0], summary["events"]
    assert "restarted the trainer group" in (cfg.output_dir() / "events.log").read_text()
    assert_version_is_step(cfg.out_dir)  # the generators reloaded the checkpoint's version, not a newer one
    gathers = [r["time/weight_gather"] for r in train_rows(cfg.out_dir) if "time/weight_gather" in r]
    assert gathers and all(g >= 0 for g in gathers)
    # resume the finished run with more steps: the 2-worker sharded checkpoint loads
    more = tiny_config({**over, "train.max_steps": 10}, name="tw2")
    summary = run_to_end(more)
    assert summary["resumed_from"] == 8 and summary["steps"] == 10
    assert [r["step"] for r in train_rows(cfg.out_dir)] == list(range(1, 11))


def test_bad_trainer_worker_counts_are_refused_in_one_line(ray_cluster, tiny_config):
    from workbench.configtools import ConfigError

    with pytest.raises(ConfigError, match=r"resources.trainer_workers must be >= 1 \(got 0\)"):
        tiny_config({"resources.trainer_workers": 0})
    with pytest.raises(ConfigError, match="needs one whole GPU per worker"):
        tiny_config({"resources.trainer_workers": 2, "resources.trainer_gpus": 0.5})
    cfg = tiny_config({"resources.trainer_workers": 2, "resources.trainer_gpus": 1}, name="twgpu")
    with pytest.raises(UserError, match=r"trainer_workers=2 needs one GPU per worker but the Ray cluster has 0 GPUs"):
        launch(cfg)
