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
