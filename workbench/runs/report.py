"""A run's curve and its ScaleRL sigmoid: the one curve fit, and the end-of-run report.

    curve = eval_curve(rows, x="compute/device_hours")   # (compute, pass rate) from metric rows
    fit = fit_curves([(compute, score)])                 # THE fit of a run's curve (R0 rule below)
    fit = fit_run(rows)                                  # the same, from metric rows
    bt, prefix = backtest_run(rows)                      # fit the first 40% of compute, score the rest
    print(print_report(write_report(out_dir)))           # fit.json, backtest.json, fit.html, fit.png
    domains_of(rows)                                     # ["code", "math"]: a task mixture's domains
    fit_run(rows, metric=domain_metric("code"))          # one domain's curve: val/pass_rate/code

The R0 rule (one owner: `fit_curves`): R0 is the score measured at compute 0 (the evaluation
before training); a curve without one (a resumed run, an MLflow curve missing step 0) uses its
first point. `RunView.fit`, `workbench.runs.fits` (MLflow comparisons) and the sweep's rungs fit
through `fit_curves`.

Fit artifacts have one layout, owned by `write_report`: `<out_dir>/fit.json` (reloadable with
SigmoidFit.from_json), `backtest.json`, `fit.html` and `fit.png` (`FIT_FILES`). `workbench run`
writes them at the end of a run, and so does `workbench.Session` (which also logs them to MLflow).

The backtest is the run checking its own forecast: the sigmoid fitted to the evaluations within
the first `BACKTEST_FRACTION` of the run's compute forecasts the later ones; the report gives the
held-out RMSE and the share of them inside the 95% prediction band (the paper's way to trust a fit).
The ceiling check (workbench.scaling.decide.ceiling, kept in fit.json as `ceiling_check`) says whether a
stretched exponential fits as well with another plateau, i.e. whether the run pins its ceiling.
The report ends its fit lines with the verdict on 10x more compute (workbench.scaling.scaling_gain:
over both curve families where the check finds the data cannot tell them apart, how far past the
data that is against the forecast's backtest, and what would settle it).
`workbench run` prints the report at the end of a run. It ends with the run-health flags
(workbench/runs/health.py, `report["health"]`); while one is active the 10x verdict adds "the
forecast assumes the run stays healthy; from step N, ...".

A run on a task mixture logs one curve per domain (`val/pass_rate/<domain>` beside the overall
`val/pass_rate`); the report fits and backtests each domain's curve too, and writes them beside
the overall fit (`DOMAIN_FILES`: fit_domains.json, and a chart with one series per domain).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from workbench.errors import UserError
from workbench.runs.health import HealthFlag, check_health, health_lines, verdict_note
from workbench.scaling.decide.ceiling import attach_ceiling_check
from workbench.scaling.decide.gain import scaling_gain
from workbench.scaling.data import r0_rule
from workbench.scaling.data import MIN_POINTS
from workbench.tracking.sink import read_jsonl

if TYPE_CHECKING:
    from workbench.config import RunConfig

# Fit on the evaluations up to this share of the run's final compute, forecast the rest.
BACKTEST_FRACTION = 0.4
# The fit artifacts, all in the run's folder: the one layout (`write_report` writes them).
FIT_FILES = ("fit.json", "backtest.json", "fit.html", "fit.png")
# A mixture's per-domain fits: {domain: SigmoidFit.to_dict()} and their overlay chart.
DOMAIN_FILES = ("fit_domains.json", "fit_domains.html", "fit_domains.png")
SCORE_KEY = "val/pass_rate"  # the overall validation score; a domain's is SCORE_KEY/<domain>


def domain_metric(domain: Optional[str]) -> str:
    """The validation metric of `domain` (None or "": the overall one)."""
    return f"{SCORE_KEY}/{domain}" if domain else SCORE_KEY


def domains_of(rows: list[dict[str, Any]]) -> list[str]:
    """The domains whose validation curve the rows carry (a task mixture's), sorted; [] for one task."""
    head = SCORE_KEY + "/"
    return sorted({k[len(head):] for r in rows for k in r if k.startswith(head)})


def eval_rows(rows: list[dict[str, Any]], metric: str = SCORE_KEY) -> list[dict[str, Any]]:
    """The evaluation rows (those with `metric`), one per step (a step evaluated twice, e.g. around
    a resume, keeps the last), ordered by step (evaluations can finish out of order)."""
    by_step: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r.get(metric) is not None:
            by_step[int(r.get("step", 0))] = r
    return [by_step[s] for s in sorted(by_step)]


def eval_curve(rows: list[dict[str, Any]], x: str = "compute/device_hours",
               metric: str = SCORE_KEY) -> tuple[np.ndarray, np.ndarray]:
    """(x, metric) of `eval_rows(rows, metric)` that have `x` ("step": the step itself), in step order."""
    pts = [(float(r["step"] if x == "step" else r[x]), float(r[metric]))
           for r in eval_rows(rows, metric) if x == "step" or r.get(x) is not None]
    return np.array([c for c, _ in pts]), np.array([y for _, y in pts])


def fit_curves(curves: Sequence[tuple[Any, Any]], *, fit_from: Optional[float] = None, n_boot: int = 200, **kw: Any) -> Any:
    """The sigmoid fit (workbench.scaling.SigmoidFit) of one run's (compute, score) curve, or of
    several seeds of one run jointly (fit_sigmoid_multi, whole-run bootstrap).

    R0 is the score measured at compute 0 when every curve has one, else each curve's first point."""
    from workbench.scaling.fit.sigmoid import fit_sigmoid, fit_sigmoid_multi

    curves = [(np.asarray(c, dtype=float), np.asarray(y, dtype=float)) for c, y in curves]
    if not curves:
        raise UserError("no curve to fit")
    r0 = r0_rule(curves)
    if len(curves) == 1:
        return fit_sigmoid(*curves[0], r0=r0, fit_from=fit_from, n_boot=n_boot, **kw)
    return fit_sigmoid_multi(curves, r0=r0, fit_from=fit_from, n_boot=n_boot, **kw)


def fit_run(rows: list[dict[str, Any]], x: str = "compute/device_hours", fit_from: Optional[float] = None,
            n_boot: int = 200, metric: str = SCORE_KEY) -> Any:
    """`fit_curves` of the run's evaluations (`eval_curve(rows, x, metric)`); a UserError while too few."""
    compute, score = eval_curve(rows, x, metric)
    if len(compute) < MIN_POINTS:
        of = "" if metric == SCORE_KEY else f" of {metric}"
        raise UserError(f"only {len(compute)} evaluations{of} so far; the sigmoid fit needs at least {MIN_POINTS}")
    return fit_curves([(compute, score)], fit_from=fit_from, n_boot=n_boot)


def backtest_run(
    rows: list[dict[str, Any]],
    x: str = "compute/device_hours",
    *,
    fraction: float = BACKTEST_FRACTION,
    fit_from: Optional[float] = None,
    n_boot: int = 200,
    level: float = 0.95,
    metric: str = SCORE_KEY,
) -> tuple[dict[str, Any], Any]:
    """Fit the evaluations with compute <= fraction x the last compute; forecast the later ones.

    Returns (summary, prefix fit). The summary holds the prefix (`until`, `n_fit` fitted points),
    the `n_test` later evaluations, their forecast `rmse`, `coverage` (share inside the `level`
    prediction band) and `final_error` (forecast - measured at the last evaluation). A prefix too
    short to fit gives a summary with `error` set and no fit (None)."""
    from workbench.scaling import backtest

    compute, score = eval_curve(rows, x, metric)
    if len(compute) == 0:
        raise UserError(f"no evaluations of {metric} with {x!r} to backtest")
    bt = backtest((compute, score), fractions=(fraction,), r0=r0_rule([(compute, score)]), fit_from=fit_from,
                  n_boot=n_boot, level=level)
    row, fit = bt.rows[0], bt.fits[0]
    summary = {
        "fraction": fraction,
        "until": float(row.until),
        "n_fit": int(row.n_fit),
        "n_test": int(row.n_test),
        "rmse": float(row.rmse),
        "coverage": float(row.coverage),
        "final_error": float(row.final_error),
        "level": level,
        "A": float(row.A),
        "error": row.error,
    }
    return summary, fit


def backtest_line(bt: dict[str, Any]) -> str:
    """One line: how well the fit on the first part of the run forecast the rest."""
    head = f"backtest: fit on the first {bt['fraction']:.0%} of compute"
    if bt.get("error"):
        return f"{head}: not fitted: {bt['error']}"
    if bt["n_test"] == 0:
        return f"{head} ({bt['n_fit']} evals) leaves no later evaluation to forecast"
    return (
        f"{head} ({bt['n_fit']} evals) forecasts the remaining {bt['n_test']} with RMSE {bt['rmse']:.3f}, "
        f"{bt['level']:.0%} band covers {bt['coverage']:.0%}"
    )


def write_fit_artifacts(fit: Any, folder: Path, *, title: str, x: str, prefix_fit: Any = None) -> list[Path]:
    """fit.json (reloadable with SigmoidFit.from_json), fit.html (offline) and fit.png in `folder`
    (write_report's part of the layout).

    With `prefix_fit` (a backtest's fit on the start of the curve), the chart shows its forecast
    against the later points beside the final fit. A chart that cannot be drawn leaves
    chart_error.txt instead: the fit itself is never lost."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / FIT_FILES[0]]
    paths[0].write_text(fit.to_json(indent=1))
    try:
        from workbench.scaling.charts import chart_backtest, chart_fit, save_chart

        if prefix_fit is None:
            chart = chart_fit(fit, title=title, x_title=x, y_title="val/pass_rate")
        else:
            chart = chart_backtest(fit, prefix_fit, title=title, x_title=x, y_title="val/pass_rate")
        paths += [save_chart(chart, folder / FIT_FILES[2]), save_chart(chart, folder / FIT_FILES[3])]
        (folder / "chart_error.txt").unlink(missing_ok=True)  # from an earlier attempt
    except Exception as e:  # noqa: BLE001 - see docstring
        (folder / "chart_error.txt").write_text(f"{type(e).__name__}: {e}")
    return paths


def write_report(
    out_dir: str | Path,
    x: str = "compute/device_hours",
    charts: bool = True,
    backtest_fraction: Optional[float] = BACKTEST_FRACTION,
    rows: Optional[list[dict[str, Any]]] = None,
    health: Any = None,
) -> dict[str, Any]:
    """Fit the run in `out_dir` (its metrics.jsonl, or `rows`) and backtest the fit (None: no
    backtest); write the fit artifacts there (`FIT_FILES`; no chart when `charts` is False).
    A mixture's domains are fitted too (`report["domains"]`, `DOMAIN_FILES`); a domain that cannot
    be fitted is reported with its reason. Returns a summary; a UserError while the run has too
    few evaluations to fit."""
    out = Path(out_dir)
    rows = read_jsonl(out / "metrics.jsonl") if rows is None else rows
    report, prefix = _curve_report(rows, x, SCORE_KEY, backtest_fraction)
    flags = check_health(rows, health, run=str(out))  # `health`: a HealthConfig (None: the defaults)
    report["health"] = [f.as_dict() for f in flags]
    if (note := verdict_note(flags)) and report.get("verdict_10x"):
        report["verdict_10x"] = f"{report['verdict_10x']}; {note}"  # a forecast fitted to a drifting run says so
    fit, bt = report["fit"], report["backtest"]
    if charts:
        files = write_fit_artifacts(fit, out, title=f"{out.name}: validation pass rate vs {x}", x=x, prefix_fit=prefix)
    else:
        (out / FIT_FILES[0]).write_text(fit.to_json(indent=1))
        files = [out / FIT_FILES[0]]
    if bt is not None:
        (out / FIT_FILES[1]).write_text(json.dumps(_strict(bt), indent=1, allow_nan=False))
        files.insert(1, out / FIT_FILES[1])
    report["domains"] = {}
    for domain in domains_of(rows):
        try:
            report["domains"][domain] = _curve_report(rows, x, domain_metric(domain), backtest_fraction)[0]
        except (UserError, ValueError, RuntimeError) as e:
            report["domains"][domain] = {"error": str(e)}
    files += _write_domain_files(report["domains"], out, title=f"{out.name}: validation pass rate per domain vs {x}",
                                 x=x, charts=charts)
    report["files"] = [str(f) for f in files]
    return report


def _strict(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}  # JSON has no NaN


def _curve_report(rows: list[dict[str, Any]], x: str, metric: str,
                  backtest_fraction: Optional[float]) -> tuple[dict[str, Any], Any]:
    """(summary, backtest prefix fit) of one validation curve: the fit, its intervals, the gain
    over the run and the backtest."""
    fit = fit_run(rows, x, metric=metric)
    attach_ceiling_check(fit)  # kept in fit.json
    bt, prefix = (None, None) if backtest_fraction is None else backtest_run(rows, x, fraction=backtest_fraction, metric=metric)
    compute, score = eval_curve(rows, x, metric)
    summary = {
        "metric": metric, "A": fit.A, "A_ci": list(fit.A_ci), "B": fit.B, "B_ci": list(fit.B_ci),
        "C_mid": fit.C_mid, "C_mid_ci": list(fit.C_mid_ci), "R0": fit.R0, "r2": fit.r2,
        "converged": fit.converged, "reason": fit.reason, "gain": float(score[-1] - score[0]),
        "backtest": bt, "ceiling_check": fit.ceiling_check, "verdict_10x": scaling_gain(fit, factor=10).verdict,
        "fit": fit,  # the SigmoidFit itself (not printed)
    }
    return summary, prefix


def _write_domain_files(domains: dict[str, dict[str, Any]], out: Path, *, title: str, x: str, charts: bool) -> list[Path]:
    """fit_domains.json ({domain: fit}) and, with `charts`, one chart with a series per domain."""
    fits = {d: rep["fit"] for d, rep in domains.items() if "fit" in rep}
    if not fits:
        return []
    path = out / DOMAIN_FILES[0]
    path.write_text(json.dumps({d: f.to_dict() for d, f in fits.items()}, indent=1))
    files = [path]
    if charts:
        try:
            from workbench.scaling.charts import chart_overlay, save_chart

            chart = chart_overlay(fits, title=title, x_title=x, y_title=SCORE_KEY, legend="domain")
            files += [save_chart(chart, out / DOMAIN_FILES[1]), save_chart(chart, out / DOMAIN_FILES[2])]
        except Exception as e:  # noqa: BLE001 - the fits are written; a chart that fails must not lose them
            (out / "chart_error.txt").write_text(f"{type(e).__name__}: {e}")
    return files


def report_run_end(
    cfg: RunConfig, rows: Optional[list[dict[str, Any]]] = None, *, x: str = "compute/device_hours", step: int, tracked: bool
) -> tuple[Optional[dict[str, Any]], str]:
    """What happens when a run ends, from a notebook or `workbench run`: `write_report` into the
    run folder (cfg.output_dir(); its metrics.jsonl when `rows` is None) and, when `tracked`, log
    the fit (and each domain's, as fit/<domain>/A, ...) and its files to the config's MLflow run,
    or why it could not be fitted. Returns (the report, "") or (None, why there is no fit)."""
    from workbench.tracking import run_tracking

    if not cfg.eval.enabled:  # eval.every_steps 0
        why = ("the run made no evaluations (eval.every_steps: 0): score its checkpoints to fit a curve "
               "(benchmarks/bench_env_learning.py does, then fits them as this report would)")
        if tracked:
            run_tracking.log_fit_error(cfg, why)
        return None, why
    try:
        rep = write_report(cfg.output_dir(), x, rows=rows, health=cfg.health)
    except (UserError, ValueError, RuntimeError) as e:
        if tracked:
            run_tracking.log_fit_error(cfg, str(e))
        return None, str(e)
    if tracked:
        domain_fits = {d: r["fit"] for d, r in rep["domains"].items() if "fit" in r}
        run_tracking.log_fit(cfg, rep["fit"], [Path(f) for f in rep["files"]], step=step, x=x, domain_fits=domain_fits)
    return rep, ""


def _fit_line(rep: dict[str, Any], head: str) -> str:
    a_lo, a_hi = rep["A_ci"]
    b_lo, b_hi = rep["B_ci"]
    c_lo, c_hi = rep["C_mid_ci"]
    return (f"{head}: A = {rep['A']:.3f} [{a_lo:.3f}, {a_hi:.3f}]  B = {rep['B']:.2f} [{b_lo:.2f}, {b_hi:.2f}]  "
            f"C_mid = {rep['C_mid']:.3g} [{c_lo:.3g}, {c_hi:.3g}]  R0 = {rep['R0']:.3f}  R^2 = {rep['r2']:.3f}")


def print_report(report: dict[str, Any]) -> str:
    lines = [_fit_line(report, "sigmoid fit"), f"validation pass rate gain over the run: {report['gain']:+.3f}"]
    if not report["converged"]:
        lines.append(f"warning: the fit did not converge cleanly: {report['reason']}")
    if report.get("ceiling_check"):
        lines.append(report["ceiling_check"]["line"])
    if report.get("verdict_10x"):
        lines.append(f"10x more compute: {report['verdict_10x']}")
    if report.get("backtest"):
        lines.append(backtest_line(report["backtest"]))
    for domain, rep in (report.get("domains") or {}).items():
        if "fit" not in rep:
            lines.append(f"domain {domain}: not fitted: {rep['error']}")
            continue
        lines.append(_fit_line(rep, f"domain {domain}") + f"  gain {rep['gain']:+.3f}"
                     + ("" if rep["converged"] else f"  (not converged: {rep['reason']})"))
        if (rep.get("ceiling_check") or {}).get("family_dependent"):
            lines.append(f"domain {domain} " + rep["ceiling_check"]["line"])
        if rep.get("backtest"):
            lines.append(f"domain {domain} " + backtest_line(rep["backtest"]))
    lines += health_lines([HealthFlag.from_dict(f) for f in report.get("health") or []])
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
        + generation_note(summary.get("generation") or {})
        + pipeline_note(summary.get("pipeline") or {})
    )


def retirement_line(summary: dict[str, Any]) -> str:
    """No-Positive-Resampling at the end of the run (summary.json's "retirement", per domain for a
    task mixture): how much of the training set it retired; "" when the rule was off or not recorded."""
    ret = summary.get("retirement") or {}
    if not ret.get("enabled"):
        return ""
    cap = ret.get("max_retired_share")
    line = (f"No-Positive-Resampling: {ret['retired']} of {ret['prompts']} training prompts retired at the end "
            f"({ret['retired_share']:.1%}); cap recipe.npr_max_retired_share = {'none' if cap is None else f'{cap:g}'}"
            + (f", {ret['returned']} retired prompts returned to the pool by it" if ret.get("returned") else ""))
    domains = ret.get("domains") or {}
    if domains:
        line += "; per domain: " + ", ".join(f"{d} {r['retired']}/{r['prompts']} ({r['retired_share']:.1%})" for d, r in domains.items())
    return line


def generation_note(gen: dict[str, Any]) -> str:
    """The vLLM facts a user checks first: which build, and whether weights swap between decode steps."""
    if gen.get("backend") != "vllm" or "engine_mode" not in gen:
        return ""
    return f"; vLLM {gen.get('vllm_version')} in {gen['engine_mode']} mode, FP32 head: {gen.get('fp32_head')}"


def pipeline_note(pipeline: dict) -> str:
    """The report's clause on an auto depth (summary.json's "pipeline", engine/run/lag.py): where it ended and why."""
    if not pipeline or pipeline.get("max_ahead_steps") != "auto":
        return ""
    g, t = pipeline.get("gen_seconds_per_step"), pipeline.get("train_seconds_per_step")
    if g is None or t is None:
        return f"; pipeline depth auto: {pipeline.get('depth')} (not measured: too few steps)"
    side = "the trainer is" if t >= g else "generation is"
    return (f"; pipeline depth auto: {pipeline.get('depth')} step(s) ahead at the end ({side} the bottleneck: "
            f"generators {g:.2f} s, trainer {t:.2f} s a step; {pipeline.get('changes', 0)} change(s), in events.log)")
