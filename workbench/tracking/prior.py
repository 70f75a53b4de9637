"""History prior: the sigmoid shape of an experiment's finished runs, read from MLflow.

    from workbench.tracking.prior import history_prior
    prior = history_prior("ablations", where={"recipe.name": "scalerl"}, exclude=[young_run_id])
    fit = fit_sigmoid(compute, score, prior=prior)      # the young run borrows the family's shape
    print(prior.describe()); fit.prior_note

Finished runs (MLflow status FINISHED) of the experiment, optionally filtered by parameter values
(`where`: column of `queries.runs_frame` -> value, compared as strings), are each fitted with the
plain sigmoid (`fit_sigmoid(method="sigmoid")`; R0 measured at compute 0 when logged, else the
first point), and those that show a rise become `workbench.scaling.fit.prior.SigmoidPrior.from_fits`.
Runs whose curve is missing or too short are skipped; fewer than two usable runs is a UserError.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from workbench.errors import UserError
from workbench.scaling.fit.prior import SigmoidPrior
from workbench.scaling.data import r0_rule
from workbench.scaling.fit.sigmoid import MIN_POINTS, fit_sigmoid
from workbench.tracking.queries import closest, run_curve, runs_frame


def history_prior(
    experiment: str | list[str],
    *,
    where: Mapping[str, object] | None = None,
    exclude: Iterable[str] = (),
    metric: str = "val/pass_rate",
    x: str = "compute/device_hours",
    tracking_uri: str | None = None,
) -> SigmoidPrior:
    """A SigmoidPrior from the finished runs of `experiment` (see the module docstring)."""
    frame = runs_frame(experiment=experiment, tracking_uri=tracking_uri)
    if frame.empty:
        raise UserError(f"experiment {experiment!r} has no runs to build a prior from")
    rows = frame[frame["status"] == "FINISHED"]
    for key, value in (where or {}).items():
        if key not in rows.columns:
            close = closest(key, frame.columns)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise UserError(f"no run parameter or metric {key!r} to filter the prior's runs by: {hint}"
                            f"the runs have {len(frame.columns)} columns (workbench.tracking.queries.runs_frame lists them)")
        rows = rows[rows[key].astype(str) == str(value)]
    skip = set(exclude)
    fits, skipped = [], []
    for rid in rows["run_id"]:
        if rid in skip:
            continue
        curve = run_curve(rid, metric=metric, x=x, tracking_uri=tracking_uri)
        c, y = curve["x"].to_numpy(float), curve["y"].to_numpy(float)
        if int((c > 0).sum()) < MIN_POINTS:
            skipped.append(rid)
            continue
        fits.append(fit_sigmoid(c, y, r0=r0_rule([(c, y)]), method="sigmoid", n_boot=0))
    try:
        return SigmoidPrior.from_fits(fits)
    except UserError as e:
        raise UserError(f"{e} (experiment {experiment!r}: {len(rows)} finished run(s) matched, {len(skipped)} too short)") from None
