"""What a run writes as it goes: metric rows, events and the end-of-run summary.

    log = RunLog(out_dir, sinks=[MlflowSink(...)])   # metrics.jsonl always, plus the sinks given
    log.log_config(cfg_dict)
    log.log(row, step)          # one row: train stats, or a validation result, at `step`
    log.since(i)                # rows logged by this process from index i (the dashboard polls)
    log.event("...")            # a thing an operator must hear about: status, events.log, summary
    log.tag(key, value)         # a run tag where the sink takes tags (MLflow)
    log.commit(step)            # a checkpoint covering `step` committed: the steps it covers are final
    log.back_to(step)           # a trainer restart / resume: drop the rows after `step`, in memory,
                                # in metrics.jsonl and in MLflow; a store that cannot (W&B) keeps them once
    log.start_fresh()           # a fresh start in this folder: no samples, a new W&B run
    row = step_row(stats, ...)  # a trainer step's row: its stats plus timings and utilisation
    summary = run_summary(...)  # summary.json

Rows are flat dicts of floats with "step"; keys starting with "_" are not metrics and stay out.
Every step reaches every sink once, live: a sink that can take points back (metrics.jsonl, an
MLflow database) drops the redone ones at `back_to`; one that cannot (an MLflow server, W&B) is
wrapped in `AppendOnlySink`, which does not send again a redone point it holds (tracking/sink.py).
A step's kept samples also go to the sinks that take them (W&B: a completions table).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional

from workbench.config import RunConfig
from workbench.engine.failures import ERROR_LOG
from workbench.engine.run import accounting
from workbench.runs.folder import PARAMS_SUMMARY_KEY
from workbench.runs.samples import SAMPLES_DIR, SampleWriter
from workbench.runs.health import HealthFlag, check_health
from workbench.tracking.sink import JsonlSink, MetricSink, rewindable


class RunLog:
    """The run's rows (metrics.jsonl and the sinks), its events (events.log) and the summary file."""

    def __init__(self, out: Path, sinks: Optional[list[MetricSink]] = None, samples: Any = None):
        self.out = Path(out)
        self.sinks = [JsonlSink(self.out / "metrics.jsonl")] + [rewindable(s) for s in sinks or []]
        self.rows: list[dict[str, Any]] = []
        self.events: list[str] = []
        # the kept samples (<run>/samples/, runs/samples.py) under the run's `samples:` section; None: none kept
        self.samples = SampleWriter(self.out, samples) if samples is not None else None

    def log_config(self, config: dict[str, Any]) -> None:
        for s in self.sinks:
            s.log_config(config)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **{k: v for k, v in metrics.items() if not k.startswith("_")}}
        self.rows.append(row)
        for s in self.sinks:
            s.log_metrics({k: v for k, v in row.items() if k != "step"}, step)

    def since(self, index: int) -> list[dict[str, Any]]:
        return self.rows[index:]

    def commit(self, step: int) -> None:
        for s in self.sinks:
            s.commit(step)

    def back_to(self, step: int) -> None:
        self.rows = [r for r in self.rows if r["step"] <= step]
        for s in self.sinks:
            s.rollback(step)
        if self.samples is not None:
            self.samples.back_to(step)

    def keep_samples(self, step: int, kind: str, records: list[dict[str, Any]], trained_version: Optional[int] = None) -> None:
        """A step's kept samples (train: its picked groups; val: an evaluation's) into <run>/samples/,
        and to the sinks that take them (W&B's completions table)."""
        if self.samples is not None:
            self.samples.write(step, kind, records, trained_version=trained_version)
        for s in self.sinks:
            if records and hasattr(s, "log_samples"):
                s.log_samples(step, kind, records)

    def start_fresh(self) -> None:
        """A fresh run in an old folder: none of the old samples, and the sinks start over (W&B: a new run)."""
        if self.samples is not None:
            self.samples.back_to(-1)
        for s in self.sinks:
            if hasattr(s, "start_fresh"):
                s.start_fresh()

    def event(self, text: str) -> None:
        self.events.append(text)
        with open(self.out / "events.log", "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")

    def tag(self, key: str, value: str) -> None:
        """A tag on the sinks that take tags (MLflow), e.g. the not-learning warning."""
        for s in self.sinks:
            if hasattr(s, "set_tags"):
                s.set_tags({key: value})

    def tag_health(self, rows: list[dict[str, Any]], cfg: RunConfig) -> list[HealthFlag]:
        """The run-health rules (runs/health.py) over `rows`, each flag a tag `health/<rule>` = its message."""
        flags = check_health(rows, cfg.health, run=str(cfg.output_dir()))
        for f in flags:
            self.tag(f"health/{f.rule}", f.message)
        return flags

    def finish(self, summary: dict[str, Any], status: str) -> None:
        """Write summary.json and close the sinks (FINISHED, FAILED, or KILLED for a stopped run)."""
        path = self.out / "summary.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(summary, indent=2, default=float))
        os.replace(tmp, path)  # atomic: a reader polling for the file never sees half of it
        samples = self.out / SAMPLES_DIR
        for s in self.sinks:
            s.log_artifact(path)
            if samples.is_dir():  # the kept samples' Parquet files, under samples/ in MLflow (and W&B)
                s.log_artifact(samples, SAMPLES_DIR)
            s.close({"finished": "FINISHED", "failed": "FAILED"}.get(status, "KILLED"))


def step_row(
    stats: dict[str, Any], gen: dict[str, float], c: accounting.Counters, n_params: int, *, sync_seconds: float,
    num_generators: int, sampler: dict[str, float],
) -> dict[str, Any]:  # fmt: skip
    """A trainer step's row: the trainer's stats, the generation behind it (`gen`: seconds,
    in-flight swaps), timings, utilisation, throughput, the compute counters and the prompt
    sampler's retirement (`sampler`: its stats(): sampler/retired, sampler/retired_share[/<domain>])."""
    wall = max(c.trainer_wall_seconds, 1e-9)
    row = dict(stats)
    row.update(
        {
            "time/generate": gen["gen_seconds"],
            "time/train": stats.get("time/train_compute", 0.0) + stats.get("time/train_prep", 0.0),
            "time/weight_sync": sync_seconds,
            "time/trainer_wait": c.trainer_wait_seconds,
            "util/trainer": min(1.0, c.train_seconds / wall) if c.trainer_wall_seconds > 0 else 0.0,
            "util/generator": min(1.0, c.gen_seconds / max(c.wall_seconds * num_generators, 1e-9)),
            "gen/weight_swaps_in_flight": float(gen["swaps"]),
            "sampler/retired": float(sampler.get("retired", 0.0)),
            "sampler/retired_share": float(sampler.get("retired_fraction", 0.0)),
            "throughput/samples_per_second": c.samples_trained / max(c.wall_seconds, 1e-9),
        }
    )
    row.update({f"sampler/retired_share/{k.split('/', 1)[1]}": float(v) for k, v in sampler.items()
                if k.startswith("retired_fraction/")})  # a task mixture's domains
    row.update(accounting.compute_metrics(c, n_params))
    return row


def run_summary(
    cfg: RunConfig, *, status: str, steps: int, resumed_from: Optional[int], rows: list[dict[str, Any]],
    counters: accounting.Counters, n_params: int, trainer_nodes: int, restarts: int, events: list[str],
    generation: Optional[dict[str, Any]] = None, error: Optional[str] = None, extra: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:  # fmt: skip
    """summary.json: how the run ended (a failed run: `error`, one line; its traceback is in
    error.log), first and last validation, throughput, utilisation, restarts; `extra` adds keys
    (the not-learning watch's "learning" and "training"); `health`: the run-health flags (runs/health.py)."""
    evals = [r for r in rows if "val/pass_rate" in r]
    c = counters
    return {
        "status": status,
        **({"error": error, "error_log": ERROR_LOG} if error else {}),
        **(extra or {}),
        "steps": steps,
        "resumed_from": resumed_from,
        "recipe": cfg.recipe.name,
        "algorithm": cfg.recipe.off_policy.algorithm,
        "val_pass_rate_first": evals[0]["val/pass_rate"] if evals else None,
        "val_pass_rate_last": evals[-1]["val/pass_rate"] if evals else None,
        "wall_seconds": c.wall_seconds,
        "samples_per_second": c.samples_trained / max(c.wall_seconds, 1e-9),
        "trainer_utilisation": c.train_seconds / max(c.trainer_wall_seconds, 1e-9),
        "trainer_wall_seconds": c.trainer_wall_seconds,
        "trainer_wait_seconds": c.trainer_wait_seconds,
        "trainer_workers": cfg.resources.trainer_workers,
        "trainer_nodes": trainer_nodes,
        "trainer_restarts": restarts,
        "staleness_max": max((r.get("train/staleness_max", 0.0) for r in rows), default=0.0),
        "events": list(events),
        "health": [f.as_dict() for f in check_health(rows, cfg.health, run=str(cfg.output_dir()))],
        "generation": {"backend": cfg.generation.backend, **(generation or {})},
        PARAMS_SUMMARY_KEY: n_params,
        **accounting.compute_metrics(c, n_params),
        **accounting.discarded_metrics(c),
    }
