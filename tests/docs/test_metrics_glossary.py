"""The metrics glossary (docs/metrics.md) covers every metric a real run writes, and names no
metric that nothing writes. The run is the quickstart's engine at test size: the same task
family (addition), recipe and single-task metrics as `configs/quickstart.yaml`, for 2 steps on
the session's shared Ray cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GLOSSARY = REPO / "docs" / "metrics.md"
PLACEHOLDER = r"[A-Za-z0-9_-]+"  # <domain>, <verdict>


def glossary_keys() -> list[str]:
    """The keys the glossary's tables define (first column), placeholders as written."""
    return re.findall(r"^\| `([^`]+)` \|", GLOSSARY.read_text(), re.M)


def covered(key: str, entries: list[str]) -> bool:
    return any(re.fullmatch(re.sub(r"<\w+>", PLACEHOLDER, re.escape(e).replace(r"\<", "<").replace(r"\>", ">")), key)
               for e in entries)


def test_placeholders_match_domains_and_verdicts():
    entries = ["val/pass_rate/<domain>", "reward/verdict/<verdict>"]
    assert covered("val/pass_rate/code", entries) and covered("reward/verdict/sandbox_error", entries)
    assert not covered("val/pass_rate", entries) and not covered("val/pass_rate/code/x", entries)


@pytest.mark.slow
def test_every_metric_a_quickstart_run_writes_is_in_the_glossary(ray_cluster, tiny_config):
    from workbench.engine import run_to_end

    cfg = tiny_config({"train.max_steps": 2}, name="glossary")  # evaluations at steps 0 and 2
    summary = run_to_end(cfg, resume=False)
    assert summary["status"] == "finished"
    keys = set()
    for line in (Path(cfg.out_dir) / "metrics.jsonl").read_text().splitlines():
        keys |= set(json.loads(line))
    keys.discard("step")
    assert {"val/pass_rate", "compute/device_hours", "train/loss"} <= keys  # a real run's rows, not an empty file
    entries = glossary_keys()
    missing = sorted(k for k in keys if not covered(k, entries))
    assert not missing, f"metrics a run writes that docs/metrics.md does not explain: {missing}"


def test_every_glossary_metric_is_written_by_the_code():
    """A glossary entry must name a key some module writes: its literal text, or its prefix before
    a placeholder (`val/pass_rate/<domain>` is built as f"val/pass_rate/{d}"), a trainer loss
    stat (`train/<stat>` comes from workbench/rl/losses.py's stats dict) or a fit metric
    (`fit/<name>` is built as f"{prefix}/<name>" for the run's and each domain's fit)."""
    source = "\n".join(p.read_text() for p in (REPO / "workbench").rglob("*.py"))
    stale = []
    for entry in glossary_keys():
        stem = entry.split("<")[0].rstrip("/")
        name = entry.split("/", 1)[1] if entry.startswith("train/") else None
        if f'"{entry}' in source or (stem != entry and f"{stem}/" in source):
            continue
        if name and f'"{name}"' in (REPO / "workbench" / "rl" / "losses.py").read_text():
            continue
        if entry.startswith("fit/") and f'/{entry.split("/", 1)[1]}"' in source:
            continue
        stale.append(entry)
    assert not stale, f"docs/metrics.md explains metrics nothing writes: {stale}"


def test_every_fit_metric_logged_to_mlflow_is_in_the_glossary():
    """The fit's MLflow metrics (tracking.run_tracking.fit_metrics) are not in metrics.jsonl, so the
    run above does not see them: a real fit of a shipped curve, with the run report's ceiling check
    and a domain's fit, names them."""
    from workbench.runs.report import fit_curves
    from workbench.scaling.data import Curve
    from workbench.scaling.decide.ceiling import attach_ceiling_check
    from workbench.tracking.run_tracking import fit_metrics

    curve = Curve.from_csv(REPO / "examples" / "curves" / "qwen2.5-0.5b-instruct_gsm8k_ppo__val.csv")
    fit = fit_curves([(curve.compute, curve.score)], n_boot=20)
    attach_ceiling_check(fit)
    keys = set(fit_metrics(fit)) | set(fit_metrics(fit, prefix="fit/code"))
    assert {"fit/A", "fit/r2", "fit/n", "fit/converged", "fit/no_gain", "fit/ceiling_lo", "fit/code/B"} <= keys
    entries = glossary_keys() + re.findall(r"`(fit/[\w<>/]+)`", GLOSSARY.read_text())  # fit/A_lo, ... named in a row
    missing = sorted(k for k in keys if not covered(k, entries))
    assert not missing, f"fit metrics MLflow gets that docs/metrics.md does not explain: {missing}"
