"""`workbench run` end to end in a subprocess: bad input gives one clear line, no traceback, no orphans."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import HELPERS

WORKBENCH = [sys.executable, "-m", "workbench.cli"]


def write_config(tmp_path: Path, model_cache: Path, **sections) -> Path:
    cfg = {
        "name": "cli",
        "recipe": {"base": "scalerl", "length_control": {"type": "none"}},
        "model": {"path": "builtin:tiny", "sft_steps": 150, "n_embd": 32, "n_layer": 1, "n_head": 2,
                  "cache_dir": str(model_cache)},
        "task": {"name": "addition", "difficulty": 1, "num_train": 80, "num_val": 20},
        "generation": {"max_new_tokens": 4},
        "train": {"prompts_per_step": 4, "generations_per_prompt": 4, "lr": 1e-4, "max_steps": 3},
        "eval": {"every_steps": 2, "num_prompts": 10, "samples_per_prompt": 2},
        "resources": {"generator_cpus": 0.5, "trainer_cpus": 0.5},
    }
    for k, v in sections.items():
        cfg[k] = {**cfg.get(k, {}), **v} if isinstance(v, dict) else v
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


MARK = "WORKBENCH_TEST_RUN_MARK"  # every process the CLI starts (Ray's included) inherits it


def marked_pids(mark: str) -> set[int]:
    """Live processes whose environment carries MARK=mark (this test's CLI and what it started)."""
    pids = set()
    needle = f"{MARK}={mark}".encode()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if needle in (p / "environ").read_bytes().split(b"\0"):
                    pids.add(int(p.name))
            except OSError:
                pass
    return pids


def run_cli(*args: str, timeout: float = 300, mark: str = "", cwd: Path | None = None,
            unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess:  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")]))
    env[MARK] = mark
    for key in ("RAY_ADDRESS", *unset):
        env.pop(key, None)
    return subprocess.run([*WORKBENCH, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in proc.stderr, proc.stderr


def test_unknown_config_key_names_the_key(tmp_path, model_cache):
    path = write_config(tmp_path, model_cache, train={"lerning_rate": 1e-3})
    proc = run_cli("run", "--config", str(path), "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, 2, "train.lerning_rate")


def test_unknown_override_and_bad_value(tmp_path, model_cache):
    path = write_config(tmp_path, model_cache)
    proc = run_cli("run", "--config", str(path), "--set", "train.lr=fast")
    assert_one_line_error(proc, 2, "train.lr", "number")
    proc = run_cli("run", "--config", str(path), "--set", "recipe=no-such-recipe")
    assert_one_line_error(proc, 2, "unknown recipe 'no-such-recipe'", "scalerl")


def test_model_directory_without_weights(tmp_path, model_cache):
    empty = tmp_path / "model"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    path = write_config(tmp_path, model_cache, model={"path": str(empty)})
    proc = run_cli("run", "--config", str(path))
    assert_one_line_error(proc, 2, str(empty))


def test_malformed_dataset_line_names_file_and_line(tmp_path, model_cache):
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2=", "answer": \n')
    path = write_config(tmp_path, model_cache, task={"name": "jsonl", "path": str(data)})
    proc = run_cli("run", "--config", str(path))
    assert_one_line_error(proc, 2, "data.jsonl:2", "malformed JSON")


def wait_until_gone(mark: str, seconds: float = 20.0) -> set[int]:
    """The processes carrying `mark` that are still alive after up to `seconds`."""
    import time

    deadline = time.monotonic() + seconds
    while marked_pids(mark) and time.monotonic() < deadline:
        time.sleep(0.5)
    return marked_pids(mark)


@pytest.mark.slow
def test_raising_checker_stops_cleanly_without_orphans(tmp_path, model_cache):
    import uuid

    mark = uuid.uuid4().hex  # only this run's processes count: other Ray clusters may share the machine
    path = write_config(tmp_path, model_cache, task={"checker": "bad_checkers:raising_in_workers"})
    proc = run_cli("run", "--config", str(path), "--out", str(tmp_path / "o"), "--quiet", mark=mark)
    assert_one_line_error(proc, 1, "run failed", "verifier crashed", "example")
    orphans = wait_until_gone(mark)
    assert not orphans, f"Ray processes left behind: {orphans}"


@pytest.mark.slow
def test_run_writes_metrics_and_summary(tmp_path, model_cache):
    import uuid

    path = write_config(tmp_path, model_cache)
    out = tmp_path / "o"
    mark = uuid.uuid4().hex
    proc = run_cli("run", "--config", str(path), "--out", str(out), "--max-steps", "3", mark=mark)
    assert proc.returncode == 0, proc.stderr
    # batch work leaves no Ray process behind: none of the processes it started (GCS, raylet, workers) lives on
    left = wait_until_gone(mark)
    assert not left, f"processes of `workbench run` left behind: {left}"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["status"] == "finished"
    shown = re.findall(r"val=([0-9.]+)", proc.stderr)
    assert shown and shown[-1] == f"{summary['val_pass_rate_last']:.3f}"  # the bar ends on the last evaluation
    assert "of its wall time in forward/backward/optimizer" in proc.stdout  # the engine's own account
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/reward_mean" in r]
    evals = [r for r in rows if "val/pass_rate" in r]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert [r["step"] for r in evals] == [0, 2, 3]
    for key in ("compute/device_hours", "compute/flops", "time/generate", "time/train", "time/weight_sync",
                "util/trainer", "util/generator", "train/staleness_mean", "train/staleness_max",
                "train/truncation_rate", "train/entropy", "train/clip_fraction"):
        assert key in train[-1], key
    # the resumed command finds the finished run's last checkpoint and does nothing more
    proc = run_cli("run", "--config", str(path), "--out", str(out), "--max-steps", "3")
    assert proc.returncode == 0 and "resuming cli from step 3" in proc.stderr
    # ...but not with another learning rate: the folder's curve would mix two settings
    proc = run_cli("run", "--config", str(path), "--out", str(out), "--max-steps", "5", "--set", "train.lr=0.001")
    assert_one_line_error(proc, 2, "trained with another config (train.lr: 0.0001 -> 0.001)", "--fresh")
    assert json.loads((out / "config.json").read_text())["train"]["lr"] == 0.0001  # the record is untouched


def test_bad_out_folder_and_max_minutes_are_refused_before_ray(tmp_path, model_cache):
    path = write_config(tmp_path, model_cache)
    (tmp_path / "afile").write_text("")
    proc = run_cli("run", "--config", str(path), "--out", str(tmp_path / "afile"))
    assert_one_line_error(proc, 2, "is a file, not a folder")
    proc = run_cli("run", "--config", str(path), "--out", str(tmp_path / "o"), "--max-minutes", "-1")
    assert_one_line_error(proc, 2, "--max-minutes must be > 0")


def test_raising_checker_in_the_driver_fails_fast(tmp_path, model_cache):
    path = write_config(tmp_path, model_cache, task={"checker": "bad_checkers:raising"})
    proc = run_cli("run", "--config", str(path), "--out", str(tmp_path / "o"), "--quiet")
    assert_one_line_error(proc, 2, "checker 'raising' failed on example", "verifier crashed")


def test_tracking_keys_that_cannot_take_effect_are_refused(tmp_path, model_cache):
    path = write_config(tmp_path, model_cache, tracking={"mlflow": False, "run_id": "abc123"})
    proc = run_cli("run", "--config", str(path), "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, 2, "tracking.run_id is set but tracking.mlflow is false")


@pytest.mark.slow
def test_run_is_tracked_by_default_compare_finds_it_and_a_resume_reopens_it(tmp_path, model_cache):
    """`workbench run` with no tracking flag is tracked like a session, in the project's mlflow.db: its
    own MLflow run with params, every step once, and the fit; `workbench compare` then finds it without
    flags; running it again (a resume) logs into the same run."""
    from mlflow import MlflowClient

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mine'\n")  # the user's project
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    path = write_config(tmp_path, model_cache, tracking={"experiment": "cli-runs"}, train={"max_steps": 4},
                        eval={"every_steps": 1})  # 5 evaluations by step 4: enough for compare's fit
    out = tmp_path / "o"
    no_env = ("MLFLOW_TRACKING_URI",)
    proc = run_cli("run", "--config", str(path), "--out", str(out), "--max-steps", "2", cwd=tmp_path, unset=no_env)
    assert proc.returncode == 0, proc.stderr
    assert "tracking in MLflow run" in proc.stderr
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("cli-runs").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["train.lr"] == "0.0001"
    assert run.data.tags["workbench.kind"] == "run" and run.data.tags["workbench.out_dir"] == str(out.resolve())
    proc = run_cli("run", "--config", str(path), "--out", str(out), "--max-steps", "4", cwd=tmp_path, unset=no_env)
    assert proc.returncode == 0 and "resuming cli from step 2" in proc.stderr, proc.stderr
    listed = run_cli("compare", "--experiment", "cli-runs", "--json", cwd=tmp_path, unset=no_env)
    assert listed.returncode == 0 and run.info.run_id in listed.stdout, listed.stderr
    runs = client.search_runs([client.get_experiment_by_name("cli-runs").experiment_id])
    assert [r.info.run_id for r in runs] == [run.info.run_id], "the resume must log into the same MLflow run"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in rows if "train/reward_mean" in r) == [1, 2, 3, 4]
    for key in ("train/reward_mean", "compute/flops", "val/pass_rate"):  # evaluations carry compute too
        history = sorted(m.step for m in client.get_metric_history(run.info.run_id, key))
        assert history == sorted(r["step"] for r in rows if r.get(key) is not None), key
    assert client.get_run(run.info.run_id).info.status == "FINISHED"
    assert "fit/n" in client.get_run(run.info.run_id).data.metrics or "workbench.fit_error" in client.get_run(run.info.run_id).data.tags


@pytest.mark.slow
def test_tracking_off_keeps_the_run_in_its_folder_only(tmp_path, model_cache):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    path = write_config(tmp_path, model_cache, tracking={"mlflow": False})
    proc = run_cli("run", "--config", str(path), "--out", str(tmp_path / "o"), "--max-steps", "1", cwd=tmp_path,
                   unset=("MLFLOW_TRACKING_URI",))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "tracking in MLflow" not in proc.stderr and not (tmp_path / "mlflow.db").exists()
    assert (tmp_path / "o" / "metrics.jsonl").is_file()
