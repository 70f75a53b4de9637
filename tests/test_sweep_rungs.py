"""workbench.sweep.rungs: the decision round on synthetic curves (no MLflow, no Ray), and the
compute account behind sweep/compute_saved_frac."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import UserError
from workbench.sweep.rungs import Progress, RungMonitor, _Run, compute_account, fit_group


def curve(A: float, n: int, *, per_step: float = 0.01, every: int = 2, max_steps: int = 40, seed: int = 0) -> Progress:
    """Evaluations at steps 0, every, ... (n at compute > 0) of a sigmoid rising from 0.15 to A."""
    rng = np.random.default_rng(seed)
    steps = np.arange(0, n * every + 1, every)
    x = steps * per_step
    with np.errstate(divide="ignore"):
        y = np.where(x > 0, 0.15 + (A - 0.15) / (1 + (0.1 / np.maximum(x, 1e-12)) ** 1.5), 0.15)
    y = y + np.where(x > 0, rng.normal(0, 0.005, len(x)), 0)
    return Progress(x, y, int(steps[-1]), float(x[-1]), max_steps)


def monitor(tmp_path, **kw) -> tuple[RungMonitor, dict[str, _Run]]:
    mon = RungMonitor("sqlite:///unused.db", "val/pass_rate", "compute/device_hours", rung_evals=4, **kw)
    runs = {
        "h": _Run("healthy", "healthy", "rid-h", tmp_path / "h.stop", ended=True, rung=5, last=curve(0.6, 20)),
        "c": _Run("crippled", "crippled", "rid-c", tmp_path / "c.stop", rung=1, last=curve(0.17, 4, seed=1)),
    }
    return mon, runs


def test_a_point_that_cannot_win_is_asked_to_stop_with_the_reason(tmp_path):
    mon, runs = monitor(tmp_path)
    assert mon.decide(runs) == ["c"]
    reason = (tmp_path / "c.stop").read_text()
    assert reason.startswith("stopped by forecast after 4 evaluations") and "healthy" in reason
    assert mon.requested == {"c": reason.strip()}
    assert not (tmp_path / "h.stop").exists()  # the best point never stops
    assert mon.rounds[-1]["budget"] == pytest.approx(0.01 * 40)  # default: a full point's compute
    assert mon.decide(runs) == []  # asked once


def test_nothing_stops_before_its_first_rung_or_without_a_fit(tmp_path):
    mon, runs = monitor(tmp_path)
    runs["c"].rung = 0
    assert mon.decide(runs) == []
    runs["c"].rung, runs["c"].last = 1, curve(0.17, 3)  # 3 evaluations: no fit yet, the point continues
    assert fit_group([runs["c"].last]) is None and mon.decide(runs) == []


def test_an_equal_point_continues(tmp_path):
    mon, runs = monitor(tmp_path)
    runs["c"].last = curve(0.6, 8, seed=2)
    assert mon.decide(runs) == []


def test_seeds_of_a_point_are_fitted_together():
    fit = fit_group([curve(0.6, 10, seed=0), curve(0.6, 10, seed=1)])
    assert len(fit.run_names) == 2 and fit.n == 20 and abs(fit.A - 0.6) < 0.05


def test_compute_account():
    p = curve(0.5, 5, per_step=0.01, every=2, max_steps=40)  # stopped at step 10 of 40
    assert compute_account(p, stopped=True) == pytest.approx({"spent": 0.10, "unspent": 0.30})
    assert compute_account(p, stopped=False) == pytest.approx({"spent": 0.10, "unspent": 0.0})
    assert compute_account(None, stopped=True) == {"spent": 0.0, "unspent": 0.0}


def test_bad_rung_size_and_budget_are_user_errors():
    with pytest.raises(UserError, match="at least 4"):
        RungMonitor("", "m", "x", rung_evals=3)
    with pytest.raises(UserError, match="--budget"):
        RungMonitor("", "m", "x", rung_evals=4, budget=0)
