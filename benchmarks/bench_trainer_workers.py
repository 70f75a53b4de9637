"""Does a sharded trainer keep up? The same run with 1 and with N trainer workers, side by side.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_trainer_workers.py [--config configs/quickstart.yaml]
        [--steps 40] [--workers 1 2]

Each run is the config's pipeline run for `--steps` steps (no validation). Printed per worker
count: trained samples per wall-second, the trainer's busy share (forward/backward/optimizer
over the trainer's wall time), and the mean time to gather the full weights for the generators
(`time/weight_gather`: FlatWeights from the one worker, or the FSDP2 all-gather onto rank 0).
On a CPU machine N workers share the same cores, so N > 1 is a correctness run, not a speed-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def run(config: str, workers: int, steps: int, out: str) -> dict:
    from workbench.config import load_run_config
    from workbench.engine import run_to_end
    from workbench.tracking.sink import read_jsonl

    overrides = [
        f"train.max_steps={steps}",
        f"out_dir={out}/w{workers}",
        f"name=bench-trainer-w{workers}",
        f"eval.every_steps={steps}",
        "eval.at_start=false",
        f"checkpoint.every_steps={steps}",
    ]
    if workers != 1:  # the key is absent from configs older than the multi-worker trainer
        overrides.append(f"resources.trainer_workers={workers}")
    summary = run_to_end(load_run_config(config, overrides), resume=False)
    rows = [r for r in read_jsonl(f"{out}/w{workers}/metrics.jsonl") if "time/train_compute" in r]
    gather = [r["time/weight_gather"] for r in rows if r.get("time/weight_gather") is not None]
    return {
        "samples_per_second": summary["samples_per_second"],
        "trainer_busy": summary["trainer_utilisation"],
        "weight_gather_s": sum(gather) / len(gather) if gather else float("nan"),
        "val_pass_rate": summary["val_pass_rate_last"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as out:
        # most workers first: the local Ray cluster is sized by the first run that starts it
        for n in sorted(args.workers, reverse=True):
            results[n] = run(args.config, n, args.steps, out)
    print(f"{'trainer workers':>16} {'samples/s':>10} {'trainer busy':>13} {'weight gather (s)':>18}")
    for n, r in sorted(results.items()):
        print(f"{n:>16} {r['samples_per_second']:>10.1f} {r['trainer_busy']:>13.1%} {r['weight_gather_s']:>18.4f}")


if __name__ == "__main__":
    main()
