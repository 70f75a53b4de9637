"""Do the run-health rules fire on real runs made unhealthy on purpose, and stay quiet on healthy ones?

    .venv/bin/python benchmarks/bench_health.py [--steps 400] [--out runs/bench-health] [--only NAME ...] [--recheck] \
        [--save examples/curves/health-bench]

Issue 46, item 4. Each run is the quickstart (configs/quickstart.yaml: builtin:tiny, 2-digit
addition, the ScaleRL recipe, torch generator on the CPU) cut to `--steps` trainer steps with an
evaluation every 20 steps, run by `workbench run --fresh --no-report` in a subprocess, one at a
time, with MLflow off. The runs (--only picks some by name):

- healthy-s0, healthy-s1, healthy-s2: the quickstart recipe as shipped, seeds 0-2; no rule should fire.
- lr-100x: `train.lr` 100x the quickstart's (2e-2); expected: entropy, grad_spike or zero_variance.
- length-reward: a reward that pays 0.25 per character (benchmarks/health_rewards.py
  `length_bonus`) beside the task's checker as the pass function, `generation.max_new_tokens` 16;
  expected: length and truncation.
- format-bonus: the task's checker as the pass function plus a heavy bonus (weight 2) for a
  completion ending in "0" (`ends_in_zero`): the honest construction with one shared pass verdict
  (the pass function decides validation too, so a format trick that fools it moves val/pass_rate
  too); expected: entropy (collapse onto round numbers) or zero_variance.
- healthy-vllm: the quickstart with the vLLM generator (`generation.backend: vllm`; bf16 over the
  trainer's fp32 masters), 200 steps; no rule should fire.
- mismatch-vllm: the same with `train.lr` 10x (2e-3) and no FP32 head (`recipe.fp32_head: false`);
  expected: mismatch (train/mismatch_kl spikes as the policy sharpens fast).
- fooled-checker: a pass function that a completion ending in "0" fools (`fooled_by_zero`), with
  `reward.validate_with: task` (validation keeps the task's own checker), so the training pass rate
  climbs while validation falls; expected: divergence.

The bench reads each run's summary.json `health` (what the engine wrote) and metrics.jsonl, and
prints one progress line per run, then a table: the rules that fired and at which step, and the
step where the watched metric turned by its own definition (ONSET below), independent of the rules'
running medians. The wall time is this machine's, under whatever else runs on it. `--save DIR`
writes each run's rows cut to what the rules read as DIR/<run>.health.jsonl.gz
(tests/runs/test_health_routes.py checks that the unhealthy ones still raise their flags). The
shipped routes' healthy seeds, at their own lengths: benchmarks/bench_health_routes.py.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from statistics import mean, pstdev
from typing import Any, Optional

import yaml

from cli_run import REPO, workbench_run

sys.path.insert(0, str(REPO))

QUICKSTART = REPO / "configs" / "quickstart.yaml"
EVERY = 20  # evaluation interval (steps)
EARLY, HOLD, SIGMAS = 10, 5, 3.0  # ONSET's parameters
ONSET = (f"a training metric turns at the first step (after its first {EARLY}) from which at least {HOLD - 1} of "
         f"{HOLD} consecutive values lie more than {SIGMAS:g} SD of its first {EARLY} values (SD at least 5% of their "
         f"mean) past their mean, in the unhealthy direction; val/pass_rate turns at the first evaluation more "
         f"than 2 combined standard errors below the best earlier one")  # fmt: skip

R = "health_rewards"  # benchmarks/health_rewards.py, on the workers' PYTHONPATH
CORRECT = {"fn": "workbench.rl.reward_functions:correct", "weight": 1.0, "pass": True}
# name -> (overrides, expected rules, watched metrics with their unhealthy direction)
RUNS: dict[str, tuple[dict[str, Any], list[str], dict[str, str]]] = {
    **{f"healthy-s{s}": ({"seed": s}, [], {}) for s in range(3)},
    # when every group goes zero-variance the trainer skips its steps, and logs no entropy or
    # gradient norm after the collapse (2026-12-07: 4 entropy values, under a window): zero_variance names it
    "lr-100x": ({"train.lr": 2.0e-2}, ["entropy", "grad_spike", "zero_variance"],
                {"train/entropy": "down", "train/grad_norm": "up", "train/zero_variance_frac": "up"}),
    "length-reward": ({"generation.max_new_tokens": 16,
                       "reward.functions": [CORRECT, {"fn": f"{R}:length_bonus", "weight": 1.0}]},
                      ["length", "truncation"], {"train/response_len": "up", "train/truncation_rate": "up"}),
    "format-bonus": ({"reward.functions": [CORRECT, {"fn": f"{R}:ends_in_zero", "weight": 2.0}]},
                     ["entropy", "zero_variance"], {"train/entropy": "down", "train/zero_variance_frac": "up"}),
    # the vLLM generator in bf16 against the trainer: the mismatch rule's runs (200 steps)
    "healthy-vllm": ({"generation.backend": "vllm", "train.max_steps": 200}, [], {}),
    "mismatch-vllm": ({"generation.backend": "vllm", "train.lr": 2.0e-3, "recipe.fp32_head": False, "train.max_steps": 200},
                      ["mismatch"], {"train/mismatch_kl": "up"}),
    "fooled-checker": ({"reward.functions": [{"fn": f"{R}:fooled_by_zero", "weight": 1.0, "pass": True}],
                        "reward.validate_with": "task"},
                       ["divergence"], {"train/pass_rate": "up", "val/pass_rate": "down"}),
}  # fmt: skip


def write_config(name: str, overrides: dict[str, Any], steps: int, folder: Path) -> Path:
    """The quickstart's YAML with the run's settings, validated by the config loader before Ray starts."""
    from workbench.config import load_run_config
    from workbench.configtools import set_dotted

    data = yaml.safe_load(QUICKSTART.read_text())
    common = {"name": f"health-{name}", "train.max_steps": steps, "eval.every_steps": EVERY,
              "checkpoint.every_steps": steps, "checkpoint.export_policy": False, "tracking.mlflow": False}  # fmt: skip
    for k, v in {**common, **overrides}.items():
        set_dotted(data, k, v)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    load_run_config(path)  # a setting the loader refuses stops here, before Ray
    return path


def recheck(name: str, out: Path) -> dict[str, Any]:
    """A finished run's flags under the health rules as they are now (no new run)."""
    from workbench.config import load_run_config
    from workbench.runs.health import check_health
    from workbench.tracking.sink import read_jsonl

    folder = out / name
    if not (folder / "metrics.jsonl").exists():
        raise SystemExit(f"{folder}: no run to recheck (run the bench without --recheck first)")
    rows = read_jsonl(folder / "metrics.jsonl")
    flags = [f.as_dict() for f in check_health(rows, load_run_config(out / f"{name}.yaml").health)]
    summary = json.loads((folder / "summary.json").read_text())
    return {"name": name, "flags": flags, "rows": rows, "wall_s": float("nan"), "status": summary.get("status")}


def run(name: str, steps: int, out: Path) -> dict[str, Any]:
    """One run through `workbench run`; its flags, metric rows and wall time."""
    out.mkdir(parents=True, exist_ok=True)
    done = workbench_run(write_config(name, RUNS[name][0], steps, out), out / name)
    return {"name": name, "flags": done.summary.get("health", []), "rows": done.rows, "wall_s": done.wall_s,
            "status": done.summary.get("status")}  # fmt: skip


def series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    return sorted((int(r["step"]), float(r[key])) for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key]))


def onset(rows: list[dict], key: str, direction: str) -> Optional[int]:
    """The step where `key` turned (ONSET); None when it never did."""
    if key == "val/pass_rate":
        se = dict(series(rows, "val/pass_rate_se"))
        best: Optional[tuple[int, float]] = None
        for step, v in series(rows, key):
            if best and best[1] - v > 2 * math.hypot(se.get(best[0], 0.0), se.get(step, 0.0)):
                return step
            best = (step, v) if best is None or v > best[1] else best
        return None
    s = series(rows, key)
    if len(s) < EARLY + HOLD:
        return None
    early = [v for _, v in s[:EARLY]]
    mu, sd = mean(early), max(pstdev(early), 0.05 * abs(mean(early)), 1e-6)
    past = [(v - mu if direction == "up" else mu - v) > SIGMAS * sd for _, v in s]
    for i in range(EARLY, len(s) - HOLD + 1):
        if past[i] and sum(past[i : i + HOLD]) >= HOLD - 1:
            return s[i][0]
    return None


def describe(r: dict[str, Any]) -> dict[str, str]:
    """The table's cells for one run."""
    _, expected, watched = RUNS[r["name"]]
    fired = {f["rule"]: f["step"] for f in r["flags"]}
    turns = {k: onset(r["rows"], k, d) for k, d in watched.items()}
    val = series(r["rows"], "val/pass_rate")
    train = [v for _, v in series(r["rows"], "train/pass_rate")]
    if not expected:
        verdict = "OK (no flag)" if not fired else "MISFIRE"
    else:
        hit = [e for e in expected if e in fired]
        verdict = f"fired {', '.join(hit)}" if hit else "MISSED"
    return {
        "run": r["name"],
        "fired": ", ".join(f"{k}@{v}" for k, v in fired.items()) or "-",
        "expected": ", ".join(expected) or "none",
        "turned": ", ".join(f"{k}@{'-' if t is None else t}" for k, t in turns.items()) or "-",
        "val": f"{val[0][1]:.3f}->{val[-1][1]:.3f}" if val else "-",
        "train": f"{mean(train[:10]):.2f}->{mean(train[-10:]):.2f}" if len(train) >= 10 else "-",
        "verdict": verdict,
        "wall": f"{r['wall_s']:.0f}" if math.isfinite(r["wall_s"]) else "rechecked",
    }


def table(results: list[dict[str, Any]]) -> str:
    cols = [("run", "run"), ("fired", "rules fired (rule@step)"), ("expected", "expected"), ("turned", "metric turned (ONSET)"),
            ("val", "val pass rate"), ("train", "train pass rate (first/last 10 steps)"), ("verdict", "verdict"), ("wall", "wall s")]  # fmt: skip
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in results:
        cells = describe(r)
        lines.append("| " + " | ".join(cells[k] for k, _ in cols) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400, help="trainer steps per run (the vLLM runs: 200, their own)")
    ap.add_argument("--out", default="runs/bench-health", help="run folders go to OUT/<run> (kept, with their YAML)")
    ap.add_argument("--only", nargs="+", choices=sorted(RUNS), default=None, help="run these only")
    ap.add_argument("--recheck", action="store_true", help="apply the rules as they are now to the runs under OUT (no new run)")
    ap.add_argument("--save", default=None, help="write each run's health rows to SAVE/<run>.health.jsonl.gz")
    args = ap.parse_args()
    names = args.only or list(RUNS)
    out = Path(args.out).resolve()
    results = []
    for i, name in enumerate(names, 1):
        r = recheck(name, out) if args.recheck else run(name, args.steps, out)
        results.append(r)
        fired = ", ".join(f"{f['rule']}@{f['step']}" for f in r["flags"]) or "no flag"
        took = f" in {r['wall_s']:.0f} s" if math.isfinite(r["wall_s"]) else ""
        print(f"[{i}/{len(names)}] {name}: {r['status']}{took}, {fired}", flush=True)
        if args.save:
            from bench_health_routes import save

            save(r["rows"], Path(args.save) / f"{name}.health.jsonl.gz")
    print(f"\n{args.steps} steps per run, evaluation every {EVERY}; ONSET: {ONSET}.\n")
    print(table(results))
    healthy = [r for r in results if not RUNS[r["name"]][1]]
    if healthy:
        flagged = [r["name"] for r in healthy if r["flags"]]
        print(f"\nhealthy seeds: {len(healthy) - len(flagged)} of {len(healthy)} raised no flag"
              + (f" (flagged: {', '.join(flagged)})" if flagged else ""))
    for r in results:
        for f in r["flags"]:
            print(f"  {r['name']}: {f['rule']} from step {f['step']} ({f['metric']}): {f['message']}")


if __name__ == "__main__":
    main()
