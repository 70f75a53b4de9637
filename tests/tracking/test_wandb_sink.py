"""Weights & Biases beside MLflow, in offline mode, checked against the .wandb files W&B writes
(read with workbench.tracking.wandb_log): every row live, one W&B run across resumes, each step once
after a kill and a resume, and the completions table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.config import WandbConfig
from workbench.configtools import ConfigError
from workbench.tracking import wandb_log
from workbench.tracking.sink import AppendOnlySink, rewindable
from workbench.tracking.wandb_sink import ID_FILE, TABLE_KEYS, WandbSink


def offline_runs(folder: Path, closed: int = 1) -> list[Path]:
    """The offline runs' .wandb files, once `closed` of them hold their exit record: W&B's
    `finish()` can return before its writer has put the last records on disk."""
    deadline = time.monotonic() + 60
    while True:
        files = sorted(folder.glob("**/offline-run-*/run-*.wandb"), key=lambda f: f.parent.name)
        done = sum(any(r.WhichOneof("record_type") == "exit" for r in wandb_log.records(f)) for f in files)
        if done >= closed or time.monotonic() > deadline:
            return files
        time.sleep(0.2)


def history(files: list[Path]) -> list[dict]:
    """Every history row of the runs' .wandb files, W&B's own `_` keys left out."""
    return wandb_log.history_rows(files)


def records_of(files: list[Path], kind: str) -> list:
    return [r for f in files for r in wandb_log.records(f) if r.WhichOneof("record_type") == kind]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    return tmp_path


def test_an_offline_run_holds_the_config_every_row_once_and_the_files(offline):
    sink = WandbSink(WandbConfig(project="wb-test"), offline / "run", run_name="offline-sink", run_id="abc123def")
    assert isinstance(rewindable(sink), AppendOnlySink), "W&B cannot take points back: it is reconciled"
    sink.log_config({"recipe": {"loss": {"type": "cispo"}}, "seed": 3})
    sink.log_metrics({"train/loss": 0.5, "skipped": None}, 1)
    sink.log_metrics({"train/loss": 0.25}, 2)
    sink.log_metrics({"val/pass_rate": 0.4}, 1)  # a validation row after a later train row is kept
    (offline / "fit.json").write_text("{}")
    sink.log_artifact(offline / "fit.json", "fit")
    sink.close("FAILED")
    files = offline_runs(offline / "run")
    assert len(files) == 1 and files[0].name == "run-abc123def.wandb", "offline files go in the run folder"
    assert history(files) == [{"step": 1, "train/loss": 0.5}, {"step": 2, "train/loss": 0.25},
                              {"step": 1, "val/pass_rate": 0.4}]  # fmt: skip
    config = {u.key: json.loads(u.value_json) for r in records_of(files, "config") for u in r.config.update}
    assert config["recipe.loss.type"] == "cispo" and config["seed"] == 3
    (artifact,) = records_of(files, "artifact")
    assert artifact.artifact.type == "fit" and [m.path for m in artifact.artifact.manifest.contents] == ["fit/fit.json"]
    assert records_of(files, "exit")[0].exit.exit_code == 1


# A launch of a run that logs steps 1..5 live (a checkpoint at 2), waits for W&B's log to flush,
# and is killed (SIGKILL: no finish, nothing flushed at exit).
_KILLED_LAUNCH = """
import os, signal, sys, time
from workbench.config import WandbConfig
from workbench.tracking.sink import rewindable
from workbench.tracking.wandb_sink import FLUSH_SECONDS, WandbSink
sink = rewindable(WandbSink(WandbConfig(project="wb-test"), sys.argv[1], run_name="killed"))
sink.start_fresh()
for step in range(1, 6):
    sink.log_metrics({"train/loss": float(step)}, step)
sink.commit(2)
time.sleep(3 * FLUSH_SECONDS)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_run_resumes_its_own_wandb_run_and_each_step_is_there_once(offline):
    """No MLflow: the W&B run's id is kept in the run folder. A launch is killed after step 5
    (checkpoint at 2); the resume reopens the same W&B run, reads W&B's log for the steps it holds
    (3..5, from the lost timeline), redoes 3..7 and sends only 6 and 7."""
    out = offline / "run"
    # it inherits this process's $WANDB_SERVICE, if any: the sink starts its own, which dies with it
    proc = subprocess.run([sys.executable, "-c", _KILLED_LAUNCH, str(out)], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    wandb_id = (out / ID_FILE).read_text().strip()
    assert [r["step"] for r in history(offline_runs(out, closed=0))] == [1, 2, 3, 4, 5], "every step live, before any checkpoint"
    sink = rewindable(WandbSink(WandbConfig(project="wb-test"), out, run_name="killed"))
    sink.rollback(2)  # the resume, in another process: all it knows is what W&B's log holds
    assert sink.held_steps == [3, 4, 5]
    for step in range(3, 8):
        sink.log_metrics({"train/loss": 10.0 * step}, step)
    sink.close("FINISHED")
    files = offline_runs(out)
    assert [f.name for f in files] == [f"run-{wandb_id}.wandb"] * 2, "both launches log to one W&B run"
    rows = history(files)
    assert [(r["step"], r["train/loss"]) for r in rows if "train/loss" in r] == [
        (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 60), (7, 70)]  # fmt: skip
    summary = {u.key: json.loads(u.value_json) for r in records_of(files, "summary") for u in r.summary.update}
    assert summary[AppendOnlySink.EARLIER_TAG].startswith("3-5: logged before the restart from step 2")


def test_a_fresh_start_is_a_new_wandb_run_and_log_fit_finds_the_runs_own(offline):
    out = offline / "run"
    first = WandbSink(WandbConfig(project="wb-test"), out, run_name="r")
    first.start_fresh()
    kept = (out / ID_FILE).read_text().strip()
    assert WandbSink(WandbConfig(project="wb-test"), out, run_name="r").wandb_id == kept, "another process finds it"
    first.start_fresh()  # the run started again from scratch in the same folder
    assert first.wandb_id != kept
    with_mlflow = WandbSink(WandbConfig(project="wb-test"), offline / "m", run_name="r", run_id="f" * 32)
    with_mlflow.start_fresh()
    assert with_mlflow.wandb_id == "f" * 32 == (offline / "m" / ID_FILE).read_text().strip()


def test_completions_go_to_wandb_as_a_table_as_trl_logs_them(offline):
    out = offline / "run"
    sink = rewindable(WandbSink(WandbConfig(project="wb-test"), out, run_name="table", run_id="tbl123"))
    records = [{"group": 0, "prompt": "<|user|>2+2?", "completion": "4", "passed": True, "reward": 1.0,
                "reward/accuracy": 1.0, "advantage": 0.5, "loss_weight": 1.0, "trained": True},
               {"group": 0, "prompt": "<|user|>2+2?", "completion": "5", "passed": False, "reward": -1.0,
                "reward/accuracy": 0.0, "advantage": float("nan"), "loss_weight": 0.0, "trained": False}]  # fmt: skip
    sink.log_samples(3, "train", records)
    sink.log_samples(4, "val", records[:1])
    sink.rollback(3)  # a restart: the step-4 table is held, not logged twice
    sink.log_samples(4, "val", records[:1])
    sink.close("FINISHED")
    files = offline_runs(out)
    tables = [(r["step"], k) for r in history(files) for k in r if k.endswith("completions")]
    assert tables == [(3, "completions"), (4, "val/completions")]
    (train,) = sorted(files[0].parent.glob("files/media/table/completions_*.table.json"))
    table = json.loads(train.read_text())
    assert table["columns"][:4] == ["step", "group", "prompt", "completion"]
    assert {"reward", "reward/accuracy", "passed", "advantage", "trained"} <= set(table["columns"])
    col = {c: i for i, c in enumerate(table["columns"])}
    assert [(row[col["step"]], row[col["completion"]], row[col["advantage"]]) for row in table["data"]] == [
        (3, "4", 0.5), (3, "5", None)]  # fmt: skip


def test_log_completions_false_leaves_the_table_out(offline):
    out = offline / "notable"
    sink = WandbSink(WandbConfig(project="wb-test", log_completions=False), out, run_name="notable", run_id="ntb123")
    sink.log_metrics({"train/loss": 0.5}, step=1)
    sink.log_samples(1, "train", [{"group": 0, "prompt": "p", "completion": "c", "passed": True, "reward": 1.0}])
    sink.close("FINISHED")
    rows = history(offline_runs(out))
    assert [r["step"] for r in rows if "train/loss" in r] == [1] and not any("completions" in r for r in rows)


def test_the_run_log_sends_rows_and_kept_samples_live_and_a_fresh_start_opens_a_new_run(offline, tiny_config):
    """The engine's RunLog: a fresh start makes the run's W&B id; rows and the step's kept samples go
    to W&B as they come; a resume (back_to) reconciles; a fresh start in the same folder is a new run."""
    from workbench.engine.run.metrics import RunLog

    cfg = tiny_config({"tracking.wandb": {"project": "wb-test"}}, name="runlog")
    out = cfg.output_dir()
    log = RunLog(out, sinks=[WandbSink(cfg.tracking.wandb, out, run_name=cfg.name)], samples=cfg.samples)
    log.start_fresh()
    first = (out / ID_FILE).read_text().strip()
    log.log({"train/loss": 0.5}, 1)
    log.keep_samples(1, "train", [{"group": 0, "prompt": "p", "completion": "c", "passed": True, "reward": 1.0,
                                   "advantage": 0.0, "loss_weight": 1.0, "trained": True, "version": 0}])  # fmt: skip
    log.log({"train/loss": 0.25}, 2)
    log.back_to(1)  # a trainer restart from the step-1 checkpoint: W&B holds step 2 already
    log.log({"train/loss": 0.3}, 2)
    log.log({"train/loss": 0.2}, 3)
    log.finish({"status": "finished"}, "finished")
    rows = history(offline_runs(out / "wandb"))
    assert [(r["step"], r["train/loss"]) for r in rows if "train/loss" in r] == [(1, 0.5), (2, 0.25), (3, 0.2)]
    assert [r["step"] for r in rows if "completions" in r] == [1]
    again = RunLog(out, sinks=[WandbSink(cfg.tracking.wandb, out, run_name=cfg.name)], samples=cfg.samples)
    again.start_fresh()
    assert (out / ID_FILE).read_text().strip() != first, "a fresh start in an old folder is a new W&B run"


def test_a_config_asking_for_wandb_without_the_package_is_one_line(monkeypatch, tiny_config):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if it were not installed
    with pytest.raises(ConfigError, match=r"^tracking.wandb.project is set but the wandb package is not installed: pip install"):
        tiny_config({"tracking.wandb": {"project": "p"}})
    assert tiny_config({}).tracking.wandb.project is None  # no W&B asked: nothing needed


@pytest.mark.slow
def test_a_run_logs_the_same_metric_keys_to_wandb_as_to_mlflow(offline, ray_cluster, tiny_config):
    """Issue 44: `tracking.wandb` sends a real run's rows and its fit to W&B (offline here): the
    keys MLflow has, each train step once, and the fit's files."""
    from mlflow import MlflowClient

    from workbench.engine.run.launch import run_to_end
    from workbench.runs.report import report_run_end
    from workbench.tracking.sink import read_jsonl
    from workbench.tracking.store import create_run, ensure_experiment

    uri = f"sqlite:///{offline / 'mlflow.db'}"
    ensure_experiment("wandb", uri)
    run_id = create_run("wandb", "wb", {}, tracking_uri=uri)
    cfg = tiny_config({"train.max_steps": 6, "eval.every_steps": 1, "tracking.mlflow": True, "tracking.tracking_uri": uri,
                       "tracking.run_id": run_id, "tracking.wandb": {"project": "wb-test"}}, name="wb")  # fmt: skip
    summary = run_to_end(cfg, timeout=300)
    assert summary["status"] == "finished"
    report, why = report_run_end(cfg, step=int(summary["steps"]), tracked=True)
    assert report is not None, why
    files = offline_runs(cfg.output_dir() / "wandb", closed=2)
    assert [f.name for f in files] == [f"run-{run_id}.wandb"] * 2, "the run, then the fit, in one W&B run"
    rows = history(files)
    mlflow_keys = set(MlflowClient(uri).get_run(run_id).data.metrics)
    tables = set(TABLE_KEYS.values())  # the kept samples: W&B tables, files under samples/ in MLflow
    assert {k for r in rows for k in r} - {"step"} - tables == mlflow_keys and "fit/A" in mlflow_keys
    tabled = [r for r in rows if "completions" in r]  # the steps' kept samples, TRL's completions table
    assert tabled and {r["step"] for r in tabled} <= set(range(1, 7))
    table = json.loads((files[0].parent / "files" / tabled[-1]["completions"]["path"]).read_text())
    assert {"step", "prompt", "completion", "reward", "passed", "advantage", "trained"} <= set(table["columns"])
    assert {row[0] for row in table["data"]} == {tabled[-1]["step"]}
    train = [r["step"] for r in read_jsonl(cfg.output_dir() / "metrics.jsonl") if "train/loss" in r]
    assert sorted(r["step"] for r in rows if "train/loss" in r) == train == list(range(1, 7))
    fit_files = {m.path for r in records_of(files, "artifact") for m in r.artifact.manifest.contents}
    assert {"fit/fit.json", "fit/backtest.json"} <= fit_files


@pytest.mark.slow
def test_a_killed_run_is_live_and_resumed_once_in_wandb_and_a_tracking_server(offline, ray_cluster, tiny_config, mlflow_server):
    """Issue 53: W&B (offline) and MLflow over http (a real `mlflow server`) get each step within
    seconds, before any checkpoint; the coordinator is killed, the run resumed from its checkpoint,
    and each train step is then there once in both, in one W&B run."""
    from mlflow import MlflowClient

    from workbench.engine.run.launch import launch
    from workbench.runs.checkpoint import CheckpointStore
    from workbench.tracking.sink import read_jsonl
    from workbench.tracking.store import create_run, ensure_experiment

    ensure_experiment("kill", mlflow_server)
    run_id = create_run("kill", "wb-kill", {}, tracking_uri=mlflow_server)
    cfg = tiny_config({"train.max_steps": 10, "checkpoint.every_steps": 5, "tracking.mlflow": True,
                       "tracking.tracking_uri": mlflow_server, "tracking.run_id": run_id,
                       "tracking.wandb": {"project": "wb-test"}}, name="wbkill")  # fmt: skip
    client = MlflowClient(mlflow_server)

    def steps_in_both() -> tuple[list[int], list[int]]:
        in_mlflow = sorted(m.step for m in client.get_metric_history(run_id, "train/loss"))
        rows = history(offline_runs(cfg.output_dir() / "wandb", closed=0))
        return in_mlflow, sorted(r["step"] for r in rows if "train/loss" in r)

    handle = launch(cfg)
    try:
        handle.start()
        deadline = time.time() + 240
        while handle.status()["step"] < 6 and time.time() < deadline:  # past the step-5 checkpoint
            time.sleep(0.05)
        handle.pause()
        k, settled = handle.status()["step"], time.time()
        while time.time() < settled + 2:  # a step already queued may still end
            if handle.status()["step"] != k:
                k, settled = handle.status()["step"], time.time()
            time.sleep(0.1)
        seen_at = time.time()
        while steps_in_both() != (list(range(1, k + 1)),) * 2 and time.time() < seen_at + 10:
            time.sleep(0.2)
        assert 6 <= k < 10 and steps_in_both() == (list(range(1, k + 1)),) * 2, f"10 s after step {k}: {steps_in_both()}"
    finally:
        handle.kill()  # the coordinator dies: W&B's log of this launch keeps what it flushed
    time.sleep(1.0)
    ck = CheckpointStore(f"{cfg.out_dir}/checkpoints").latest_step()
    assert ck == 5, "steps after the checkpoint were logged live, then lost"
    handle2 = launch(cfg, resume=True)
    try:
        handle2.start()
        summary = handle2.wait(timeout=300)
    finally:
        handle2.kill()
    assert summary["status"] == "finished" and summary["resumed_from"] == 5
    train = [r["step"] for r in read_jsonl(cfg.output_dir() / "metrics.jsonl") if "train/loss" in r]
    assert train == list(range(1, 11))
    files = offline_runs(cfg.output_dir() / "wandb")
    assert {f.name for f in files} == {f"run-{run_id}.wandb"} and len(files) == 2, "one W&B run, two launches"
    assert steps_in_both() == (train, train), "each step once in MLflow over http and in W&B"
    tags = client.get_run(run_id).data.tags
    assert tags[AppendOnlySink.EARLIER_TAG].startswith(f"6-{k}: logged before the restart from step 5")
