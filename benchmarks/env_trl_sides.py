"""The two sides of benchmarks/bench_env_vs_trl.py: their settings, their runs, their scores.

    (not run on its own: bench_env_vs_trl.py imports it)
    .venv/bin/python -m pytest tests/test_bench_env_vs_trl.py     # its pure parts, no model, no Ray

- The settings: `run_settings` (the workbench run config of a seed: configs/smollm2-tools.yaml with the
  bench's model folder, chat template, rows, batch, budgets and scoring size) and `trl_spec` (what
  vs_trl_env.py needs, every setting read from that run config: `micro_batch`, `completion_budget`,
  `budget_seconds`); `train_rows`, the rows TRL trains on; `workbench_renderer` and `longest_prompt`,
  the workbench's prompt ids that `check_prompts` compares with TRL's.
- The runs: `run_trl` (vs_trl_env.py in a child process) and `run_workbench` (`workbench run`, watched
  and asked to stop by `stop_at_budget` once its training clock reaches the budget), each read back
  from `--work` instead when its record is there.
- The scores: `ScoreBook` (one scorer for both sides, its results kept in scores.jsonl), a side's
  points cut at its budget (`within_budget`), an `EnvSide` of figures per seed and side.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from bench_vs_trl import (  # benchmarks/ is the script's folder
    INSTALL_TRL,
    Point,
    RunWatch,
    Side,
    is_training_row,
    policy_fp32,
    save_seconds,
    saves_before,
    startup_seconds,
    step_clock,
    workbench_points,
)
from cli_run import last_line, run_env, workbench_run

HERE = Path(__file__).resolve().parent

CHECK_ROWS = 4  # training rows whose prompt ids TRL and the workbench must render alike
WORKBENCH_BACKSTOP_MIN = 15.0  # --max-minutes beyond the budget: the run's own deadline counts its start-up
TRL_OVERRUN_S = 3 * 3600.0  # TRL's child is stopped this long after its budget (its start-up and last step inside)
LOG_KEYS = ("rewards/CalculatorEnv/mean", "env/tool_calls_mean", "env/turns_mean", "env/truncated",
            "env/episode_tokens_mean", "train/pass_rate")  # fmt: skip


@dataclass
class EnvSide(Side):
    """A side's figures (bench_vs_trl.Side) and what this bench adds."""

    steps: int = 0  # optimizer steps done (past the budget's too)
    budget_s: float = 0.0  # its training clock's budget
    startup_s: Optional[float] = None  # before its training clock began
    prompt_check: Optional[dict[str, Any]] = None  # TRL's prompt ids against the workbench's (the trl side)
    log: list[dict[str, Any]] = field(default_factory=list)  # a few training figures per step
    note: str = ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "EnvSide":
        return cls(**{**d, "points": [Point(**p) for p in d.get("points", [])]})


# --- the settings and the rows ----------------------------------------------------------------------
def qwen_template() -> Path:
    """TRL's chat_templates/qwen2_5.jinja, from the installed trl package (not imported)."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"bench_env_vs_trl: TRL is not installed; {INSTALL_TRL}")
    for folder in spec.submodule_search_locations:
        if (path := Path(folder) / "chat_templates" / "qwen2_5.jinja").is_file():
            return path
    raise SystemExit("bench_env_vs_trl: the installed trl has no chat_templates/qwen2_5.jinja (TRL 1.16 has)")


def micro_batch(batch: int, micro_batch_tokens: int, sequence_tokens: int) -> int:
    """TRL's sequences per forward/backward: the largest divisor of `batch` whose sequences of
    `sequence_tokens` fit `micro_batch_tokens` (the workbench's train.micro_batch_tokens), at least 1."""
    fit = max(1, micro_batch_tokens // max(1, sequence_tokens))
    return max(d for d in range(1, batch + 1) if batch % d == 0 and d <= fit)


def completion_budget(episode_tokens: int, longest_prompt: int, turn_tokens: int) -> int:
    """TRL's max_completion_length from the workbench's env.max_episode_tokens (prompt included): the
    room the longest prompt leaves, so that no TRL episode gets more than the workbench's budget. It
    must hold one turn."""
    room = episode_tokens - longest_prompt
    if room < turn_tokens:
        raise SystemExit(f"bench_env_vs_trl: --episode-tokens {episode_tokens} leaves {room} tokens after the longest "
                         f"prompt ({longest_prompt} tokens), less than one turn of --tokens {turn_tokens}")  # fmt: skip
    return room


def run_settings(a: argparse.Namespace, model: Path, data: Path, template: Path, seed: int) -> dict:
    """The workbench run config of `seed` as the scorer reads it: `--config` (configs/smollm2-tools.yaml)
    with the bench's model folder (fp32), chat template, rows, batch, budgets and scoring size. The
    run itself gets `bench_env_learning.training_settings` of it; TRL's settings are read from it too."""
    base = yaml.safe_load(Path(a.config).read_text())
    s = copy.deepcopy(base)
    s.update(name="env-vs-trl", seed=seed)
    s["model"] = {**base.get("model", {}), "path": str(model), "dtype": "float32", "cache_dir": a.cache,
                  "chat_template": str(template)}  # fmt: skip
    s["task"] = {**base.get("task", {}), "name": "env", "env": a.env, "path": str(data)}
    s["generation"] = {**base.get("generation", {}), "backend": a.backend, "max_new_tokens": a.tokens, "temperature": 1.0}
    s["env"] = {**base.get("env", {}), "max_turns": a.turns, "max_episode_tokens": a.episode_tokens}
    s["train"] = {**base.get("train", {}), "prompts_per_step": a.prompts, "generations_per_prompt": a.generations,
                  "lr": a.lr, "warmup_steps": 0, "max_steps": a.max_steps}  # fmt: skip
    s["eval"] = {**base.get("eval", {}), "num_prompts": a.eval_prompts, "samples_per_prompt": a.eval_samples}
    s["tracking"] = {"mlflow": False}
    return s


def trl_spec(a: argparse.Namespace, settings: dict, out: Path, longest_prompt: int, train_rows: list[dict]) -> dict:
    """What vs_trl_env.train_trl_env needs, every setting read from the workbench run's config."""
    from workbench.config import run_config_from_dict

    cfg = run_config_from_dict(settings)
    t, env = cfg.train, cfg.env
    batch = t.prompts_per_step * t.generations_per_prompt
    completion = completion_budget(env.max_episode_tokens, longest_prompt, cfg.generation.max_new_tokens)
    return {"model": cfg.model.path, "chat_template": settings["model"]["chat_template"], "env": cfg.task.env,
            "out": str(out), "train": train_rows, "check_rows": train_rows[:CHECK_ROWS], "seed": cfg.seed,
            "max_steps": t.max_steps, "budget_s": budget_seconds(a, "trl"), "prompts": t.prompts_per_step,
            "generations": t.generations_per_prompt, "turn_tokens": cfg.generation.max_new_tokens,
            "max_turns": env.max_turns, "completion_tokens": completion,
            "micro_batch": micro_batch(batch, t.micro_batch_tokens, longest_prompt + completion),
            "lr": t.lr, "weight_decay": t.weight_decay, "adam_eps": t.adam_eps, "adam_betas": list(t.adam_betas),
            "grad_clip": t.grad_clip, "eps_max": cfg.recipe.loss.eps_max, "save_steps": a.trl_every, "threads": a.threads}  # fmt: skip


def budget_seconds(a: argparse.Namespace, side: str) -> float:
    """A side's training clock budget: --minutes, or --trl-minutes for TRL's."""
    return 60.0 * (a.trl_minutes if side == "trl" else a.minutes)


def train_rows(settings: dict, with_val: bool = False) -> list[dict]:
    """The workbench task's training split (`with_val`: its validation rows after it), each row as
    `reset(**row)` gets it: TRL's dataset rows."""
    from workbench.config import run_config_from_dict
    from workbench.tasks.base import load_task
    from workbench.tasks.env.task import env_row

    task = load_task(run_config_from_dict(settings).task)
    return [env_row(ex) for ex in [*task.train, *(task.val if with_val else [])]]


def workbench_renderer(settings: dict) -> Callable[[list[dict]], dict[str, Any]]:
    """rows -> {"prompt_ids": [...], "suffix_ids": [...]} as the workbench's episodes render them
    (tasks/env: the model folder's tokenizer with model.chat_template, the tools' schemas, reset's
    text appended), and `longest` over every row of the task."""
    from workbench.config import run_config_from_dict
    from workbench.engine.model.hf_dir import load_tokenizer
    from workbench.tasks.env.factory import load_env_factory
    from workbench.tasks.env.render import env_suffix_ids, prompt_ids, prompt_messages, template_format, tool_result_messages
    from workbench.tasks.env.tools import ToolResult

    cfg = run_config_from_dict(settings)
    tok = load_tokenizer(cfg.model.path, chat_template=True, template=cfg.model.chat_template)
    env = load_env_factory(cfg.task.env)
    fmt = template_format(tok)
    system = cfg.task.system_prompt or ""

    def render(rows: list[dict]) -> dict[str, Any]:
        ids = []
        for row in rows:
            observation = env.new().reset(**row)
            messages = prompt_messages(row.get(cfg.task.prompt_key), observation, env.schemas, fmt, system)
            ids.append(prompt_ids(tok, messages, env.schemas, fmt))
        suffix = env_suffix_ids(tok, tool_result_messages([ToolResult(name="add", content="68")], fmt), env.schemas, fmt,
                                (tok.eos_token_id,))  # fmt: skip
        return {"prompt_ids": ids, "suffix_ids": suffix}

    return render


def longest_prompt(settings: dict, render: Callable[[list[dict]], dict[str, Any]]) -> int:
    """The longest prompt in tokens (tools' schema included) over all of the task's rows."""
    return max(len(p) for p in render(train_rows(settings, with_val=True))["prompt_ids"])


# --- the clock and the prompt check (pure) ---------------------------------------------------------
def within_budget(points: list[Point], budget_s: float) -> list[Point]:
    """A side's points up to the first whose training clock is at or past `budget_s` (both sides stop
    after the step that reaches the budget; a step after that one is not the budget's)."""
    out = []
    for p in sorted(points, key=lambda p: p.step):
        out.append(p)
        if p.wall_s >= budget_s:
            break
    return out


def budget_step(rows: list[dict[str, Any]], saves: dict[int, float], budget_s: float) -> Optional[int]:
    """The first trained step whose training clock (the run clock less the saves before it) is at
    least `budget_s`, from the workbench's rows as written; None while none is."""
    clock = step_clock(rows)
    return next((s for s in sorted(clock) if clock[s] - saves_before(saves, s) >= budget_s), None)


def first_difference(a: list[int], b: list[int]) -> Optional[int]:
    """The first position where two id lists differ (the shorter one's length when one is a prefix
    of the other); None when they are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def check_prompts(ours: dict[str, Any], trl: Optional[dict[str, Any]]) -> dict[str, Any]:
    """TRL's prompt and suffix ids (vs_trl_env.prompt_check) against the workbench's: per row the
    first difference (None: identical), and whether all are identical."""
    if not trl or trl.get("error"):
        return {"identical": None, "error": (trl or {}).get("error") or "TRL made no prompt check"}
    rows = [first_difference(w, t) for w, t in zip(ours["prompt_ids"], trl["prompt_ids"])]
    suffix = first_difference(ours["suffix_ids"], trl["suffix_ids"])
    same = len(ours["prompt_ids"]) == len(trl["prompt_ids"]) and all(d is None for d in rows) and suffix is None
    return {"identical": same, "rows": len(rows), "first_difference": rows, "suffix_first_difference": suffix,
            "prompt_tokens": [len(p) for p in ours["prompt_ids"]], "trl_prompt_tokens": [len(p) for p in trl["prompt_ids"]],
            "suffix_ids": ours["suffix_ids"], "trl_suffix_ids": trl["suffix_ids"], "error": None}  # fmt: skip


def step_log(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The workbench's training rows trimmed to LOG_KEYS (one a step)."""
    return [{"step": int(r["step"]), **{k: r[k] for k in LOG_KEYS if k in r}} for r in rows if is_training_row(r)]


# --- scoring: one scorer, its results kept ---------------------------------------------------------
class ScoreBook:
    """(pass rate, SE) per (model, seed, step, scoring settings) via `score` (bench_env_learning's
    score_checkpoint), kept in `path` (JSONL) so that a resumed bench scores nothing twice. Step 0 is
    labelled "base": the same model on both sides of a seed, scored once."""

    def __init__(self, path: Path, score: Callable[[dict, str, int], tuple[float, float]]):
        self.path, self.score = Path(path), score
        self.done: dict[str, tuple[float, float]] = {}
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                if line.strip():
                    r = json.loads(line)
                    self.done[r["key"]] = (float(r["rate"]), float(r["se"]))

    @staticmethod
    def key(label: str, settings: dict, step: int) -> str:
        return json.dumps([label, settings["seed"], step, settings["eval"], settings["task"], settings["env"],
                           settings["generation"]["max_new_tokens"]], sort_keys=True)  # fmt: skip

    def get(self, label: str, settings: dict, step: int, model: Callable[[], str]) -> tuple[float, float]:
        """The score of `label`'s step; `model()` gives the folder to score when it is not kept yet."""
        k = self.key("base" if step == 0 else label, settings, step)
        if k not in self.done:
            t0 = time.perf_counter()
            rate, se = self.score(settings, settings["model"]["path"] if step == 0 else model(), step)
            self.done[k] = (float(rate), float(se))
            with self.path.open("a") as f:
                f.write(json.dumps({"key": k, "rate": rate, "se": se}) + "\n")
            say(f"  {label} s{settings['seed']} step {step}: pass rate {rate:.3f} (SE {se:.3f}), "
                f"scored in {time.perf_counter() - t0:.0f} s")  # fmt: skip
        return self.done[k]


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- the sides --------------------------------------------------------------------------------------
def run_trl(a: argparse.Namespace, settings: dict, work: Path, book: ScoreBook, longest: int, ours: Callable[[list], dict]) -> EnvSide:
    """TRL in a child process (vs_trl_env.py) unless its record is in `work`, then its step 0 and
    checkpoints scored here; written to side.json."""
    seed = int(settings["seed"])
    side, t0 = EnvSide("trl", seed=seed, budget_s=budget_seconds(a, "trl")), time.perf_counter()
    folder = work / f"trl-s{seed}"
    record_path = folder / "result.json"
    got = json.loads(record_path.read_text()) if record_path.is_file() else {}
    if not got or got.get("error"):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        rows = train_rows(settings)
        spec = trl_spec(a, settings, folder / "out", longest, rows)
        (folder / "spec.json").write_text(json.dumps(spec))
        with open(folder / "log.txt", "w") as log:
            try:  # the budget, then the step that reached it: a TRL step at full size takes about half an hour
                proc = subprocess.run([sys.executable, str(HERE / "vs_trl_env.py"), str(folder / "spec.json"), str(record_path)],
                                      env=run_env(), stdout=log, stderr=subprocess.STDOUT, timeout=side.budget_s + TRL_OVERRUN_S)  # fmt: skip
            except subprocess.TimeoutExpired:
                side.error = f"TRL ran past its budget + {TRL_OVERRUN_S / 3600:g} h (log: {folder / 'log.txt'})"
                side.total_s = time.perf_counter() - t0
                return side
        got = json.loads(record_path.read_text()) if record_path.is_file() else {}
        got["command_s"] = time.perf_counter() - t0
        if proc.returncode != 0 or not got.get("seconds") or got.get("error"):
            said = got.get("error") or last_line((folder / "log.txt").read_text(errors="replace"))
            side.error, side.total_s = f"{said} (log: {folder / 'log.txt'})", time.perf_counter() - t0
            return side
        got["prompt_check"] = check_prompts(ours(spec["check_rows"]), got.get("prompt_check"))
        record_path.write_text(json.dumps(got))
    seconds = {int(k): float(v) for k, v in got["seconds"].items()}
    t_score = time.perf_counter()
    points = []
    for step, path in sorted({0: settings["model"]["path"], **{int(k): v for k, v in got["checkpoints"].items()}}.items()):
        rate, se = book.get("trl", settings, step, lambda path=path: path)
        points.append(Point(step, rate, se, seconds.get(step, 0.0)))
        if step and not a.keep_checkpoints:
            shutil.rmtree(path, ignore_errors=True)  # 0.5 GB in fp32: scored, no longer needed
    side.points = within_budget(points, side.budget_s)
    side.scoring_s = time.perf_counter() - t_score
    side.steps = int(got.get("steps") or max(seconds, default=0))
    side.train_s = seconds[max(seconds)] if seconds else 0.0
    side.saves_s = float(got.get("saves_s") or 0.0)
    side.startup_s = got.get("startup_s")
    side.prompt_check, side.log = got.get("prompt_check"), got.get("log") or []
    side.total_s = float(got.get("command_s") or 0.0) + side.scoring_s
    return side


def stop_at_budget(watch: RunWatch, folder: Path, budget_s: float, done: threading.Event, every: float = 1.0) -> None:
    """Ask the watched `workbench run` to stop (after the step in flight, with a checkpoint) once its
    training clock reaches `budget_s`: the workbench's side of TRL's budget callback."""
    from workbench.runs.follow import STOP_FILE
    from workbench.runs.stop_request import request_stop

    while not done.wait(every):
        try:
            rows, saves = [r for _, r in list(watch.rows)], save_seconds(dict(watch.saves))
        except RuntimeError:  # the watch changed them as they were copied: the next look
            continue
        step = budget_step(rows, saves, budget_s)
        if step is not None:
            request_stop(folder / STOP_FILE, f"bench_env_vs_trl: the training clock reached the budget ({budget_s:.0f} s) at step {step}")
            return


def run_workbench(a: argparse.Namespace, settings: dict, work: Path, book: ScoreBook) -> EnvSide:
    """`workbench run` of the settings (bench_env_learning.training_settings: no evaluation in the run, a
    checkpoint every --every steps), watched and stopped at the budget, unless its record is in
    `work`; then its step 0 and checkpoints scored here; written to side.json."""
    from bench_env_learning import training_settings

    from workbench.runs.checkpoint import CheckpointStore
    from workbench.tracking.sink import read_jsonl

    seed = int(settings["seed"])
    side, t0 = EnvSide("workbench", seed=seed, budget_s=budget_seconds(a, "workbench")), time.perf_counter()
    folder, record_path = work / f"workbench-s{seed}", work / f"workbench-s{seed}.run.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else None
    if record is None:
        shutil.rmtree(folder, ignore_errors=True)  # the watch reads this run's checkpoints only
        config = work / f"workbench-s{seed}.yaml"
        config.write_text(yaml.safe_dump(training_settings(settings, a.every)))  # no evaluation in the run, checkpoints kept
        stop = threading.Event()
        with RunWatch(folder, every=0.1) as watch:
            stopper = threading.Thread(target=stop_at_budget, args=(watch, folder, side.budget_s, stop), daemon=True)
            stopper.start()
            try:
                done = workbench_run(config, folder, extra=["--max-minutes", f"{a.minutes + WORKBENCH_BACKSTOP_MIN:g}"],
                                     check=False, timeout=side.budget_s + 3600)  # fmt: skip
            except subprocess.TimeoutExpired:
                side.error, side.total_s = "workbench run went on an hour past its budget", time.perf_counter() - t0
                return side
            finally:
                stop.set()
        if done.error and not read_jsonl(folder / "metrics.jsonl"):
            side.error, side.total_s = f"workbench run failed: {done.error}", time.perf_counter() - t0
            return side
        record = {"saves": {str(k): v for k, v in save_seconds(watch.saves).items()}, "startup_s": startup_seconds(watch.rows),
                  "command_s": done.wall_s, "error": done.error, "checkpoints": CheckpointStore(folder / "checkpoints").steps()}  # fmt: skip
        record_path.write_text(json.dumps(record))
    rows = read_jsonl(folder / "metrics.jsonl")
    saves = {int(k): float(v) for k, v in record["saves"].items()}
    t_score = time.perf_counter()
    scores = {0: book.get("workbench", settings, 0, lambda: settings["model"]["path"])}
    for step in record["checkpoints"]:
        dest = folder / f"scored-step{step}"
        scores[step] = book.get("workbench", settings, step, lambda step=step, dest=dest: str(policy_fp32(folder, step, dest)))
        shutil.rmtree(dest, ignore_errors=True)
        if not a.keep_checkpoints:
            shutil.rmtree(folder / "checkpoints" / f"step_{step:06d}", ignore_errors=True)  # 1.7 GB each
    side.scoring_s = time.perf_counter() - t_score
    clock = step_clock(rows)
    scored = {s: v for s, v in scores.items() if s == 0 or s in clock}  # a checkpoint is saved after its step's row
    side.points = within_budget(workbench_points(rows, saves, scored), side.budget_s)
    last = max(clock, default=0)
    side.steps = last
    side.saves_s = saves_before(saves, last) if clock else 0.0
    side.train_s = clock[last] - side.saves_s if clock else 0.0
    side.startup_s, side.log = record.get("startup_s"), step_log(rows)
    side.note = f"the run ended with an error: {record['error']}" if record.get("error") else ""
    side.total_s = float(record.get("command_s") or 0.0) + side.scoring_s
    return side
