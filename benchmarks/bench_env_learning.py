"""Does a model learn an environment, and how fast? Each seed trained, then its checkpoints scored.

    .venv/bin/python benchmarks/bench_env_learning.py [--config configs/smollm2-tools.yaml] [--seeds 0 1]
        [--minutes 40] [--every 2] [--out runs/bench-env] [--gain 0.20 --within 45] [--curves DIR]
        [--set KEY=VALUE ...] [--keep-checkpoints] [--json]

Issue 51, item 6. An environment's episodes are long (configs/smollm2-tools.yaml: ~860-token prompts,
up to three turns), and the run's own evaluator re-reads each episode every turn on the torch
backend: an in-run evaluation of 64 episodes took over 9 minutes beside training on 2 cores, and with
it Ray's OOM killer stopped a worker on 24 GB. So, as `bench_vs_trl.py` scores its sides, each seed is:

1. **Trained** by `workbench run --config CONFIG --set seed=N --max-minutes M` in a subprocess, with
   no evaluation in the run (`eval.every_steps: 0`: no evaluator actor either, its memory left to
   the trainer: with one, a 24 GB host ran into Ray's OOM killer) and a checkpoint every `--every`
   steps, all kept. The run folder is watched from here (bench_vs_trl.RunWatch): the command's
   start-up and each checkpoint's save seconds, which are taken out of the training clock.
2. **Scored** after the run by one vLLM engine a seed (`SeedScorer`), the generator the run trained
   with: step 0 (the base model), then each checkpoint's policy pushed into it as the trainer pushes
   (the compute dtype, the FP32 head in fp32), sampled as the run's own evaluator samples: the
   config's `eval.num_prompts` validation prompts x `eval.samples_per_prompt`, the sampling seeded
   with the seed + step (`seed_sampling`: the same samples as an engine started on that step's
   export draws, tests/test_bench_env_learning.py). A scored checkpoint is removed (1.7 GB each for
   SmolLM2) unless `--keep-checkpoints`.
   (`score_checkpoint` scores a model folder in an engine of its own: TRL's checkpoints, a LoRA run's
   exports.)
3. **Fitted** as the run report fits a run (`workbench.runs.report.write_report`): the training rows
   plus one evaluation row per scored step, carrying that step's compute, into OUT/NAME__seedN/scored/
   (metrics.jsonl, fit.json, backtest.json, fit.html): the sigmoid, its ceiling check and its backtest
   on the first 40% of the compute. Then all seeds jointly (fit_sigmoid_multi), on compute/device_hours.

Resumable: a seed whose folder holds `train.json` is not trained again, and a step in its
`scores.jsonl` is not scored again (a stopped bench picks up where it stopped).

The gain's clock: the command's start-up plus the run clock at the step, less the checkpoint saves
before it (no evaluation is inside it). `--gain G --within W`: the pass rate at the last scored step
within W minutes must be at least G above step 0's. `--curves DIR` writes each seed's scored points as
DIR/NAME__seedN.csv in the forecast scoreboard's columns (step, compute, flops, val_pass_rate,
val_pass_rate_se; compute = compute/device_hours) with the scored metrics.jsonl gzipped beside it.
The wall time is this machine's, under whatever else runs on it: say so when quoting it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Optional

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_learning import write_curve  # noqa: E402  (benchmarks/ is the script's folder)
from bench_vs_trl import RunWatch, is_training_row, save_seconds, saves_before, startup_seconds  # noqa: E402
from cli_run import workbench_run  # noqa: E402

COMPUTE_KEYS = ("compute/device_hours", "compute/flops", "compute/wall_seconds")


# --- training ------------------------------------------------------------------------------------
def training_settings(settings: dict[str, Any], every: int) -> dict[str, Any]:
    """The trained run's config: `settings` with no evaluation in the run (eval.every_steps 0: no
    evaluator either, its memory left to the trainer) and a checkpoint every `every` steps, all kept
    (pruning writes after the save, where the watch does not time it), no policy export."""
    steps = int(settings["train"]["max_steps"])
    return {**settings, "eval": {**settings.get("eval", {}), "every_steps": 0},
            "checkpoint": {**settings.get("checkpoint", {}), "every_steps": every, "keep": steps // every + 2, "export_policy": False}}  # fmt: skip


def train_seed(settings: dict[str, Any], folder: Path, every: int, minutes: float) -> dict[str, Any]:
    """`workbench run` of `training_settings(settings)` for at most `minutes`, watched; its record
    (start-up, the saves' seconds, the command's seconds), also written to folder/train.json."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    path = folder.parent / f"{folder.name}.yaml"
    path.write_text(yaml.safe_dump(training_settings(settings, every)))
    with RunWatch(folder, every=0.1) as watch:
        done = workbench_run(path, folder, extra=["--max-minutes", f"{minutes:g}"], check=False, timeout=minutes * 60 + 3600)
    if done.error and not (folder / "metrics.jsonl").exists():
        raise SystemExit(f"{folder.name}: `workbench run` failed: {done.error}")
    record = {"startup_s": startup_seconds(watch.rows), "saves_s": {str(k): v for k, v in save_seconds(watch.saves).items()},
              "command_s": done.wall_s, "error": done.error, "minutes": minutes, "every": every}  # fmt: skip
    (folder / "train.json").write_text(json.dumps(record, indent=1))
    return record


def training_rows(folder: Path) -> list[dict[str, Any]]:
    """The run's trained-step rows (an evaluation row, from a run made with evaluation on, left out)."""
    from workbench.tracking.sink import read_jsonl

    return [r for r in read_jsonl(folder / "metrics.jsonl") if is_training_row(r)]


# --- scoring -------------------------------------------------------------------------------------
def score_checkpoint(settings: dict[str, Any], model_path: str, step: int) -> tuple[float, float]:
    """(pass rate, its standard error) of the model folder `model_path` (a GGUF or Hugging Face
    folder) on `settings`' task, sampled by the vLLM generator as a run's own evaluation at `step`
    samples it: `eval.num_prompts` validation prompts x `eval.samples_per_prompt`, seeded with the
    seed + step. One engine per call (in this process), shut down after."""
    return score_rows(settings, model_path, step)[:2]


def score_rows(settings: dict[str, Any], model_path: str, step: int) -> tuple[float, float, dict[str, float]]:
    """`score_checkpoint` with every numeric figure the evaluation returned (val/*, env/*)."""
    scorer = SeedScorer(settings, None, model_path=model_path)
    try:
        figures = numbers(scorer.sample(None, step))
    finally:
        scorer.close()
    return figures["val/pass_rate"], figures.get("val/pass_rate_se", 0.0), figures


def seed_sampling(seed: int) -> None:
    """Seed the sampling of the engine in this process: the generator sends no per-request seed (it
    would put vLLM's sampler on a per-request loop), so vLLM samples from torch's global generator,
    whose state would otherwise carry over from the engine's warm-up and every earlier evaluation.
    With it, one checkpoint's samples depend on its weights and `seed` alone, in a fresh engine or a
    reused one."""
    import torch

    torch.manual_seed(seed)


def numbers(result: dict[str, Any]) -> dict[str, float]:
    """An evaluation's numeric figures (val/*, env/*), without its samples."""
    return {k: float(v) for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class SeedScorer:
    """One vLLM engine for every scoring of a seed's run: the base model at step 0, then each
    checkpoint's policy pushed into the same engine as the trainer pushes it (engine/weights.
    policy_push: the compute dtype, the FP32 head kept), where an exported folder per checkpoint
    started an engine per checkpoint (~20 s of start-up and ~10 s of export of ~65 s). A LoRA run's
    checkpoints go through the export (`score_rows`)."""

    def __init__(self, settings: dict[str, Any], folder: Optional[Path], model_path: Optional[str] = None):
        """`folder`: the run whose checkpoints are scored; `model_path`: the engine's model in place
        of the config's (a folder scored as it is, `score_rows`)."""
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: no child to outlive it
        from workbench.config import run_config_from_dict

        self.settings, self.folder = settings, folder
        engine = {"generation.backend": "vllm", **({"model.path": str(model_path)} if model_path is not None else {})}
        self.cfg = run_config_from_dict(settings, engine)
        self.gen: Any = None
        self.model: Any = None  # the run's model, refilled with each checkpoint's weights

    def _weights(self, step: int) -> Any:
        from workbench.engine.model.devices import trainer_precision
        from workbench.engine.weights import policy_push
        from workbench.runs.export import load_policy

        self.model = load_policy(self.folder, step, self.model)
        return policy_push(self.model, trainer_precision(self.cfg.model.dtype, self.gen.device).compute, self.cfg.recipe.fp32_head)

    def sample(self, weights: Any, step: int, keep_samples: int = 0) -> dict[str, Any]:
        """The evaluation at `step` of the engine's model, `weights` pushed into it first (None: as it
        is), as the generator returns it (the first `keep_samples` completions under SAMPLES_KEY)."""
        c = self.cfg
        seed_sampling(c.seed + step)
        return self._engine().evaluate(weights, step, num_prompts=c.eval.num_prompts, k=c.eval.samples_per_prompt,
                                       seed=c.seed + step, keep_samples=keep_samples)  # fmt: skip

    def evaluate(self, step: int, keep_samples: int = 0) -> dict[str, Any]:
        """`sample` at `step` of the run's checkpoint (0: the base model)."""
        self._engine()
        return self.sample(self._weights(step) if step else None, step, keep_samples)

    def _engine(self) -> Any:
        from workbench.engine.rollout.vllm.backend import VllmGenerator
        from workbench.engine.run.actors import generator_parts

        if self.gen is None:
            self.gen = VllmGenerator(**generator_parts(self.cfg), rank=0)
        return self.gen

    def score(self, step: int) -> dict[str, float]:
        """Every numeric figure of the evaluation at `step`."""
        if self.cfg.model.lora is not None:
            return score_rows(self.settings, self._exported(step), step)[2]
        return numbers(self.evaluate(step))

    def _exported(self, step: int) -> str:
        from workbench.runs.export import export_policy

        return self.settings["model"]["path"] if step == 0 else str(export_policy(self.folder, self.folder / f"scored-step{step}", step=step).out)

    def close(self) -> None:
        if self.gen is not None:
            self.gen.shutdown()
            self.gen = None


def scored_steps(folder: Path) -> dict[int, dict[str, float]]:
    """The steps already scored (folder/scores.jsonl): step -> its figures."""
    path = folder / "scores.jsonl"
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {int(r["step"]): r for r in rows}


def score_seed(settings: dict[str, Any], folder: Path, keep: bool) -> dict[int, dict[str, float]]:
    """Score step 0 and each checkpoint of the run in `folder` not scored yet (appended to
    folder/scores.jsonl); a scored checkpoint is removed unless `keep`. Returns every step's figures."""
    from workbench.runs.checkpoint import CheckpointStore

    done = scored_steps(folder)
    store = CheckpointStore(folder / "checkpoints")
    todo = [0, *store.steps()] if (folder / "checkpoints").exists() else [0]
    scorer = SeedScorer(settings, folder)
    try:
        for step in [s for s in todo if s not in done]:
            t0 = time.perf_counter()
            figures = scorer.score(step)
            done[step] = {"step": step, **figures, "score_seconds": time.perf_counter() - t0}
            with (folder / "scores.jsonl").open("a") as f:
                f.write(json.dumps(done[step]) + "\n")
            print(f"  {folder.name} step {step}: pass rate {figures['val/pass_rate']:.3f} "
                  f"(SE {figures.get('val/pass_rate_se', 0.0):.3f}), scored in {done[step]['score_seconds']:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
            shutil.rmtree(folder / f"scored-step{step}", ignore_errors=True)
            if step and not keep:
                shutil.rmtree(folder / "checkpoints" / f"step_{step:06d}", ignore_errors=True)
    finally:
        scorer.close()
    return done


# --- the curve -----------------------------------------------------------------------------------
def scored_curve(rows: list[dict[str, Any]], scores: dict[int, dict[str, float]], saves: dict[int, float],
                 startup_s: float) -> list[dict[str, Any]]:  # fmt: skip
    """One evaluation row per scored step, in step order: its pass rate and SE, the compute the run
    had spent at that step (zero at step 0), and `gain_clock_s`: the start-up plus the run clock at
    the step less the checkpoint saves before it. A scored step without a training row is left out
    (a checkpoint is saved after its step's row)."""
    at = {int(r["step"]): r for r in rows if is_training_row(r)}
    out = []
    for step in sorted(scores):
        if step and step not in at:
            continue
        row = {k: (0.0 if step == 0 else float(at[step].get(k) or 0.0)) for k in COMPUTE_KEYS}
        clock = row["compute/wall_seconds"] - (saves_before(saves, step) if step else 0.0)
        out.append({"step": step, **row, "val/pass_rate": scores[step]["val/pass_rate"],
                    "val/pass_rate_se": scores[step].get("val/pass_rate_se", 0.0),
                    "gain_clock_s": startup_s + max(clock, 0.0)})  # fmt: skip
    return out


def gain_within(curve: list[dict[str, Any]], seconds: float) -> tuple[float, int, float]:
    """(gain, step, seconds): the pass rate at the last scored step whose gain's clock is within
    `seconds`, less step 0's; step 0 itself when none is."""
    inside = [r for r in curve if r["gain_clock_s"] <= seconds] or curve[:1]
    last = inside[-1]
    return float(last["val/pass_rate"]) - float(curve[0]["val/pass_rate"]), int(last["step"]), float(last["gain_clock_s"])


def report_seed(folder: Path, rows: list[dict[str, Any]], curve: list[dict[str, Any]]) -> tuple[Optional[dict], str]:
    """The run report's fit, ceiling check and backtest of the scored curve, written to
    folder/scored/ (its metrics.jsonl: the training rows and the scored ones); (report, its lines),
    or (None, why not)."""
    from workbench.runs.report import print_report, write_report
    from workbench.errors import UserError

    out = folder / "scored"
    out.mkdir(exist_ok=True)
    evals = [{k: v for k, v in r.items() if k != "gain_clock_s"} for r in curve]
    merged = sorted([*rows, *evals], key=lambda r: (int(r["step"]), "val/pass_rate" in r))
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in merged))
    try:
        rep = write_report(out, rows=merged)
    except (UserError, ValueError, RuntimeError) as e:
        return None, f"not fitted: {e}"
    return rep, print_report(rep)


def joint_fit(curves: list[list[dict[str, Any]]]) -> Optional[Any]:
    """All seeds' scored curves fitted jointly on compute/device_hours (None with under 2 seeds)."""
    from workbench.runs.report import fit_curves

    pairs = [([r["compute/device_hours"] for r in c], [r["val/pass_rate"] for r in c]) for c in curves if len(c) >= 2]
    return fit_curves(pairs) if len(pairs) >= 2 else None


# --- main ----------------------------------------------------------------------------------------
def seed_settings(config: Path, seed: int, overrides: list[str]) -> dict[str, Any]:
    """The config as a dict with `overrides` and the seed applied (validated as `workbench run` would)."""
    import dataclasses

    from workbench.config import load_run_config

    cfg = load_run_config(config, [*overrides, f"seed={seed}"])
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def run_one(config: Path, seed: int, a: argparse.Namespace) -> dict[str, Any]:
    """Train (unless trained), score, fit one seed; its figures."""
    settings = seed_settings(config, seed, a.overrides)
    folder = Path(a.out).resolve() / f"{config.stem}__seed{seed}"
    record = json.loads((folder / "train.json").read_text()) if (folder / "train.json").exists() else None
    if record is None:
        shutil.rmtree(folder, ignore_errors=True)  # a half-trained seed starts again (the watch reads this run's saves only)
        print(f"{folder.name}: training for at most {a.minutes:g} min, a checkpoint every {a.every} steps", file=sys.stderr, flush=True)
        record = train_seed(settings, folder, a.every, a.minutes)
    scores = score_seed(settings, folder, a.keep_checkpoints)
    rows = training_rows(folder)
    saves = {int(k): float(v) for k, v in (record.get("saves_s") or {}).items()}
    startup = record.get("startup_s")
    curve = scored_curve(rows, scores, saves, float(startup or 0.0))
    rep, lines = report_seed(folder, rows, curve)
    result = {"seed": seed, "folder": str(folder), "startup_s": startup, "saves_s": sum(saves.values()),
              "steps": max((int(r["step"]) for r in rows), default=0), "curve": curve, "report_lines": lines,
              "A": rep["A"] if rep else None, "A_ci": rep["A_ci"] if rep else None, "B": rep["B"] if rep else None,
              "backtest": rep["backtest"] if rep else None, "note": record.get("note", "")}  # fmt: skip
    if a.gain is not None:
        g, step, at = gain_within(curve, a.within * 60)
        result["gain"] = {"gain": g, "step": step, "seconds": at, "target": a.gain, "ok": g >= a.gain}
    if a.curves is not None:
        result["csv"] = str(write_curve(folder / "scored", curve, a.curves, f"{config.stem}__seed{seed}"))
    return result


def print_seed(r: dict[str, Any], a: argparse.Namespace) -> None:
    c = r["curve"]
    points = "  ".join(f"{p['step']}: {p['val/pass_rate']:.3f}@{p['gain_clock_s'] / 60:.1f}m" for p in c)
    start = "not measured (taken as 0)" if r["startup_s"] is None else f"{r['startup_s']:.0f} s"
    print(f"seed {r['seed']}: {r['steps']} steps; start-up {start}, checkpoint saves {r['saves_s']:.0f} s (out of the clock)")
    print(f"    scored (step: pass rate @ minutes on the gain's clock): {points}")
    if r.get("note"):
        print(f"    note: {r['note']}")
    if "gain" in r:
        g = r["gain"]
        print(f"    gain within {a.within:g} min: {g['gain']:+.3f} (step {g['step']}, {g['seconds'] / 60:.1f} min): "
              f"{'OK' if g['ok'] else 'MISSED'} (target {g['target']:+.2f})")
    for line in r["report_lines"].splitlines():
        print(f"    {line}")
    if "csv" in r:
        print(f"    curve: {r['csv']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "smollm2-tools.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--minutes", type=float, default=40.0, help="each seed's training, at most (workbench run --max-minutes)")
    ap.add_argument("--every", type=int, default=2, help="a checkpoint, scored after the run, every this many steps")
    ap.add_argument("--out", default="runs/bench-env", help="run folders go to OUT/<config>__seed<N>")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--gain", type=float, default=None, help="the pass rate must gain this much within --within minutes")
    ap.add_argument("--within", type=float, default=45.0, help="the window of --gain, from the command's start")
    ap.add_argument("--curves", type=Path, default=None, help="write each seed's scored curve CSV (and metrics) here")
    ap.add_argument("--keep-checkpoints", action="store_true", help="keep each checkpoint after it is scored")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    results = [run_one(a.config, seed, a) for seed in a.seeds]
    joint = joint_fit([r["curve"] for r in results])
    if a.json:
        print(json.dumps({"config": str(a.config), "seeds": results,
                          "joint": None if joint is None else {"A": joint.A, "A_ci": list(joint.A_ci), "B": joint.B,
                                                               "B_ci": list(joint.B_ci), "C_mid": joint.C_mid}},
                         default=lambda o: None if isinstance(o, float) and not math.isfinite(o) else str(o)))  # fmt: skip
        return
    for r in results:
        print_seed(r, a)
    if joint is not None:
        print(f"all seeds jointly: A = {joint.A:.3f} [{joint.A_ci[0]:.3f}, {joint.A_ci[1]:.3f}]  "
              f"B = {joint.B:.2f} [{joint.B_ci[0]:.2f}, {joint.B_ci[1]:.2f}]  C_mid = {joint.C_mid:.3g} device-hours")


if __name__ == "__main__":
    main()
