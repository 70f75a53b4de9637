"""Does a shipped config climb without falling back? Runs it per seed and checks the curve.

    .venv/bin/python benchmarks/bench_fallback.py [--config configs/quickstart.yaml] [--seeds 0 1 2]
        [--arm LABEL=KEY=VALUE[,KEY=VALUE...] ...] [--out runs/bench-fallback] [--reuse]

Each arm (default: one arm, "shipped", the config as it is) runs `workbench run --config CONFIG
--fresh --no-report --set seed=N` per seed in a subprocess, with the arm's `--set`s; e.g.
`--arm shipped= --arm npr-off=recipe.no_positive_resampling=false` runs the two side by side.
`--reuse` reads a run folder that already holds a finished run of the same arm and seed instead
of training it again (the figures then come from that earlier run).

Per seed it prints the final and the best validation pass rate, the worst drop below the best
earlier evaluation, absolute and in standard errors (the evaluation's own `val/pass_rate_se`,
which counts each prompt's samples as one cluster: ~0.03 for the quickstart's 200 prompts x 8
samples, where the binomial SE over all 1,600 samples would be ~0.012) among the
evaluations after the first 10% of the steps, No-Positive-Resampling's retired share at the end,
and PASS/FAIL against the rule of issue 24: after the first 10% of steps, no evaluation is more
than 3 standard errors below the best earlier one. Then each arm's mean final pass rate.
The column "binomial" gives the same worst drop in binomial standard errors, sqrt(p (1 - p) / n)
over all n = prompts x samples of the evaluation (the figure the issue quotes): it counts only the
evaluation's sampling noise, not the policy's own step-to-step jitter, so a run whose policy
wobbles by 0.03 fails it whatever the resampling rule (README, "No-Positive-Resampling, bounded").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WARMUP_SHARE = 0.10  # evaluations within the first 10% of the steps are not judged
MAX_DROP_SE = 3.0  # a later evaluation this many of its standard errors below the best earlier one: a fall-back


def fallback(evals: list[tuple[int, float, float]], max_steps: int) -> dict[str, Any]:
    """The curve's figures from (step, pass rate, standard error) evaluations, in step order."""
    worst, worst_step, worst_abs, best = 0.0, None, 0.0, -1.0
    for step, y, se in evals:
        if step > WARMUP_SHARE * max_steps and best >= 0 and se > 0 and (best - y) / se > worst:
            worst, worst_step, worst_abs = (best - y) / se, step, best - y
        best = max(best, y)
    return {
        "final": evals[-1][1] if evals else float("nan"),
        "best": max((y for _, y, _ in evals), default=float("nan")),
        "best_step": max(evals, key=lambda e: e[1])[0] if evals else None,
        "worst_drop_se": worst,
        "worst_step": worst_step,
        "worst_drop": worst_abs,
        "passed": bool(evals) and worst <= MAX_DROP_SE,
    }


def read_run(out: Path) -> dict[str, Any]:
    """The figures of the finished run in `out` (metrics.jsonl and summary.json)."""
    from workbench.runs.report import eval_rows
    from workbench.tracking.sink import read_jsonl

    summary = json.loads((out / "summary.json").read_text())
    cfg = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
    rows = eval_rows(read_jsonl(out / "metrics.jsonl"))
    evals = [(int(r["step"]), float(r["val/pass_rate"]), float(r.get("val/pass_rate_se") or 0.0)) for r in rows]
    max_steps = int(((cfg.get("train") or {}).get("max_steps")) or summary["steps"])
    ev = cfg.get("eval") or {}
    n = int(ev.get("num_prompts") or 0) * int(ev.get("samples_per_prompt") or 0)
    binomial = fallback([(s, y, math.sqrt(y * (1 - y) / n) if n else 0.0) for s, y, _ in evals], max_steps)
    ret = summary.get("retirement") or {}
    return {**fallback(evals, max_steps), "worst_drop_binomial_se": binomial["worst_drop_se"],
            "steps": summary["steps"], "status": summary["status"],
            "retired_share": ret.get("retired_share", float("nan")), "returned": ret.get("returned", 0),
            "wall_s": summary.get("wall_seconds", float("nan"))}  # fmt: skip


def run_seed(config: str, seed: int, out: Path, overrides: list[str], reuse: bool) -> dict[str, Any]:
    done = out / "summary.json"
    if reuse and done.exists() and json.loads(done.read_text()).get("status") == "finished":
        return {"seed": seed, "reused": True, **read_run(out)}
    cmd = [sys.executable, "-m", "workbench.cli", "run", "--config", config, "--out", str(out), "--fresh", "--quiet",
           "--no-report", "--set", f"seed={seed}"]  # fmt: skip
    for o in overrides:
        cmd += ["--set", o]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not done.exists():
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"seed {seed}: `workbench run` failed (exit {proc.returncode})")
    return {"seed": seed, "reused": False, "cmd_s": time.time() - t0, **read_run(out)}


def parse_arm(text: str) -> tuple[str, list[str]]:
    label, _, sets = text.partition("=")
    if not label:
        raise SystemExit(f"--arm {text!r}: expected LABEL=KEY=VALUE[,KEY=VALUE...] (or LABEL= for the config as is)")
    return label, [s for s in sets.split(",") if s]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arm", dest="arms", action="append", default=[], metavar="LABEL=KEY=VALUE[,KEY=VALUE]")
    ap.add_argument("--out", default="runs/bench-fallback", help="run folders: OUT/<config name>/<arm>/seed<N>")
    ap.add_argument("--reuse", action="store_true", help="read an earlier finished run of the same arm and seed")
    args = ap.parse_args()
    arms = [parse_arm(a) for a in args.arms] or [("shipped", [])]
    name = Path(args.config).stem
    print(f"{args.config}: after the first {WARMUP_SHARE:.0%} of steps, no evaluation more than {MAX_DROP_SE:g} "
          "standard errors below the best earlier one")  # fmt: skip
    print(f"{'arm':<14}{'seed':>5}{'final':>8}{'best':>8}{'@step':>7}{'worst drop':>20}{'@step':>7}{'retired':>9}"
          f"{'returned':>10}{'wall s':>8}{'binomial':>10}  verdict")  # fmt: skip
    means = []
    for label, sets in arms:
        results = []
        for seed in args.seeds:
            r = run_seed(args.config, seed, Path(args.out).resolve() / name / label / f"seed{seed}", sets, args.reuse)
            results.append(r)
            print(f"{label:<14}{seed:>5}{r['final']:>8.3f}{r['best']:>8.3f}{r['best_step']!s:>7}"
                  f"{r['worst_drop']:>9.3f} = {r['worst_drop_se']:>4.1f} SE{r['worst_step']!s:>7}{r['retired_share']:>9.1%}{r['returned']:>10}"
                  f"{r['wall_s']:>8.0f}{r['worst_drop_binomial_se']:>7.1f} SE  {'PASS' if r['passed'] else 'FAIL'}{' (reused)' if r['reused'] else ''}",
                  flush=True)  # fmt: skip
        n_pass = sum(r["passed"] for r in results)
        mean_final = sum(r["final"] for r in results) / len(results)
        means.append(f"{label}: mean final {mean_final:.3f}, mean best {sum(r['best'] for r in results) / len(results):.3f}, "
                     f"{n_pass}/{len(results)} seeds PASS ({' '.join(sets) or 'the config as shipped'})")  # fmt: skip
    print("\n".join(means))


if __name__ == "__main__":
    main()
