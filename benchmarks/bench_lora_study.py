"""What LoRA changes in a recipe's curve: full fine-tuning against LoRA at rank 1, 8 and 32.

    .venv/bin/python benchmarks/bench_lora_study.py [--config configs/smollm2.yaml] [--steps 50] [--seeds 2]
                                                    [--tune-steps 150] [--lr ARM=LR ...] [--out runs/lora-study] [--json]

Issue 45, item 6. Every run is `workbench run` on `--config` (the quickstart by default: builtin:tiny
2 x 128, 2-digit addition, the torch generator; configs/smollm2.yaml is the pretrained chat model on
word problems through the vLLM-CPU generator) in a subprocess, one at a time, seed by seed with the
arms interleaved (so a cut-short study still has every arm, and load falls on all arms alike). A run
folder that already holds a finished run of the same settings (as long or longer: cut at `--steps`)
is read, not rerun: a study stopped half way resumes where it stopped (sweeps/lora_study.yaml is the quickstart grid for `workbench sweep`).

1. The learning rate of each arm, tuned the same way: `--tune-steps` steps, seed 0, at each rate
   of its grid (full fine-tuning: the config's rate x 0.5, 1, 2; LoRA about 10x that, as "LoRA
   Without Regret" advises, alpha 16 at every rank); the rate with the best mean validation pass
   rate over the run's last two evaluations wins. `--lr ARM=LR` fixes an arm's rate untuned.
2. Each arm at its rate, `--seeds` seeds of `--steps` steps.
3. Per arm, its seeds' curves (val/pass_rate against compute/flops: the FLOPs each arm spends,
   4N + 2T per trained token with T trainable parameters) fitted jointly (fit_sigmoid_multi, a
   whole-run bootstrap), then ranked with the paper's +-0.02 tie rule on A and B compared at a
   shared A (`workbench.scaling.decide.compare`, what `workbench compare` prints).
4. Each arm's throughput: trained sequences/s, the generator's seconds a chunk, the trainer's
   compute seconds a step, the weight push (gather + sync) a step, its FLOPs, device-hours and
   wall seconds at the last step (the run's own clock, start-up left out).

Printed: the tuning table, the comparison (A and B with intervals, a verdict per row), the
throughput table, and the answer per LoRA arm against full fine-tuning: does it change the
ceiling, the efficiency, or neither, at this scale. `--json` prints one object instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from statistics import mean
from typing import Any, Optional

import yaml

from cli_run import REPO, RunResult, finished_run, workbench_run

QUICKSTART = REPO / "configs" / "quickstart.yaml"
X = "compute/flops"
# arm -> (model.lora or None, its learning-rate grid as multiples of the config's full fine-tuning rate)
ARMS: dict[str, tuple[Optional[dict[str, Any]], list[float]]] = {
    "full": (None, [0.5, 1.0, 2.0]),
    "lora-r1": ({"rank": 1, "alpha": 16}, [5.0, 10.0, 20.0]),
    "lora-r8": ({"rank": 8, "alpha": 16}, [5.0, 10.0, 20.0]),
    "lora-r32": ({"rank": 32, "alpha": 16}, [5.0, 10.0, 20.0]),
}


def write_config(base: Path, folder: Path, name: str, lora: Optional[dict], lr: float, steps: int, seed: int) -> Path:
    from workbench.config import load_run_config
    from workbench.configtools import set_dotted

    data = yaml.safe_load(base.read_text())
    for k, v in {"name": name, "seed": seed, "train.lr": lr, "train.max_steps": steps, "model.lora": lora,
                 "checkpoint.every_steps": steps, "checkpoint.export_policy": False, "tracking.mlflow": False}.items():  # fmt: skip
        set_dotted(data, k, v)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    load_run_config(path)  # refused here, before Ray, if a setting is wrong
    return path


def same_settings(folder: Path, lora: Optional[dict], lr: float, steps: int, seed: int) -> bool:
    """Whether the finished run in `folder` ran these settings for `steps` steps or more (its resolved
    config.json); the rate is constant after the warm-up (engine/train/optim.py), so a longer run's
    first `steps` steps are a run of `steps`."""
    cfg = json.loads((folder / "config.json").read_text())
    had = cfg["model"].get("lora")
    return (cfg["seed"] == seed and math.isclose(cfg["train"]["lr"], lr) and cfg["train"]["max_steps"] >= steps
            and (had is None) == (lora is None) and (lora is None or had["rank"] == lora["rank"]))  # fmt: skip


def cut(done: RunResult, steps: int) -> RunResult:
    """The run's rows up to step `steps` (its evaluations and train rows there)."""
    return dataclasses.replace(done, rows=[r for r in done.rows if r.get("step", 0) <= steps])


def one_run(base: Path, out: Path, name: str, lora: Optional[dict], lr: float, steps: int, seed: int) -> RunResult:
    out.mkdir(parents=True, exist_ok=True)
    done = finished_run(out / name)
    if done is not None and same_settings(out / name, lora, lr, steps, seed):
        had, done = done.summary.get("steps", steps), cut(done, steps)
        print(f"  {name}: read (finished earlier{f', its first {steps} of {had} steps' if had > steps else ''}), "
              f"val {last_pass(done.rows):.3f}", file=sys.stderr, flush=True)  # fmt: skip
        return done
    done = workbench_run(write_config(base, out, name, lora, lr, steps, seed), out / name)
    print(f"  {name}: {done.summary.get('status')} in {done.wall_s:.0f} s, val {last_pass(done.rows):.3f}", file=sys.stderr, flush=True)
    return done


def evals(rows: list[dict]) -> list[dict]:
    return [r for r in rows if isinstance(r.get("val/pass_rate"), (int, float))]


def last_pass(rows: list[dict], n: int = 2) -> float:
    """The mean validation pass rate over the run's last `n` evaluations (the tuning score)."""
    return mean(r["val/pass_rate"] for r in evals(rows)[-n:])


def curve(rows: list[dict]) -> tuple[list[float], list[float]]:
    """(compute, pass rate) at each evaluation; an evaluation row lacking X takes the last step's."""
    xs, ys, x = [], [], 0.0
    for r in rows:
        if isinstance(r.get(X), (int, float)):
            x = float(r[X])
        if isinstance(r.get("val/pass_rate"), (int, float)):
            xs.append(x)
            ys.append(float(r["val/pass_rate"]))
    return xs, ys


def throughput(runs: list[RunResult]) -> dict[str, float]:
    """Per-step means over the runs' train rows, and the counters at each run's last train row (the
    run's own clock: start-up left out; a cut run's at its cut)."""
    trains = [[r for r in d.rows if "train/loss" in r] for d in runs]

    def per_step(key: str) -> float:
        vals = [r[key] for rows in trains for r in rows if isinstance(r.get(key), (int, float))]
        return mean(vals) if vals else math.nan

    def at_end(key: str) -> float:
        return mean(float(rows[-1].get(key, math.nan)) for rows in trains if rows)

    push = [r.get("time/weight_gather", 0.0) + r.get("time/weight_sync", 0.0) for rows in trains for r in rows]
    return {
        "sequences_per_s": at_end("throughput/samples_per_second"),
        "generate_s": per_step("time/generate"),
        "train_compute_s": per_step("time/train_compute"),
        "push_s": mean(push) if push else math.nan,
        "flops": at_end("compute/flops"),
        "device_hours": at_end("compute/device_hours"),
        "wall_s": at_end("compute/wall_seconds"),
    }


def answer(row_full: Any, row: Any, margin: float) -> str:
    """Does the arm differ from full fine-tuning in A (beyond the margin, intervals apart) or B?"""
    a_diff = row.A - row_full.A
    a_apart = row.A_hi < row_full.A_lo or row.A_lo > row_full.A_hi
    ceiling = abs(a_diff) > margin and a_apart
    b_apart = row.B_hi < row_full.B_lo or row.B_lo > row_full.B_hi
    parts = [f"ceiling {'lower' if a_diff < 0 else 'higher'} by {abs(a_diff):.3f}" if ceiling
             else f"no ceiling difference shown (A {a_diff:+.3f}, {'within the margin' if abs(a_diff) <= margin else 'intervals overlap'})"]
    parts.append(f"efficiency {'lower' if row.B < row_full.B else 'higher'} (B intervals apart)" if b_apart
                 else f"no efficiency difference shown (B {row.B - row_full.B:+.2f}, intervals overlap)")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(QUICKSTART), help="the recipe every arm runs (its lr is full fine-tuning's)")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--tune-steps", type=int, default=150)
    p.add_argument("--arms", default=",".join(ARMS), help="a comma list of " + ", ".join(ARMS))
    p.add_argument("--lr", action="append", default=[], metavar="ARM=LR",
                   help="use this rate for the arm, untuned (e.g. a rate an earlier run of this bench chose)")
    p.add_argument("--out", default="runs/lora-study")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from workbench.scaling.decide.compare import compare
    from workbench.scaling.fit.sigmoid import fit_sigmoid_multi
    from workbench.scaling.forecast.families import A_MARGIN

    out = Path(a.out).resolve()
    base = Path(a.config).resolve()
    base_lr = float(yaml.safe_load(base.read_text())["train"]["lr"])
    arms = a.arms.split(",")
    fixed = {k: float(v) for k, v in (x.split("=", 1) for x in a.lr)}
    tuned: dict[str, dict[float, float]] = {}
    for arm in arms:
        lora, factors = ARMS[arm]
        if arm in fixed:
            continue
        grid = [base_lr * f for f in factors]
        print(f"tuning {arm}: lr in {[f'{lr:g}' for lr in grid]}, {a.tune_steps} steps", file=sys.stderr, flush=True)
        tuned[arm] = {lr: last_pass(one_run(base, out / "tune", f"{arm}-lr{lr:g}", lora, lr, a.tune_steps, 0).rows)
                      for lr in grid}  # fmt: skip
    chosen = {**fixed, **{arm: max(scores, key=scores.get) for arm, scores in tuned.items()}}
    runs: dict[str, list[RunResult]] = {arm: [] for arm in arms}
    for s in range(a.seeds):  # seed by seed, the arms interleaved: a cut-short study has every arm
        for arm in arms:
            print(f"{arm}: lr {chosen[arm]:g}, seed {s}, {a.steps} steps", file=sys.stderr, flush=True)
            runs[arm].append(one_run(base, out, f"{arm}-s{s}", ARMS[arm][0], chosen[arm], a.steps, s))
    curves = {arm: [curve(d.rows) for d in rs] for arm, rs in runs.items()}
    (out / "curves.json").write_text(json.dumps(curves))  # the fit's input, kept beside the runs
    fits = {arm: fit_sigmoid_multi(c) for arm, c in curves.items()}
    cmp = compare(fits, margin=A_MARGIN)
    rows = {r.name: r for r in cmp.rows}
    result = {
        "tuning": {arm: {f"{lr:g}": round(v, 4) for lr, v in scores.items()} for arm, scores in tuned.items()},
        "chosen_lr": chosen, "comparison": cmp.to_records(), "winner": cmp.winner,
        "throughput": {arm: throughput(rs) for arm, rs in runs.items()},
        "answers": {arm: answer(rows["full"], rows[arm], A_MARGIN) for arm in arms if arm != "full" and "full" in rows},
        "config": str(base), "steps": a.steps, "seeds": a.seeds, "tune_steps": a.tune_steps, "x": X,
    }  # fmt: skip
    (out / "study.json").write_text(json.dumps(result, default=float))
    if a.json:
        print(json.dumps(result, default=float))
        return 0
    print(f"\nlearning rates ({a.tune_steps} steps, seed 0; score: mean val pass rate of the last two evaluations):")
    for arm, scores in result["tuning"].items():
        print(f"  {arm:9s} " + "  ".join(f"{lr}: {v:.3f}" for lr, v in scores.items()) + f"  -> {chosen[arm]:g}")
    print(f"\n{a.seeds} seeds x {a.steps} steps per arm, fitted jointly against {X}:\n{cmp}")
    print(f"\n{'arm':9s} {'seq/s':>8s} {'gen s/chunk':>12s} {'train s/step':>13s} {'push s/step':>12s} {'FLOPs':>10s} "
          f"{'dev-hours':>10s} {'wall s':>7s}")  # fmt: skip
    for arm, t in result["throughput"].items():
        print(f"{arm:9s} {t['sequences_per_s']:8.1f} {t['generate_s']:12.2f} {t['train_compute_s']:13.4f} {t['push_s']:12.5f} {t['flops']:10.3g} "
              f"{t['device_hours']:10.4f} {t['wall_s']:7.0f}")  # fmt: skip
    for arm, text in result["answers"].items():
        print(f"{arm} against full fine-tuning: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
