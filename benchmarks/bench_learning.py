"""Does the CPU quickstart really learn? Runs configs/quickstart.yaml and prints the targets.

    .venv/bin/python benchmarks/bench_learning.py [--config configs/quickstart.yaml]

Targets (issue: the engine): the run raises the validation pass rate by >= 0.25 absolute, the
ScaleRL sigmoid fitted to its curve has R^2 >= 0.9, and the trainer spends >= 85% of its wall
time in forward/backward/optimizer. `make demo` runs the same config (plus set-up) end to end.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    args = ap.parse_args()
    import ray

    from workbench.config import load_run_config
    from workbench.engine.launch import run_to_end
    from workbench.engine.report import write_report

    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_run_config(args.config, [f"out_dir={tmp}/run"])
        try:
            s = run_to_end(cfg, resume=False)
        finally:
            ray.shutdown()
        rep = write_report(f"{tmp}/run", charts=False)
    total = time.time() - t0
    print(f"{'wall time incl. warm-up and Ray start':40s}{total:10.0f} s   (target < 600 s with set-up)")
    print(f"{'validation pass rate':40s}{s['val_pass_rate_first']:10.3f} -> {s['val_pass_rate_last']:.3f}")
    print(f"{'gain':40s}{rep['gain']:+10.3f}     (target >= +0.25)")
    print(f"{'sigmoid R^2':40s}{rep['r2']:10.3f}     (target >= 0.9)")
    print(f"{'fit: A / B / C_mid (device-hours)':40s}{rep['A']:10.3f} / {rep['B']:.2f} / {rep['C_mid']:.3g}")
    print(f"{'trainer share in fwd/bwd/optimizer':40s}{s['trainer_utilisation']:10.1%}     (target >= 85%)")
    print(f"{'trainer waiting for rollouts':40s}{s['trainer_wait_seconds'] / max(s['trainer_wall_seconds'], 1e-9):10.1%}")


if __name__ == "__main__":
    main()
