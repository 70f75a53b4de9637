"""Shared helpers for the scaling tests: synthetic curves with known parameters, real curve paths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED_CURVES = ROOT.parent / "shared" / "data" / "curves"
EXAMPLE_CURVES = ROOT / "examples" / "curves"

# The 8B ScaleRL run as publicly digitized (reference sheet, section 1).
PAPER_8B = {"R0": 0.4017, "A": 0.6446, "C_mid": 10920.0, "B": 1.682}


def sigmoid(c, R0, A, C_mid, B):
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        return R0 + (A - R0) / (1 + (C_mid / c) ** B)


def synth(n=60, lo=1500.0, hi=50000.0, noise=0.01, seed=0, params=None, spacing="geom", with_zero=True):
    """(compute, score) drawn from Eq. 1 with Gaussian noise; compute 0 carries R0 exactly."""
    p = dict(PAPER_8B, **(params or {}))
    rng = np.random.default_rng(seed)
    c = np.geomspace(lo, hi, n) if spacing == "geom" else np.linspace(lo, hi, n)
    y = np.clip(sigmoid(c, **p) + rng.normal(0, noise, n), 0, 1)
    if with_zero:
        c, y = np.r_[0.0, c], np.r_[p["R0"], y]
    return c, y


# The CPU demo's curve shape, in steps (issue 34's far-band cases): a stretched exponential
# R0 + (P - R0)(1 - exp(-(C/tau)^k)) with P 0.49, ln tau ln 600, k 0.9 from R0 0.148.
DEMO_STRETCHED = {"r0": 0.148, "P": 0.49, "log_tau": float(np.log(600.0)), "k": 0.9}


def far_case(family: str, last: float, seed: int) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(compute, score, 10x the last compute, the true score there) of one simulated curve cut at
    `last`: "sigmoid" (the paper's 8B run, 60 points from 1.5k GPU-hours, noise 0.01) or "stretched"
    (the demo's shape, an evaluation every 35 steps, noise 0.01). benchmarks/bench_ceiling.py --coverage."""
    from workbench.scaling.fit.stretched import stretched_curve

    if family == "sigmoid":
        c, y = synth(n=60, lo=1500, hi=last, noise=0.01, seed=1000 + seed)
        return c, y, 10 * last, float(sigmoid(10 * last, **PAPER_8B))
    d = DEMO_STRETCHED
    shape = (d["P"], d["log_tau"], d["k"])
    c = np.arange(35.0, last + 1, 35.0)
    y = stretched_curve(c, d["r0"], *shape) + np.random.default_rng(seed).normal(0, 0.01, len(c))
    return np.r_[0.0, c], np.r_[d["r0"], y], 10 * last, float(stretched_curve(np.array([10 * last]), d["r0"], *shape)[0])


def curve_path(name: str) -> Path:
    """A real curve: from the shipped examples (the package's copy), else from shared/."""
    for base in (EXAMPLE_CURVES, SHARED_CURVES):
        if (base / name).is_file():
            return base / name
    pytest.skip(f"real curve {name} not found")


QWEN_VAL = "qwen2.5-0.5b-instruct_gsm8k_ppo__val.csv"
GEMMA_VAL = "gemma-2-2b-it-sft_gsm8k_ppo__val.csv"
QWEN_TRAIN = "qwen2.5-0.5b-instruct_gsm8k_ppo__train_reward.csv"
GEMMA_TRAIN = "gemma-2-2b-it-sft_gsm8k_ppo__train_reward.csv"
