"""benchmarks/bench_learning.py's figures on a run folder written by hand: the gain within a wall
window counts start-up, and the curve it saves is one the forecast scoreboard reads."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_learning

    return bench_learning


def run_folder(tmp_path: Path) -> Path:
    """Evaluations at steps 0, 5, 10, 15 (run clock 0, 400, 800, 1200 s), a train row between."""
    rows = [{"step": s, "val/pass_rate": p, "val/pass_rate_se": 0.03, "compute/wall_seconds": w,
             "compute/device_hours": w / 1800, "compute/flops": 1e12 * s}
            for s, p, w in ((0, 0.06, 0.0), (5, 0.2, 400.0), (10, 0.3, 800.0), (15, 0.5, 1200.0))]  # fmt: skip
    rows.insert(2, {"step": 6, "train/pass_rate": 0.9, "compute/wall_seconds": 450.0})
    out = tmp_path / "seed0"
    out.mkdir()
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def evals(out: Path) -> list[dict]:
    from workbench.runs.report import eval_rows
    from workbench.tracking.sink import read_jsonl

    return eval_rows(read_jsonl(out / "metrics.jsonl"))  # what run_seed keeps of the run's rows


def test_the_gain_is_read_at_the_last_evaluation_inside_the_window_start_up_counted(bench, tmp_path):
    rows = evals(run_folder(tmp_path))
    gain, step, at = bench.gain_within(rows, 1000.0, 150.0)  # 800 s + 150 s of start-up fits, 1200 + 150 does not
    assert (step, at) == (10, 950.0)
    assert gain == pytest.approx(0.3 - 0.06)
    assert bench.gain_within(rows, 1000.0, 300.0)[1] == 5  # a slower start-up leaves step 10 outside


def test_the_saved_curve_loads_in_the_scoreboard_and_the_metrics_are_kept_whole(bench, tmp_path):
    from workbench.scaling.forecast.scoreboard import load_folder

    out = run_folder(tmp_path)
    path = bench.write_curve(out, evals(out), tmp_path / "curves", "smollm2__seed0")
    (curve,) = load_folder(tmp_path / "curves")
    assert curve.name == path.stem == "smollm2__seed0"
    assert list(curve.score) == [0.06, 0.2, 0.3, 0.5]  # evaluations only, in step order
    assert curve.x_label == "compute" and curve.compute[-1] == pytest.approx(1200 / 1800)
    with gzip.open(tmp_path / "curves" / "smollm2__seed0.metrics.jsonl.gz", "rt") as f:
        assert f.read() == (out / "metrics.jsonl").read_text()


def test_the_gain_counts_the_measured_start_up_not_what_follows_the_last_step(bench, tmp_path):
    rows = evals(run_folder(tmp_path))
    r = {"startup_s": 150.0, "wall_s": 1500.0, "run_s": 1210.0}  # 140 s after the last step: report, export
    assert bench.start_up(r) == (150.0, "")
    assert bench.gain_within(rows, 1400.0, bench.start_up(r)[0])[1] == 15  # 1200 + 150 fits in 1400
    unseen = {**r, "startup_s": None}
    seconds, note = bench.start_up(unseen)
    assert seconds == 290.0 and "upper bound" in note  # the command less the run clock, said
    assert bench.gain_within(rows, 1400.0, seconds)[1] == 10  # 1200 + 290 does not
