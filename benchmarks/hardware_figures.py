"""What the hardware gives a run: this machine's matmul peak, and where a trainer's step goes.

Used by bench_real_shape.py (MFU against the measured peak, the step's time split); a module of
its own so that other benchmarks read the same figures the same way.

    .venv/bin/python benchmarks/hardware_figures.py [--threads 1]   # prints the fp32 and bf16 peaks
"""

from __future__ import annotations

import argparse
import time
from typing import Any


def matmul_peak_tflops(dtype: Any, threads: int, size: int = 2048, repeats: int = 5) -> float:
    """This machine's dense matmul rate (best of `repeats`) in `dtype` on `threads` threads."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x, y = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        x @ y  # warm-up
        best = min(_timed(lambda: x @ y) for _ in range(repeats))
    finally:
        torch.set_num_threads(before)
    return 2 * size**3 / best / 1e12


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def step_split(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean seconds per step (after the first, which carries the start-up) of the trainer's step:
    its compute, its push, waiting for rollouts; and the generator's busy time beside it."""
    later = list(zip(rows, rows[1:]))
    if not later:
        return {}
    mean = lambda f: sum(f(prev, r) for prev, r in later) / len(later)  # noqa: E731
    return {
        "step_wall": mean(lambda p, r: r["compute/wall_seconds"] - p["compute/wall_seconds"]),
        "train": mean(lambda p, r: (r.get("time/train") or 0.0)),
        "weight_push": mean(lambda p, r: (r.get("time/weight_gather") or 0.0) + (r.get("time/weight_sync") or 0.0)),
        "wait_for_rollouts": mean(lambda p, r: (r.get("time/trainer_wait") or 0.0) - (p.get("time/trainer_wait") or 0.0)),
        "reward_wait": mean(lambda p, r: (r.get("time/reward_wait") or 0.0)),
        "generator_busy": mean(lambda p, r: (r.get("time/generate") or 0.0)),
    }


if __name__ == "__main__":
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    for dtype in (torch.float32, torch.bfloat16):
        print(f"{dtype}: {matmul_peak_tflops(dtype, a.threads):.3f} TFLOP/s on {a.threads} thread(s)")
