"""Weights & Biases beside MLflow, in offline mode, checked against the .wandb file W&B writes.

wandb 0.31 has no Python reader for its offline log, so `wandb_records` parses the format: the
header ":W&B" + magic + version (7 bytes), then LevelDB-log blocks of 32 KiB whose chunks (4-byte
CRC, 2-byte length, 1-byte type: full, first, middle, last) carry protobuf `Record`s."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

from workbench.config import WandbConfig
from workbench.configtools import ConfigError
from workbench.tracking.sink import CommitGatedSink, rewindable
from workbench.tracking.wandb_sink import WandbSink

BLOCK, CHUNK_HEADER = 32768, 7


def wandb_records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a .wandb file"
    records, pos, buf = [], 7, b""
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER]) if left >= CHUNK_HEADER else (0, 0, 0)
        if left < CHUNK_HEADER or kind == 0:  # a block's zero-padded tail
            pos += left
            continue
        body = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        buf = body if kind in (1, 2) else buf + body
        if kind in (1, 4):  # full, or the last chunk of a record
            record = pb.Record()
            record.ParseFromString(buf)
            records.append(record)
    return records


def offline_runs(folder: Path) -> list[Path]:
    return sorted(folder.glob("**/offline-run-*/run-*.wandb"))


def history(files: list[Path]) -> list[dict]:
    """Every history row of the runs' .wandb files, W&B's own `_` keys left out."""
    rows = []
    for f in files:
        for r in wandb_records(f):
            if r.WhichOneof("record_type") == "history":
                items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
                rows.append({k: v for k, v in items.items() if not k.startswith("_")})
    return rows


def records_of(files: list[Path], kind: str) -> list:
    return [r for f in files for r in wandb_records(f) if r.WhichOneof("record_type") == kind]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    return tmp_path


def test_an_offline_run_holds_the_config_every_row_once_and_the_files(offline):
    sink = WandbSink(WandbConfig(project="wb-test"), offline / "run", run_name="offline-sink", run_id="abc123def")
    assert isinstance(rewindable(sink), CommitGatedSink), "W&B cannot take points back: it is gated"
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
    files = offline_runs(cfg.output_dir() / "wandb")
    assert [f.name for f in files] == [f"run-{run_id}.wandb"] * 2, "the run, then the fit, in one W&B run"
    rows = history(files)
    mlflow_keys = set(MlflowClient(uri).get_run(run_id).data.metrics)
    assert {k for r in rows for k in r} - {"step"} == mlflow_keys and "fit/A" in mlflow_keys
    train = [r["step"] for r in read_jsonl(cfg.output_dir() / "metrics.jsonl") if "train/loss" in r]
    assert sorted(r["step"] for r in rows if "train/loss" in r) == train == list(range(1, 7))
    fit_files = {m.path for r in records_of(files, "artifact") for m in r.artifact.manifest.contents}
    assert {"fit/fit.json", "fit/backtest.json"} <= fit_files
