"""History prior: a young run borrows the shape of finished runs of its family (MAP fit)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.scaling.synthetic import sigmoid
from workbench.errors import UserError
from workbench.scaling import fit_sigmoid
from workbench.scaling.fit.prior import SigmoidPrior

FAMILY = {"R0": 0.20, "A": 0.60, "C_mid": 6000.0, "B": 2.0}


def family_run(seed: int, n: int = 60, noise: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    """One run of the family: its own A, C_mid, B near the family's; evaluations evenly spaced in compute."""
    rng = np.random.default_rng(seed)
    p = dict(FAMILY, A=FAMILY["A"] + rng.normal(0, 0.01), C_mid=FAMILY["C_mid"] * np.exp(rng.normal(0, 0.1)), B=FAMILY["B"] * np.exp(rng.normal(0, 0.05)))
    c = np.linspace(0, 20000, n + 1)
    y = np.clip(sigmoid(c, **p) + np.r_[0.0, rng.normal(0, noise, n)], 0, 1)
    y[0] = p["R0"]
    return c, y


@pytest.fixture(scope="module")
def prior() -> SigmoidPrior:
    finished = [fit_sigmoid(*family_run(seed), method="sigmoid", n_boot=0) for seed in range(5)]
    return SigmoidPrior.from_fits(finished)


def heldout_rmse(fit, c, y, until):
    test = c > until
    return float(np.sqrt(np.mean((np.asarray(fit.predict(c[test])) - y[test]) ** 2)))


@pytest.mark.parametrize("seed", [100, 101, 102])
def test_young_run_forecasts_better_with_the_family_prior(prior, seed):
    c, y = family_run(seed)
    until = 0.25 * c[-1]  # before the bend: C_mid is near 30% of the run
    alone = fit_sigmoid(c, y, fit_until=until, n_boot=50)
    helped = fit_sigmoid(c, y, fit_until=until, n_boot=50, prior=prior)
    assert heldout_rmse(helped, c, y, until) < heldout_rmse(alone, c, y, until)
    assert heldout_rmse(helped, c, y, until) < 0.05
    # the prior's move is reported, and A's interval is still reported
    assert "moved A" in helped.prior_note and "moved A" in helped.summary()
    assert helped.A_ci[0] <= helped.A <= helped.A_ci[1]


def test_prior_needs_two_runs_with_a_rise():
    flat = fit_sigmoid(np.r_[0.0, np.geomspace(10, 1000, 30)], np.r_[0.5, 0.5 + np.random.default_rng(0).normal(0, 0.02, 30)], n_boot=0)
    assert flat.no_gain
    with pytest.raises(UserError, match="at least 2"):
        SigmoidPrior.from_fits([flat])


def test_prior_fades_with_a_full_curve(prior):
    # a run far from the family, seen to its end: its own data win over the prior
    c = np.linspace(0, 20000, 61)
    y = sigmoid(c, R0=0.2, A=0.8, C_mid=3000.0, B=2.0)
    fit = fit_sigmoid(c, y + np.r_[0, np.random.default_rng(3).normal(0, 0.005, 60)], prior=prior, n_boot=0)
    assert abs(fit.A - 0.8) < 0.02
