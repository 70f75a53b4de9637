"""A finished (or running) run's curve and its ScaleRL sigmoid: the end-of-run report.

    curve = eval_curve(rows, x="compute/device_hours")   # (compute, pass rate) from metric rows
    fit = fit_run(rows)                                  # SigmoidFit, R0 = the step-0 evaluation
    write_report(out_dir)                                # fit.json + fit.html/png next to metrics.jsonl
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from workbench.errors import UserError
from workbench.tracking.sink import read_jsonl


def eval_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The evaluation rows, one per step (a step evaluated twice, e.g. around a resume, keeps the
    last), ordered by step (evaluations can finish out of order)."""
    by_step: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r.get("val/pass_rate") is not None:
            by_step[int(r.get("step", 0))] = r
    return [by_step[s] for s in sorted(by_step)]


def eval_curve(rows: list[dict[str, Any]], x: str = "compute/device_hours") -> tuple[np.ndarray, np.ndarray]:
    """(x, val/pass_rate) of `eval_rows(rows)` that have `x` ("step": the step itself), in step order."""
    pts = [(float(r["step"] if x == "step" else r[x]), float(r["val/pass_rate"]))
           for r in eval_rows(rows) if x == "step" or r.get(x) is not None]
    return np.array([c for c, _ in pts]), np.array([y for _, y in pts])


def fit_run(rows: list[dict[str, Any]], x: str = "compute/device_hours", fit_from: Optional[float] = None, **kw):
    from workbench.scaling import fit_sigmoid

    compute, score = eval_curve(rows, x)
    if len(compute) < 4:
        raise UserError(f"only {len(compute)} evaluations so far; the sigmoid fit needs at least 4")
    return fit_sigmoid(compute, score, fit_from=fit_from, **kw)


def write_fit_artifacts(fit: Any, folder: Path, *, title: str, x: str) -> list[Path]:
    """fit.json (reloadable with SigmoidFit.from_json), fit.html (offline) and fit.png in `folder`.

    A chart that cannot be drawn leaves chart_error.txt instead: the fit itself is never lost."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "fit.json"]
    paths[0].write_text(fit.to_json(indent=1))
    try:
        from workbench.scaling.charts import chart_fit, save_chart

        chart = chart_fit(fit, title=title, x_title=x, y_title="val/pass_rate")
        paths += [save_chart(chart, folder / "fit.html"), save_chart(chart, folder / "fit.png")]
    except Exception as e:  # noqa: BLE001 - see docstring
        (folder / "chart_error.txt").write_text(f"{type(e).__name__}: {e}")
    return paths


def write_report(out_dir: str | Path, x: str = "compute/device_hours", charts: bool = True) -> dict[str, Any]:
    """Fit the run in `out_dir`; write fit.json (and fit.html / fit.png) there. Returns a summary."""
    out = Path(out_dir)
    rows = read_jsonl(out / "metrics.jsonl")
    fit = fit_run(rows, x)
    if charts:
        files = write_fit_artifacts(fit, out, title=f"{out.name}: validation pass rate vs {x}", x=x)
    else:
        (out / "fit.json").write_text(fit.to_json(indent=1))
        files = [out / "fit.json"]
    compute, score = eval_curve(rows, x)
    return {
        "A": fit.A,
        "A_ci": list(fit.A_ci),
        "B": fit.B,
        "B_ci": list(fit.B_ci),
        "C_mid": fit.C_mid,
        "C_mid_ci": list(fit.C_mid_ci),
        "R0": fit.R0,
        "r2": fit.r2,
        "converged": fit.converged,
        "reason": fit.reason,
        "gain": float(score[-1] - score[0]),
        "files": [str(f) for f in files],
    }


def print_report(report: dict[str, Any]) -> str:
    a_lo, a_hi = report["A_ci"]
    b_lo, b_hi = report["B_ci"]
    c_lo, c_hi = report["C_mid_ci"]
    lines = [
        f"sigmoid fit: A = {report['A']:.3f} [{a_lo:.3f}, {a_hi:.3f}]  B = {report['B']:.2f} [{b_lo:.2f}, {b_hi:.2f}]  "
        f"C_mid = {report['C_mid']:.3g} [{c_lo:.3g}, {c_hi:.3g}]  R0 = {report['R0']:.3f}  R^2 = {report['r2']:.3f}",
        f"validation pass rate gain over the run: {report['gain']:+.3f}",
    ]
    if not report["converged"]:
        lines.append(f"warning: the fit did not converge cleanly: {report['reason']}")
    lines += [f"wrote {f}" for f in report["files"]]
    return "\n".join(lines)


def engine_summary_line(summary: dict[str, Any]) -> str:
    """How the engine spent its time: the figure to check before blaming the recipe for slowness."""
    wall = max(float(summary.get("trainer_wall_seconds") or 0.0), 1e-9)
    return (
        f"trainer: {float(summary.get('trainer_utilisation') or 0.0):.1%} of its wall time in forward/backward/optimizer, "
        f"{float(summary.get('trainer_wait_seconds') or 0.0) / wall:.1%} waiting for rollouts; "
        f"{float(summary.get('samples_per_second') or 0.0):.0f} samples/s; "
        f"max staleness {float(summary.get('staleness_max') or 0.0):.0f} policy versions"
    )
