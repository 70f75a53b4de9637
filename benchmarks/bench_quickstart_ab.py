"""The quickstart before and after a change, alternating on one machine: samples/s, time to the
same pass rate, learning gain.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_quickstart_ab.py --before REV [--runs 3]
        [--config configs/quickstart.yaml] [--set key=value ...] [--out DIR]

`--before REV` is a commit (its `workbench/` and `configs/` are unpacked with `git archive` into a
temporary folder and run from there); the after side is this working tree. Each side runs
`workbench run --config CONFIG --fresh` `--runs` times, alternating before/after so that the
machine's drift falls on both. Per run: wall seconds, trained samples per second, validation pass
rate first -> last, and the wall seconds (`compute/wall_seconds` of the validation row) at which
the run first reached the target pass rate: the lowest final pass rate among the before runs (so
every before run reaches it). Summary: the means and the after/before ratios. Run it alone on
the machine (`/work/bin/quiet` here).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def unpack(rev: str, into: Path) -> Path:
    """`rev`'s workbench/ and configs/ under `into` (what `workbench run` needs)."""
    archive = into / "src.tar"
    subprocess.run(["git", "archive", "-o", str(archive), rev, "workbench", "configs"], cwd=REPO, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "src", filter="data")
    return into / "src"


def run_once(src: Path, config: str, out: Path, sets: list[str]) -> dict:
    cmd = [sys.executable, "-m", "workbench.cli", "run", "--config", config, "--out", str(out), "--fresh", "--quiet", "--no-report"]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{src}: workbench run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = [(r["compute/wall_seconds"], r["val/pass_rate"]) for r in rows if "val/pass_rate" in r]
    return {"wall": time.time() - t0, "samples_per_s": summary["samples_per_second"], "first": summary["val_pass_rate_first"],
            "last": summary["val_pass_rate_last"], "curve": sorted(curve)}  # fmt: skip


def time_to(curve: list[tuple[float, float]], target: float) -> float:
    """The wall seconds of the first evaluation at or above `target` (inf if none)."""
    return next((t for t, rate in curve if rate >= target), math.inf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the commit to compare against (e.g. HEAD~3)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--set", action="append", default=[], help="a config override for both sides")
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        sides = {"before": unpack(args.before, Path(tmp)), "after": REPO}
        res: dict[str, list[dict]] = {"before": [], "after": []}
        for i in range(args.runs):
            for side, src in sides.items():
                r = run_once(src, args.config, out / f"{side}{i}", args.set)
                res[side].append(r)
                print(f"{side:>6} run {i}: {r['wall']:6.1f} s wall, {r['samples_per_s']:7.0f} samples/s, "
                      f"validation {r['first']:.3f} -> {r['last']:.3f}", flush=True)  # fmt: skip
    target = min(r["last"] for r in res["before"])
    print(f"\nbefore = {args.before}, after = this tree; {args.runs} runs each, alternating; "
          f"target pass rate {target:.3f} (the lowest final one of the before runs)")  # fmt: skip
    mean = {}
    for side, runs in res.items():
        reach = [time_to(r["curve"], target) for r in runs]
        gains = [r["last"] - r["first"] for r in runs]
        mean[side] = {"sps": statistics.mean(r["samples_per_s"] for r in runs), "wall": statistics.mean(r["wall"] for r in runs),
                      "reach": statistics.mean(reach), "gain": statistics.mean(gains)}  # fmt: skip
        sd = statistics.stdev(gains) if len(gains) > 1 else 0.0
        sps = " / ".join(f"{r['samples_per_s']:.0f}" for r in runs)
        when = " / ".join(f"{t:.1f}" for t in reach)
        print(f"{side:>6}: samples/s {sps}; to target (s) {when}; gain {mean[side]['gain']:+.3f} (sd {sd:.3f})")
    a, b = mean["after"], mean["before"]
    print(f"after / before: samples/s {a['sps'] / b['sps']:.2f}x, time to the target pass rate "
          f"{a['reach'] / b['reach']:.0%} of before's, wall {a['wall'] / b['wall']:.0%}, gain {a['gain']:+.3f} vs {b['gain']:+.3f}")


if __name__ == "__main__":
    main()
