"""Seeded runs drawn from a known sigmoid law, for tests that score a study's verdicts."""

from __future__ import annotations

import numpy as np


def draw_runs(A: float, B: float, seed: int, *, C_mid: float = 0.2, n: int = 3, points: int = 50, noise: float = 0.006,
              R0: float = 0.1) -> list[tuple[np.ndarray, np.ndarray]]:
    """`n` runs (seeds) of R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) on compute 0, 1/points, .., 1, plus noise."""
    rng = np.random.default_rng(seed)
    c = np.linspace(1.0 / points, 1.0, points)
    truth = R0 + (A - R0) / (1 + (C_mid / c) ** B)
    return [(np.r_[0.0, c], np.r_[R0, truth + rng.normal(0, noise, c.size)]) for _ in range(n)]
