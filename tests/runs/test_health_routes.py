"""The shipped routes raise no run-health flag on their healthy seeds (issue 53, item 7): the rules
(workbench/runs/health.py) replayed on the saved metrics of real runs of configs/smollm2.yaml,
configs/quickstart.yaml and configs/mathcode.yaml under examples/curves/<route>/ (their READMEs say
how each was made; benchmarks/bench_health_routes.py makes them again). The unhealthy runs that must
still flag are benchmarks/bench_health.py's (docs/measured.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from statistics import median

import pytest

from workbench.config import load_run_config
from workbench.runs.health import VERDICT_PREFIX, check_health, verdict_note
from workbench.runs.report import write_report

ROOT = Path(__file__).resolve().parents[2]
CURVES = ROOT / "examples" / "curves"
ROUTES = ("smollm2", "quickstart", "mathcode")


def saved(route: str) -> list[Path]:
    """A route's saved runs: whole metrics files (SmolLM2's first two seeds) and health rows."""
    return sorted([*(CURVES / route).glob("*.metrics.jsonl.gz"), *(CURVES / route).glob("*.health.jsonl.gz")])


def rows_of(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def series(rows: list[dict], key: str) -> list[float]:
    return [r[key] for r in sorted(rows, key=lambda r: r["step"]) if isinstance(r.get(key), (int, float))]


@pytest.mark.parametrize("route", ROUTES)
def test_each_shipped_route_has_three_healthy_seeds_saved(route):
    assert len(saved(route)) >= 3, saved(route)


@pytest.mark.parametrize("path", [p for r in ROUTES for p in saved(r)], ids=lambda p: p.name.split(".")[0])
def test_a_healthy_seed_of_a_shipped_route_raises_no_flag(path):
    route = path.parent.name
    rows = rows_of(path)
    cfg = load_run_config(ROOT / "configs" / f"{route}.yaml")
    assert max(r["step"] for r in rows) == cfg.train.max_steps  # the whole route, as shipped
    flags = check_health(rows, cfg.health)
    assert flags == [], [f"{f.rule}@{f.step}: {f.message}" for f in flags]
    assert verdict_note(flags) == ""


@pytest.mark.parametrize("path", saved("smollm2"), ids=lambda p: p.name.split(".")[0])
def test_smollm2_starts_past_the_truncation_threshold_and_its_entropy_falls_as_it_learns(path):
    """What the rules used to flag on this route, still in its data: truncation starts above 50%
    (the first window's median) and ends below it, and entropy falls more than 80% while validation
    rises."""
    rows = rows_of(path)
    trunc, entropy, val = series(rows, "train/truncation_rate"), series(rows, "train/entropy"), series(rows, "val/pass_rate")
    assert median(trunc[:5]) > 0.5 and median(trunc[-5:]) < 0.5
    assert median(entropy[-5:]) < 0.2 * max(entropy[:5])
    assert val[-1] - val[0] > 0.3


def test_the_smollm2_reports_forecast_carries_no_health_caveat(tmp_path):
    """The report of a SmolLM2 run: no flag, so its 10x verdict does not add "assumes the run stays healthy"."""
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_of(saved("smollm2")[0])))
    rep = write_report(tmp_path, charts=False)
    assert rep["health"] == []
    assert rep["verdict_10x"] and VERDICT_PREFIX not in rep["verdict_10x"]


BENCH = CURVES / "health-bench"  # benchmarks/bench_health.py --save: the runs made unhealthy on purpose


@pytest.fixture(scope="module")
def unhealthy(request) -> dict:
    """bench_health's runs: name -> (overrides, the rules expected to fire, watched metrics)."""
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_health

    request.addfinalizer(mp.undo)
    return bench_health.RUNS


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.health.jsonl.gz")), ids=lambda p: p.name.split(".")[0])
def test_a_run_made_unhealthy_still_raises_its_flag_and_a_healthy_one_none(path, unhealthy):
    name = path.name.split(".")[0]
    expected = unhealthy[name][1]
    fired = {f.rule for f in check_health(rows_of(path), load_run_config(ROOT / "configs" / "quickstart.yaml").health)}
    if expected:
        assert fired & set(expected), (name, fired, expected)
    else:
        assert fired == set(), (name, fired)


def test_the_runs_made_unhealthy_are_saved():
    assert {"lr-100x", "length-reward", "format-bonus", "fooled-checker"} <= {p.name.split(".")[0] for p in BENCH.glob("*.health.jsonl.gz")}
