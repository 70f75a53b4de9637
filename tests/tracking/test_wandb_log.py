"""Reading W&B's own transaction log (.wandb) back: the rows a real offline run wrote, a log cut
short by a killed process read up to its last whole record, and the points past a step."""

from __future__ import annotations

import time
from pathlib import Path

from workbench.config import WandbConfig
from workbench.tracking import wandb_log
from workbench.tracking.wandb_sink import WandbSink


def _offline_log(folder: Path, monkeypatch) -> Path:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    sink = WandbSink(WandbConfig(project="wb-log"), folder, run_name="log", run_id="log123")
    for step in range(1, 5):
        sink.log_metrics({"train/loss": step / 10}, step)
    sink.log_metrics({"val/pass_rate": 0.5}, 2)  # an evaluation of step 2, after step 4
    sink.close("FINISHED")
    deadline = time.monotonic() + 60  # W&B's finish() can return before its writer is done
    while time.monotonic() < deadline:
        (path,) = folder.glob("wandb/offline-run-*/run-log123.wandb")
        if any(r.WhichOneof("record_type") == "exit" for r in wandb_log.records(path)):
            return path
        time.sleep(0.2)
    raise AssertionError("W&B never wrote its exit record")


def test_the_rows_of_a_real_log_and_the_points_past_a_step(tmp_path, monkeypatch):
    path = _offline_log(tmp_path, monkeypatch)
    rows = wandb_log.history_rows([path])
    assert rows == [{"step": 1, "train/loss": 0.1}, {"step": 2, "train/loss": 0.2}, {"step": 3, "train/loss": 0.3},
                    {"step": 4, "train/loss": 0.4}, {"step": 2, "val/pass_rate": 0.5}]  # fmt: skip
    assert wandb_log.points_after(rows, 2) == {3: {"train/loss"}, 4: {"train/loss"}}


def test_a_log_cut_short_is_read_up_to_its_last_whole_record(tmp_path, monkeypatch):
    path = _offline_log(tmp_path, monkeypatch)
    whole = wandb_log.records(path)
    data = path.read_bytes()
    cut = tmp_path / "cut.wandb"
    cut.write_bytes(data[: len(data) - 5])  # the process died while writing its last record
    assert [r.SerializeToString() for r in wandb_log.records(cut)] == [r.SerializeToString() for r in whole[:-1]]
    (tmp_path / "not.wandb").write_bytes(b"something else")
    assert wandb_log.records(tmp_path / "not.wandb") == []
