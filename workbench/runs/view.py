"""`RunView`: a read-only view of one run's metric rows: curve, history, fit, forecast, chart.

    v = RunView.open("runs/my-run")          # a run folder (metrics.jsonl, config.json): no Ray needed
    v.curve                                  # DataFrame: step, compute_device_hours, compute_flops, val_pass_rate, val_pass_rate_se
    v.fit()                                  # workbench.scaling.SigmoidFit of val/pass_rate vs `x`
    v.domains; v.fit(domain="code")          # a task mixture: one curve (and fit) per domain
    v.forecast(budget=1.0)                   # pass rate, 95% band and scaling-gain verdict at that compute
    v.chart(); v.status(); v.history
    v.samples(passed=False, contains="def ")  # the kept completions (<run>/samples/, workbench.runs.samples)

What sweeps, `compare`, the dashboard and the notebooks read. `workbench.Session` (live-run
control: start, pause, stop, attach, resume) owns one view and feeds it the rows it polls from
the run's actor; `Session.curve`, `.fit()`, `.forecast()`, `.chart()` are the view's. A view
never changes its run, and never holds the live config: it keeps a copy of it and hands out
copies (`cfg`); the run's owner tells it of a new config with `use_config`. The evaluations
come from `workbench.runs.report.eval_rows` (one per step), the minimum number of points for a
fit is `workbench.scaling.data.MIN_POINTS`, and a run's step target is its config's
`train.max_steps`.

A run on a task mixture (`task.mix`) also logs `val/pass_rate/<domain>`: `domains` lists them,
`curve` gets a `val_pass_rate_<domain>` (and `_se_`) column each, `fit(domain=...)` fits one, and
`chart()` draws one series and band per domain (the legend names them).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from workbench.config import RunConfig
from workbench.runs.report import domain_metric, domains_of, eval_curve, eval_rows, fit_curves
from workbench.errors import UserError
from workbench.scaling.data import MIN_POINTS

EVAL_KEY = "val/pass_rate"
CURVE_COLUMNS = ["step", "compute_device_hours", "compute_flops", "val_pass_rate", "val_pass_rate_se"]
# metric key -> curve column; `x` may be any of these keys
X_COLUMNS = {"compute/device_hours": "compute_device_hours", "compute/flops": "compute_flops", "step": "step"}
TERMINAL = ("finished", "stopped", "failed")


def check_x(x: str) -> str:
    if x not in X_COLUMNS:
        raise UserError(f"x must be one of {list(X_COLUMNS)}, not {x!r}")
    return x


class RunView:
    """Rows of one run and what they say. `state` is the last known status (status, step, error,
    events, compute/...); `summary` the run's summary once it has ended."""

    def __init__(self, cfg: RunConfig, *, x: str = "compute/device_hours", rows: list[dict[str, Any]] | None = None,
                 run_id: str | None = None, tracking_uri: str | None = None):
        self._cfg = copy.deepcopy(cfg)  # the view's own copy: the caller's config may change under it
        self.x = check_x(x)
        self.run_id, self.tracking_uri = run_id, tracking_uri
        self._rows: list[dict[str, Any]] = list(rows or [])
        self.state: dict[str, Any] = {}
        self.summary: Optional[dict[str, Any]] = None
        self._fit_cache: dict[tuple, Any] = {}

    # ------------------------------------------------------------------ identity
    @property
    def cfg(self) -> RunConfig:
        """A copy of the run's config: changing it changes neither the view nor the run."""
        return copy.deepcopy(self._cfg)

    def use_config(self, cfg: RunConfig) -> None:
        """The run's owner (Session) changed its config (a step target, its MLflow run): keep a copy."""
        self._cfg = copy.deepcopy(cfg)

    @property
    def name(self) -> str:
        return self._cfg.name

    @property
    def out_dir(self) -> Path:
        return Path(self._cfg.out_dir or f"runs/{self._cfg.name}")

    @property
    def max_steps(self) -> int:
        """The run's step target: its config's train.max_steps (the one owner of that number)."""
        return int(self._cfg.train.max_steps)

    @property
    def column(self) -> str:
        """The curve column of `x` (e.g. compute_device_hours)."""
        return X_COLUMNS[self.x]

    def extend(self, rows: list[dict[str, Any]]) -> None:
        """Add rows the run logged since (the owner of the run calls this)."""
        self._rows.extend(rows)

    def end(self, summary: dict[str, Any] | None, error: str | None = None) -> None:
        """Record the run's end: its summary and final status ("failed" with `error`), step and error."""
        self.summary = summary
        s = summary or {}
        status = s.get("status") or ("failed" if error else "finished")
        self.state = {**self.state, "status": status, "error": error, "step": s.get("steps", self.state.get("step"))}

    def load_rows(self, path: Path, *, until_step: int | None = None) -> None:
        """Replace the rows with those of the metrics.jsonl at `path` (up to `until_step`): what the
        run wrote before a resume, which its actor no longer holds."""
        from workbench.tracking.sink import read_jsonl

        self._rows = [r for r in read_jsonl(path) if until_step is None or r.get("step", 0) <= until_step]

    # ------------------------------------------------------------------ data
    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every metric row (train steps and evaluations), oldest first."""
        return list(self._rows)

    def evaluations(self) -> list[dict[str, Any]]:
        return eval_rows(self._rows)

    @property
    def domains(self) -> list[str]:
        """The domains of a task mixture whose validation curves the run logged ([] for one task)."""
        return domains_of(self._rows)

    @property
    def curve(self) -> pd.DataFrame:
        """Evaluations, one per step in step order: step, compute_device_hours, compute_flops, val_pass_rate, val_pass_rate_se."""

        def num(r: dict[str, Any], k: str) -> float:
            return float(r[k]) if r.get(k) is not None else math.nan

        domains = self.domains
        extra = [c for d in domains for c in (f"val_pass_rate_{d}", f"val_pass_rate_se_{d}")]
        data = []
        for r in self.evaluations():
            row = {"step": int(r["step"]), "compute_device_hours": num(r, "compute/device_hours"),
                   "compute_flops": num(r, "compute/flops"), "val_pass_rate": float(r[EVAL_KEY]),
                   "val_pass_rate_se": num(r, "val/pass_rate_se")}
            for d in domains:
                row[f"val_pass_rate_{d}"] = num(r, domain_metric(d))
                row[f"val_pass_rate_se_{d}"] = num(r, f"val/pass_rate_se/{d}")
            data.append(row)
        return pd.DataFrame(data, columns=CURVE_COLUMNS + extra)

    @property
    def history(self) -> pd.DataFrame:
        """Train-step rows (train/*, time/*, compute/*, ...) as a DataFrame indexed by step."""
        train = [r for r in self._rows if EVAL_KEY not in r]
        return pd.DataFrame(train).set_index("step") if train else pd.DataFrame()

    def samples(self, step: Optional[int] = None, passed: Optional[bool] = None, domain: Optional[str] = None,
                contains: Optional[str] = None, kind: Optional[str] = None) -> pd.DataFrame:  # fmt: skip
        """The completions the run kept (<run>/samples/: step, kind, prompt, completion, passed,
        reward, version, ...; see workbench.runs.samples), filtered by step, verdict, a task mix's
        domain, text in the prompt or completion, kind ("train" or "val")."""
        from workbench.runs.samples import read_samples

        return read_samples(self.out_dir, step=step, passed=passed, domain=domain, contains=contains, kind=kind)

    def status(self) -> dict[str, Any]:
        """The last known status (status, step, max_steps, error, out_dir, compute/...) and the evaluations so far."""
        st: dict[str, Any] = {"status": "not started", "step": 0, "max_steps": self.max_steps, "out_dir": str(self.out_dir)}
        st.update(self.state)
        st.update(name=self.name, run_id=self.run_id, evaluations=len(self.evaluations()))
        return st

    # ------------------------------------------------------------------ fit & forecast
    def fit(self, x: str | None = None, fit_from: float | None = None, n_boot: int = 200, domain: str | None = None):
        """The sigmoid fit (workbench.scaling.SigmoidFit) of val/pass_rate (`domain`: of
        val/pass_rate/<domain>) vs `x` on the evaluations so far.

        R0 follows `workbench.runs.report.fit_curves`: the pass rate measured at compute 0 (the
        evaluation before training), else the curve's first point (a resumed run). fit_from leaves out early points (the paper
        drops the first ~1.5k GPU-hours). Cached until a new evaluation arrives.
        """
        x = check_x(x or self.x)
        metric = self._domain_metric(domain)
        n_evals = len(self.evaluations())
        key = (n_evals, x, fit_from, n_boot, metric)
        if key in self._fit_cache:
            return self._fit_cache[key]
        c, y = eval_curve(self._rows, x, metric)
        usable = (c > 0) & ((c >= fit_from) if fit_from is not None else True)
        n = int(usable.sum())
        if n < MIN_POINTS:
            of = "" if domain is None else f" of domain {domain!r}"
            raise UserError(
                f"only {n} evaluation(s){of} with {x} > {fit_from or 0:g} so far ({n_evals} in all); the sigmoid fit "
                f"needs at least {MIN_POINTS}: " + (f"wait for more (one every {self._cfg.eval.every_steps} steps)"
                                                   if self._cfg.eval.enabled else "this run makes none (eval.every_steps: 0)")
            )
        result = fit_curves([(c, y)], fit_from=fit_from, n_boot=n_boot)
        # only the latest evaluation count: a new evaluation invalidates every cached fit
        self._fit_cache = {k: v for k, v in self._fit_cache.items() if k[0] == n_evals}
        self._fit_cache[key] = result
        return result

    def _domain_metric(self, domain: str | None) -> str:
        if domain is None:
            return EVAL_KEY
        if domain not in self.domains:
            known = ", ".join(self.domains) or "none: this run trained one task"
            raise UserError(f"run '{self.name}' has no domain {domain!r} (its domains: {known})")
        return domain_metric(domain)

    def domain_fits(self, fit_from: float | None = None) -> dict[str, tuple[Any, str]]:
        """domain -> (fit, "") or (None, why not yet), for each domain of a mixture ({} for one task)."""
        return {d: self.fit_or_none(fit_from, domain=d) for d in self.domains}

    def fit_or_none(self, fit_from: float | None = None, domain: str | None = None) -> tuple[Any, str]:
        """(fit, "") or (None, why not yet): for displays that draw the points without a fit."""
        try:
            return self.fit(None, fit_from, 200, domain=domain), ""
        except UserError as e:
            return None, str(e)

    def forecast(self, budget: float, *, x: str | None = None, fit_from: float | None = None, level: float = 0.95,
                 min_gain: float = 0.01) -> dict[str, Any]:
        """Predicted pass rate at compute `budget` (in units of `x`) with its band, how far past the
        data it is (`horizon`) and, for a budget past the current compute, workbench.scaling.scaling_gain's
        gain, interval and verdict; past a ceiling the run has not pinned, band and verdict span both
        curve families (workbench.runs.forecast)."""
        from workbench.runs.forecast import forecast_from_fit
        from workbench.runs.health import check_health, verdict_note

        out = forecast_from_fit(self.fit(x, fit_from), budget, x=x or self.x, level=level, min_gain=min_gain)
        if out.get("verdict") and (note := verdict_note(check_health(self.rows, getattr(self._cfg, "health", None), run=str(self.out_dir)))):  # the run's health: thresholds
            out["verdict"] = f"{out['verdict']}; {note}"
        return out

    def export(self, out: str | Path | None = None, step: Optional[int] = None, adapter: bool = False):
        """The policy of checkpoint `step` (default: the latest) as a Hugging Face folder at `out`
        (default: <run>/policy); `adapter`: a model.lora run's adapter alone, in PEFT's layout
        (default: <run>/adapter), as `workbench export --adapter`. Returns a workbench.runs.export.PolicyExport."""
        from workbench.runs.export import export_policy

        return export_policy(self.out_dir, out, step=step, adapter=adapter)

    def default_budget(self, factor: float = 10.0) -> Optional[float]:
        """`factor` x the latest positive compute of the curve (None when there is none yet)."""
        c = self.curve[self.column]
        c = c[c > 0]
        return float(c.max()) * factor if len(c) else None

    def chart(self, budget: float | None = None, *, fit_from: float | None = None, width: int = 560, height: int = 300):
        """The dashboard's chart as an Altair chart (points; fit, band and forecast once MIN_POINTS
        evaluations exist), drawn out to `budget` (default: `default_budget()`). A task mixture's
        run draws one series (points, fit and band) per domain instead, its legend naming them.

        Offline display in a notebook: `alt.renderers.enable("svg")` (rendered by vl-convert)."""
        from workbench.scaling.charts import domain_chart, session_chart

        curve = self.curve
        if curve.empty:
            raise UserError(f"run '{self.name}' has no evaluation yet: nothing to draw")
        budget = budget if budget is not None else self.default_budget()
        if self.domains:
            series = {d: (*eval_curve(self._rows, self.x, domain_metric(d)), fit) for d, (fit, _) in self.domain_fits(fit_from).items()}
            return domain_chart(series, budget=budget, x_title=self.x, title=f"{self.name}: val/pass_rate per domain vs {self.x}",
                                width=width, height=height)
        fit, _ = self.fit_or_none(fit_from)
        return session_chart(curve[self.column], curve["val_pass_rate"], fit, budget=budget, x_title=self.x,
                             title=f"{self.name}: val/pass_rate vs {self.x}", width=width, height=height)

    # ------------------------------------------------------------------ from a folder
    @classmethod
    def open(cls, target: str | Path, *, x: str = "compute/device_hours") -> "RunView":
        """A view of a run folder (out_dir, or a name under <project>/runs): its metrics.jsonl,
        config (config.json or the latest checkpoint) and summary.json. Needs no Ray."""
        from workbench.runs.folder import read_summary, run_folder

        path = run_folder(target)
        v = cls(folder_config(path), x=x)
        v.load_rows(path / "metrics.jsonl")
        tr = v._cfg.tracking
        v.run_id, v.tracking_uri = tr.run_id, tr.tracking_uri
        summary = read_summary(path) or {}
        v.summary = summary
        last = max((int(r.get("step", 0)) for r in v._rows), default=0)
        v.state = {"status": summary.get("status", "unknown"), "step": summary.get("steps", last), "out_dir": str(path)}
        return v


def folder_config(path: Path) -> RunConfig:
    """The config of the run in `path` (config.json or its latest checkpoint), its out_dir set to `path`."""
    import dataclasses

    from workbench.runs.folder import saved_config

    cfg = saved_config(path)
    if cfg is None:
        raise UserError(f"{path} has no config.json or checkpoint state: cannot tell how the run was configured")
    return dataclasses.replace(cfg, out_dir=str(path))
