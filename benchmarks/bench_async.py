"""Does asynchrony pay? PipelineRL-k vs synchronous RL, same task, seed and step count.

    .venv/bin/python benchmarks/bench_async.py [--config configs/quickstart.yaml] [--steps 100] [--k 8]

Runs both algorithms one after the other on one Ray local cluster and prints trained samples
per wall-second (generation and training overlap in the pipeline), the ratio (target >= 1.3x),
the validation pass rate each reached, and the trainer's share of wall time spent in
forward/backward/optimizer (target >= 85% for the pipeline).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def run(config: str, algorithm: str, k: int, steps: int, out: str) -> dict:
    from workbench.config import load_run_config
    from workbench.engine import run_to_end

    cfg = load_run_config(
        config,
        [
            f"recipe.off_policy.algorithm={algorithm}",
            f"recipe.off_policy.k={k}",
            f"train.max_steps={steps}",
            f"out_dir={out}/{algorithm}",
            f"name=bench-{algorithm}",
            f"eval.every_steps={steps}",
            "eval.at_start=false",
        ],
    )
    summary = run_to_end(cfg, resume=False)
    from workbench.tracking.sink import read_jsonl

    rows = [r for r in read_jsonl(f"{out}/{algorithm}/metrics.jsonl") if "time/train_compute" in r]
    last = rows[-1]
    wall = max(summary["trainer_wall_seconds"], 1e-9)
    compute = sum(r["time/train_compute"] for r in rows)
    prep = sum(r["time/train_prep"] for r in rows)
    wait = last["time/trainer_wait"]
    summary["trainer_breakdown"] = {
        "forward/backward/optimizer": compute / wall,
        "batch preparation": prep / wall,
        "waiting for rollouts": wait / wall,
        "Ray transfers and scheduling": max(0.0, 1 - (compute + prep + wait) / wall),
    }
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--k", type=int, default=8)
    args = ap.parse_args()
    import ray

    from workbench.engine.cluster import connect

    connect(num_cpus=2, lasting=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:
        pipe = run(args.config, "pipeline", args.k, args.steps, tmp)
        sync = run(args.config, "sync", 1, args.steps, tmp)
    ray.shutdown()
    ratio = pipe["samples_per_second"] / max(sync["samples_per_second"], 1e-9)
    print(f"{'':24s}{'pipeline k=' + str(args.k):>16s}{'sync':>12s}")
    print(f"{'samples / wall-second':24s}{pipe['samples_per_second']:16.1f}{sync['samples_per_second']:12.1f}")
    print(f"{'wall seconds':24s}{pipe['wall_seconds']:16.1f}{sync['wall_seconds']:12.1f}")
    print(f"{'final val pass rate':24s}{pipe['val_pass_rate_last']:16.3f}{sync['val_pass_rate_last']:12.3f}")
    print(f"{'trainer busy share':24s}{pipe['trainer_utilisation']:16.1%}{sync['trainer_utilisation']:12.1%}")
    print(f"{'max staleness':24s}{pipe['staleness_max']:16.0f}{sync['staleness_max']:12.0f}")
    print(f"throughput ratio pipeline/sync: {ratio:.2f}x (target >= 1.3x)")
    print("pipeline trainer wall time:")
    for key, share in pipe["trainer_breakdown"].items():
        print(f"  {key:32s}{share:8.1%}")
    print(json.dumps({"ratio": ratio, "pipeline": pipe, "sync": sync}, default=float))


if __name__ == "__main__":
    main()
