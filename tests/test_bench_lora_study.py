"""benchmarks/bench_lora_study.py on run folders written by hand: a longer finished run of the same
settings is read and cut, another setting is rerun, and the throughput is read at the cut."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_lora_study

    return bench_lora_study


def finished(folder: Path, *, steps: int, lr: float = 3e-4, seed: int = 1, rank: int | None = 8) -> Path:
    folder.mkdir(parents=True)
    lora = None if rank is None else {"rank": rank, "alpha": 16.0}
    (folder / "config.json").write_text(json.dumps({"seed": seed, "train": {"lr": lr, "max_steps": steps}, "model": {"lora": lora}}))
    rows = []
    for s in range(0, steps + 1):
        if s:
            rows.append({"step": s, "train/loss": 0.1, "time/generate": 2.0, "time/train_compute": 1.0, "time/weight_gather": 0.1,
                         "compute/flops": 10.0 * s, "compute/device_hours": 0.01 * s, "compute/wall_seconds": 3.0 * s,
                         "throughput/samples_per_second": 5.0 + s})  # fmt: skip
        if s % 5 == 0:
            rows.append({"step": s, "val/pass_rate": s / 100})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps({"status": "finished", "steps": steps, "wall_seconds": 3.0 * steps}))
    return folder


def test_a_longer_finished_run_of_the_same_settings_is_read_and_cut(bench, tmp_path, monkeypatch):
    finished(tmp_path / "lora-r8-s1", steps=90)
    monkeypatch.setattr(bench, "workbench_run", lambda *a, **k: pytest.fail("a finished run was rerun"))
    done = bench.one_run(tmp_path / "base.yaml", tmp_path, "lora-r8-s1", {"rank": 8, "alpha": 16}, 3e-4, 50, 1)
    assert max(r["step"] for r in done.rows) == 50
    assert bench.curve(done.rows) == ([0.0, *(10.0 * s for s in range(5, 51, 5))], [s / 100 for s in range(0, 51, 5)])
    t = bench.throughput([done])
    assert (t["flops"], t["wall_s"], t["sequences_per_s"]) == (500.0, 150.0, 55.0)  # at step 50, not the run's end
    assert (t["generate_s"], t["train_compute_s"], t["push_s"]) == (2.0, 1.0, 0.1)


@pytest.mark.parametrize("other", [{"steps": 40}, {"steps": 90, "lr": 1e-4}, {"steps": 90, "seed": 0}, {"steps": 90, "rank": 1},
                                   {"steps": 90, "rank": None}])  # fmt: skip
def test_a_shorter_run_or_other_settings_are_not_this_run(bench, tmp_path, other):
    folder = finished(tmp_path / "run", **other)
    assert not bench.same_settings(folder, {"rank": 8, "alpha": 16}, 3e-4, 50, 1)
