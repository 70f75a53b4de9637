"""`predict_config` against its plainest rival, carrying the nearest run's curve over: where the laws
lose the leave-one-out backtest to it, the prediction falls back to it and says so (issue 36)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.cli import main
from workbench.scaling import fit_sigmoid
from workbench.scaling.forecast.config_curve import CARRIED, predict_config

C = np.r_[0.0, np.linspace(0.025, 1.0, 40)]
# a depth ladder as the CPU showed one: the first rung learns fast, deeper rungs settle on one slower curve
LADDER = {1: (0.70, 2.0, 0.10), 2: (0.62, 2.0, 0.30), 3: (0.58, 2.0, 0.32), 4: (0.57, 2.0, 0.33)}


def _curve(A: float, B: float, C_mid: float, rng: np.random.Generator, R0: float = 0.1) -> np.ndarray:
    y = R0 + (A - R0) / (1 + (C_mid / np.maximum(C, 1e-9)) ** B)
    return np.r_[R0, y[1:] + rng.normal(0, 0.01, C.size - 1)]


@pytest.fixture(scope="module")
def ladder() -> dict[int, np.ndarray]:
    rng = np.random.default_rng(0)
    return {k: _curve(*p, rng) for k, p in LADDER.items()}


def test_laws_that_lose_to_the_largest_curve_fall_back_to_it_and_the_band_holds_the_held_out_run(ladder):
    fits = {k: fit_sigmoid(C, ladder[k], r0=0.1, n_boot=100) for k in (1, 2, 3)}
    p = predict_config(fits, at=4, key="model.n_layer")
    assert p.fallback == "3" and set(p.forms.values()) == {CARRIED}
    assert p.warnings[0].startswith("no law beat carrying the nearest run's curve over") and "run 3's curve" in p.warnings[0]
    carried = next(r for r in p.backtest if r["A"] == CARRIED)
    assert carried["chosen"] and carried["loo_rmse"] < min(r["loo_rmse"] for r in p.backtest if r["A"] != CARRIED)
    held_out = ladder[4][1:]
    assert np.sqrt(np.mean((p.predict(C[1:]) - held_out) ** 2)) < 0.03
    lo, hi = p.band(C[1:], kind="prediction")
    assert np.mean((held_out >= lo) & (held_out <= hi)) >= 0.9
    assert p.to_dict()["fallback"] == "3"


def test_where_a_law_wins_nothing_falls_back():
    rng = np.random.default_rng(1)  # A and C_mid move with the setting as the laws' forms say
    fits = {w: fit_sigmoid(C, _curve(0.4 + 0.08 * np.log2(w), 2.0, 0.1 * w ** 0.7, rng), r0=0.1, n_boot=100) for w in (1, 2, 4, 8)}
    p = predict_config(fits, at=16)
    assert p.fallback == "" and CARRIED not in p.forms.values()
    assert any(r["A"] == CARRIED and not r["chosen"] for r in p.backtest)  # the rival is on record


def test_workbench_predict_says_when_it_fell_back(ladder, tmp_path, capsys):
    paths = []
    for k in (1, 2, 3):
        paths.append(tmp_path / f"model.n_layer={k}.csv")
        paths[-1].write_text("compute,pass_rate\n" + "".join(f"{c},{y}\n" for c, y in zip(C, ladder[k])))
    assert main(["predict", *map(str, paths), "--by", "model.n_layer", "--at", "4"]) == 0
    assert "warning: no law beat carrying the nearest run's curve over" in capsys.readouterr().out
    assert main(["predict", *map(str, paths), "--by", "model.n_layer", "--at", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fallback"] == "model.n_layer=3.csv"  # runs are named by their files


def test_a_ladder_rung_decided_on_a_carried_curve_says_so(ladder):
    from workbench.scaling.forecast.ladder import next_rung

    fits = {k: fit_sigmoid(C, ladder[k], r0=0.1, n_boot=100) for k in (1, 2, 3)}
    decision = next_rung(fits, 4, key="model.n_layer")
    assert decision.reason.startswith("no law beat carrying run 3's curve over") and decision.prediction.fallback == "3"
