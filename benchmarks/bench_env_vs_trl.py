"""TRL's GRPOTrainer with `environment_factory` against `workbench run` on one environment: the time to the same pass rate.

    .venv/bin/python -m pip install --no-deps trl==1.16.0       # TRL for this bench only (the `bench` extra)
    .venv/bin/python benchmarks/bench_env_vs_trl.py               # full size: seeds 0 and 1, 40 min a side (~3 h)
    .venv/bin/python benchmarks/bench_env_vs_trl.py --trl-minutes 120 --trl-every 1   # more of TRL's ~20 min steps (+~1.5 h a seed)
    .venv/bin/python benchmarks/bench_env_vs_trl.py --check-prompts   # only TRL's prompt ids against ours (~30 s)
    .venv/bin/python benchmarks/bench_env_vs_trl.py --seeds 0 --minutes 2 --prompts 1 --generations 2 --tokens 8 \\
        --turns 2 --eval-prompts 2 --eval-samples 1 --work /tmp/envtrl/try   # a quick try (~20 min)
    .venv/bin/python benchmarks/bench_env_vs_trl.py --json        # one JSON object (settings, versions, machine)

Issue 51's "Beside TRL" on a multi-turn environment, as benchmarks/bench_vs_trl.py is for single-turn
sums (whose clock, watch, scoring order and figures this bench imports). The sides' settings, runs and
scoring are in benchmarks/env_trl_sides.py, TRL's child process in benchmarks/vs_trl_env.py. Both
sides train on:

- **The environment**: `workbench.envs.calculator:CalculatorEnv`, a TRL `environment_factory` class
  (tools add, subtract, multiply, submit; get_reward 1.0 when the submitted answer is right),
  unchanged on both sides: TRL gets the class, the workbench `task.env` naming it.
- **The rows**: `python -m workbench.envs.calculator OUT.jsonl 2000 0 --few-shot` (written into
  `--work`; `--data` takes another file): message-list prompts that open with two worked episodes.
  The workbench task splits them (`task.num_val` held out, shuffled by the seed); TRL trains on that
  training split's rows exactly (every column, as the workbench's `reset(**row)` gets them).
- **The model**: SmolLM2-135M-Instruct (configs/smollm2-tools.yaml's GGUF), converted once into an fp32
  Hugging Face folder in `--cache` (`gguf_folder`); both sides load that folder and train fp32
  weights in fp32 (TRL: `use_cpu=True, bf16=False`; the workbench: `model.dtype: float32`, whose
  generators then compute fp32 too). configs/smollm2-tools.yaml itself trains with `model.dtype:
  bfloat16` (bf16 compute over fp32 master weights; this CPU has AVX512-BF16): the bench keeps both
  sides in the same arithmetic, so its workbench steps are slower than that config's.
- **The chat template**: TRL's own `trl/chat_templates/qwen2_5.jinja` on both sides (the workbench:
  `model.chat_template: <that file>`). TRL refuses SmolLM2's own template for `environment_factory`:
  it has no tool role, so it fails TRL's `supports_tool_calling` probe, and TRL has no response
  parser for it ("Unrecognized chat template"). SmolLM2's tokenizer has Qwen's `<|im_start|>` /
  `<|im_end|>` tokens, so Qwen2.5's template (recognised by identity: its text unchanged) fits it,
  and then both sides render the same prompt: Qwen's default system line, the tools' schemas in
  `<tools>`, the few-shot turns, the question; tool results as `tool` messages (`<tool_response>` in a
  user turn). Every TRL run checks this: TRL's ids for 4 training rows and its tool-result suffix are
  compared with the workbench's (`prompt_check` in the figures; `--check-prompts` does only that).
- **The batch and the budgets**: `--prompts` x `--generations` episodes per optimizer step (8 x 8);
  `--lr` (the config's 3e-5, constant, no warm-up); AdamW settings and the gradient clip of the
  workbench's `train:` defaults; temperature 1; CISPO capped at the scalerl recipe's eps_max (TRL's
  `epsilon_high`), batch-normalised advantages, no KL. The episode budgets, mapped:

      workbench                                   TRL 1.16 GRPOConfig
      generation.max_new_tokens = --tokens (48)   generation_kwargs={"max_new_tokens": 48}: each generation call
      env.max_turns = --turns (3)                 max_tool_calling_iterations = --turns - 1 (k rounds: k + 1 calls)
      env.max_episode_tokens = --episode-tokens   max_completion_length = --episode-tokens - the longest prompt
        (1280: prompt included)                     (sampled + tool tokens after the prompt; no episode gets more
                                                    room than ours, a shorter prompt's a few tokens less)
      train.micro_batch_tokens (4096)             per_device_train_batch_size = the largest divisor of the batch
                                                    whose sequences of --episode-tokens fit it; the rest is
                                                    gradient_accumulation_steps (one optimizer step a batch)

  At the defaults no episode reaches the whole-episode budget (3 x 48 sampled tokens and two tool
  results after a ~900-token prompt): the turn and token caps are the same on both sides.

The clocks (bench_vs_trl's fair clock). Each side gets `--minutes` of **training clock**: TRL's from
`on_train_begin` (vs_trl.step_clock), the workbench's its run clock (`compute/wall_seconds`); start-up
out of both, the checkpoint saves taken out of both (TRL's by its callback, the workbench's by
watching its `checkpoints/` folder: bench_vs_trl.RunWatch), no evaluation inside either (the
workbench's `eval.every_steps: 0`: no evaluator at all, its memory left to the trainer). TRL stops by
a callback after the first step whose clock reaches the budget (that step saved: it ends past the
budget and is kept); the workbench is asked to stop (its `stop_request` file) when its watched clock
does, and checkpoints the step it ends on (`--max-minutes` = the budget + 15 as a backstop: its
deadline counts the start-up). A side's points are its scored checkpoints up to the first at or past
the budget. Each side saves a checkpoint every `--every` steps and at its last step. `--trl-minutes`
and `--trl-every` give TRL a budget and checkpoints of its own (its steps are long: below).

One scorer, after each run, for both sides: `bench_env_learning.score_checkpoint` (the workbench's
vLLM-CPU generator running the episodes on `--eval-prompts` validation rows x `--eval-samples`,
seeded with the seed + step, with `model.chat_template` set, so TRL's `checkpoint-N/` folders and the
workbench's exported checkpoints (`workbench export --step N`, fp32) are rendered alike). Step 0, the
base model, is scored once per seed for both. A scored checkpoint is removed (`--keep-checkpoints`).

Printed per seed and side: each scored point (pass rate, its SE, the training clock at it), the steps
done and seconds per step, the saves out, the start-up and the whole wall time; per seed the time
each side took to the highest pass rate both reached (or `--target`) and the ratio workbench / TRL;
the ratio's spread over the seeds. The sides run one at a time, interleaved by seed (`--sides` order
for each of `--seeds`). Resumable: a side whose `side.json` is in `--work` is read, not rerun; a side
whose run finished (its record written) but was not all scored is scored, not trained again; scores
are kept in `--work`/scores.jsonl.

What differs, and why (docs/concepts/environments.md, "Beside TRL"):
- Generation: TRL's CPU path is transformers' `generate` on the whole batch (each of the 64 episodes
  re-reads its prompt, and every tool round re-reads the whole episode: no prefix cache); the
  workbench runs vLLM-CPU with prefix caching and runs each group's prompt once in the trainer
  (`shared_prompt_hidden`). These are the engines' own ways, and part of what is compared.
- The workbench is asynchronous (the scalerl recipe: PipelineRL, generation `max_ahead_steps` ahead
  of training, zero-variance filtering, No-Positive-Resampling, prompt-level loss aggregation); TRL
  generates and trains in turn, aggregating CISPO over the batch's tokens.
- Threads: TRL uses all of this machine's CPUs (`--threads`); the workbench one CPU for its generator
  and one for its trainer (the config's `resources`).
- Episodes: a call TRL cannot parse ends its episode as text, ours is answered with an error and costs
  a turn; TRL runs the calls of a turn cut at the token cap, ours does not; error texts differ
  (`{'error': ...}` against `Error: ...`); TRL reuses environment instances (`reset`), ours makes one
  per episode. The prompts are drawn in different orders (each side's own sampler, seeded).
- Not compared: TRL with vLLM (`use_vllm`, colocated on a CPU: see bench_vs_trl's `trl-vllm`).

The cost at full size, on this 2-core machine, measured 2026-12-07 with nothing beside it (seed 0,
`--minutes 20 --every 2 --trl-every 1`): TRL's first step of 8 x 8 episodes took 1,215 s (the earlier
extrapolation from a 1 x 2 step beside another run said 20-35 minutes), the workbench's steps 227 s
on average in fp32 (6 in 20 minutes); scoring a checkpoint (32 x 2 episodes, vLLM-CPU) took 62-88 s.
A seed at `--minutes 20` is about 23 min for TRL (its one step, scoring) and 28 for the workbench
(start-up, 20 min, the stop, 4 scorings); at the default 40 minutes, about 1.2 h a seed for both
sides. Disk: 1.7 GB per kept workbench checkpoint and 0.5 GB per TRL one, each removed once scored.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from bench_vs_trl import (  # noqa: E402  (benchmarks/ is the script's folder)
    TARGET_RATIO,
    Point,
    Side,
    schedule,
    seed_list,
    spread,
    time_to_reach,
    versions,
)
from cli_run import last_line, run_env  # noqa: E402
from env_trl_sides import (  # noqa: E402
    CHECK_ROWS,
    EnvSide,
    ScoreBook,
    budget_seconds,
    check_prompts,
    longest_prompt,
    qwen_template,
    run_settings,
    run_trl,
    run_workbench,
    say,
    train_rows,
    trl_spec,
    workbench_renderer,
)

SIDES = ("trl", "workbench")
ENV = "workbench.envs.calculator:CalculatorEnv"
CONFIG = REPO / "configs" / "smollm2-tools.yaml"
NUMBERS = (  # (option, type, default, help): the sizes, budgets and clocks that parse() adds
    ("--minutes", float, 40.0, "each side's training clock budget, per seed"),
    ("--every", int, 2, "a checkpoint (both sides), scored after the run, every this many steps"),
    ("--trl-minutes", float, None, "TRL's budget instead (default: --minutes)"),
    ("--trl-every", int, None, "TRL's checkpoints instead (default: --every)"),
    ("--max-steps", int, 100_000, "steps at most (the budget stops the runs first)"),
    ("--prompts", int, 8, "prompts per step"),
    ("--generations", int, 8, "episodes per prompt (the group)"),
    ("--tokens", int, 48, "most tokens sampled per turn"),
    ("--turns", int, 3, "assistant turns per episode at most (TRL: --turns - 1 tool rounds)"),
    ("--episode-tokens", int, 1280, "an episode's tokens at most, prompt included"),
    ("--lr", float, 3e-5, "the learning rate of both sides (constant)"),
    ("--eval-prompts", int, 32, "validation rows each checkpoint is scored on"),
    ("--eval-samples", int, 2, "episodes per validation row"),
    ("--target", float, None, "the pass rate to time (default: the highest both sides reach)"),
    ("--threads", int, len(os.sched_getaffinity(0)), "TRL's torch threads"),
)


# --- the comparison and the figures (pure) ----------------------------------------------------------
def common_target(trl: list[Point], workbench: list[Point]) -> Optional[float]:
    """The highest pass rate both sides reach: the lower of the two best; None when a side has no point."""
    if not trl or not workbench:
        return None
    return min(max(p.pass_rate for p in trl), max(p.pass_rate for p in workbench))


def compare_env(trl: Side, workbench: Side, target: Optional[float] = None) -> dict[str, Any]:
    """Each side's training clock to `target` (default: the highest pass rate both reach) and the
    ratio workbench / TRL. No ratio where the target is not above step 0's rate (`gained` false:
    nothing learned to time), or where a side never reaches a given target. bench_vs_trl.spread reads it."""
    start = min(trl.points, key=lambda p: p.step).pass_rate  # step 0: the base model, scored once for both
    goal = common_target(trl.points, workbench.points) if target is None else target
    gained = goal is not None and goal > start
    t = time_to_reach(trl.points, goal) if gained else None
    w = time_to_reach(workbench.points, goal) if gained else None
    ratio = w.wall_s / t.wall_s if t is not None and w is not None and t.wall_s > 0 else None
    return {"trl_side": trl.name, "seed": trl.seed, "start": start, "target": goal,
            "target_from": "common" if target is None else "given", "gained": gained,
            "trl_step": None if t is None else t.step, "trl_s": None if t is None else t.wall_s,
            "workbench_step": None if w is None else w.step, "workbench_s": None if w is None else w.wall_s,
            "ratio": ratio, "met": ratio is not None and ratio <= TARGET_RATIO}  # fmt: skip


def comparisons_env(sides: list[Side], target: Optional[float] = None) -> list[dict[str, Any]]:
    """`compare_env` for each seed whose TRL and workbench sides both have points, in run order."""
    wb = {s.seed: s for s in sides if s.name == "workbench" and s.points}
    return [compare_env(s, wb[s.seed], target) for s in sides if s.name == "trl" and s.points and s.seed in wb]


def table(sides: list[EnvSide], comps: list[dict[str, Any]]) -> str:
    """The printed figures: a row per side and scored point, each side's clocks (or why it has none),
    each seed's comparison, the ratio's spread and the prompt checks."""
    lines = [f"{'seed':>4s} {'side':10s} {'step':>4s} {'pass_rate':>9s} {'± se':>6s} {'train_s':>8s}"]
    for s in sides:
        for p in sorted(s.points, key=lambda p: p.step):
            lines.append(f"{s.seed:4d} {s.name:10s} {p.step:4d} {p.pass_rate:9.3f} {p.se:6.3f} {p.wall_s:8.1f}")
        if s.error:
            lines.append(f"{s.seed:4d} {s.name:10s} did not run: {s.error}")
            continue
        per = f"{s.train_s / s.steps:.0f} s/step" if s.steps else "no step"
        start = "-" if s.startup_s is None else f"{s.startup_s:.0f}"
        lines.append(f"{s.seed:4d} {s.name:10s} {s.steps} steps in {s.train_s:.0f} s of training clock ({per}; "
                     f"{s.saves_s:.0f} s of saves out; budget {s.budget_s:.0f} s), start-up {start} s, whole wall time "
                     f"{s.total_s:.0f} s ({s.scoring_s:.0f} s of scoring after the run)")  # fmt: skip
        if s.note:
            lines.append(f"{s.seed:4d} {s.name:10s} note: {s.note}")
    for c in comps:
        what = "the highest pass rate both reach" if c["target_from"] == "common" else "the target pass rate"
        head = f"seed {c['seed']}: {what}, {c['target']:.3f} (step 0: {c['start']:.3f}):"
        if not c["gained"]:
            lines.append(f"{head} not above step 0: nothing learned to time")
        elif c["ratio"] is None:
            t = "-" if c["trl_s"] is None else f"{c['trl_s']:.0f} s"
            w = "-" if c["workbench_s"] is None else f"{c['workbench_s']:.0f} s"
            lines.append(f"{head} TRL {t}, workbench {w}: no ratio (a side did not reach it)")
        else:
            lines.append(f"{head} TRL {c['trl_s']:.0f} s (step {c['trl_step']}), workbench {c['workbench_s']:.0f} s "
                         f"(step {c['workbench_step']}): ratio workbench/TRL {c['ratio']:.2f}")  # fmt: skip
    for sp in spread(comps):
        figures = "no ratio" if sp["mean"] is None else f"mean {sp['mean']:.2f}, min {sp['min']:.2f}, max {sp['max']:.2f}"
        missing = f"; none on seed {', '.join(str(s) for s in sp['missing'])}" if sp["missing"] else ""
        lines.append(f"ratio workbench/TRL over seeds {', '.join(str(s) for s in sp['seeds'])}: {figures}{missing} "
                     f"(<= {TARGET_RATIO} on every seed: {'yes' if sp['met'] else 'no'})")  # fmt: skip
    for s in sides:
        if s.prompt_check is not None:
            lines.append(f"seed {s.seed} prompts: {prompt_line(s.prompt_check)}")
    return "\n".join(lines)


def prompt_line(check: dict[str, Any]) -> str:
    if check.get("identical") is None:
        return f"not compared ({check.get('error')})"
    if check["identical"]:
        return (f"TRL's token ids = the workbench's on {check['rows']} training rows "
                f"({min(check['prompt_tokens'])}-{max(check['prompt_tokens'])} tokens) and the tool-result suffix")
    return (f"DIFFER: first difference per row {check['first_difference']}, suffix {check['suffix_first_difference']} "
            f"(tokens: ours {check['prompt_tokens']}, TRL's {check['trl_prompt_tokens']})")


def parse(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(CONFIG), help="the workbench config both sides' settings start from")
    p.add_argument("--env", default=ENV, help="the environment_factory class, package.module:Class")
    p.add_argument("--data", default=None, help="the rows (default: the calculator's 2000 few-shot rows, seed 0, written to --work)")
    for option, kind, default, text in NUMBERS:
        p.add_argument(option, type=kind, default=default, help=text)
    p.add_argument("--seeds", nargs="+", type=seed_list, default=[[0, 1]], help="seeds (0 1 or 0,1), each side once per seed, interleaved")
    p.add_argument("--sides", default=",".join(SIDES), help="comma-separated, run in this order for each seed")
    p.add_argument("--backend", default="vllm", choices=["vllm", "torch"], help="the workbench's generator")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "workbench" / "models"), help="model.cache_dir")
    p.add_argument("--work", default=str(REPO / "runs" / "bench-env-vs-trl"), help="runs, records and scores (a rerun resumes)")
    p.add_argument("--keep-checkpoints", action="store_true", help="keep each checkpoint after it is scored")
    p.add_argument("--check-prompts", action="store_true", help="only compare TRL's prompt ids with the workbench's")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    a.seeds = list(dict.fromkeys(s for group in a.seeds for s in group))  # repeats dropped, order kept
    a.sides = [s.strip() for s in a.sides.split(",") if s.strip()]
    unknown = [s for s in a.sides if s not in SIDES]
    if unknown or not a.sides:
        p.error(f"--sides: unknown side {unknown[0] if unknown else '(none)'!r} (known: {', '.join(SIDES)})")
    a.trl_minutes = a.minutes if a.trl_minutes is None else a.trl_minutes
    a.trl_every = a.every if a.trl_every is None else a.trl_every
    if min(a.every, a.trl_every, a.max_steps, a.prompts, a.tokens, a.turns, a.eval_prompts, a.eval_samples, a.threads) < 1 or a.generations < 2:
        p.error("--every, --max-steps, --prompts, --tokens, --turns, --eval-prompts, --eval-samples and --threads must be >= 1, --generations >= 2")
    if not (a.minutes > 0 and a.trl_minutes > 0):
        p.error("--minutes and --trl-minutes must be > 0")
    return a


def report(a: argparse.Namespace, sides: list[EnvSide], comps: list[dict[str, Any]], mapping: dict[str, Any]) -> dict[str, Any]:
    """The --json object: settings, the TRL mapping, versions, machine, date, the sides, the comparisons, the spread."""
    return {"settings": {k: v for k, v in vars(a).items() if k != "json"}, "trl_mapping": mapping, "versions": versions(),
            "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
            "date": time.strftime("%Y-%m-%d"),
            "clock": "training: start-up and checkpoint saves out, no evaluation inside; --minutes a side (TRL: --trl-minutes)",
            "sides": [asdict(s) for s in sides], "comparisons": comps, "spread": spread(comps)}  # fmt: skip


def main(argv: Optional[list[str]] = None) -> int:
    a = parse(argv)
    template = qwen_template()
    from workbench.engine.model.gguf import gguf_folder, smollm2_path, to_stderr
    from workbench.envs.calculator import write_jsonl

    from bench_env_learning import score_checkpoint

    model = gguf_folder(smollm2_path(), dtype="float32", cache_dir=a.cache, say=to_stderr)
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    data = Path(a.data).resolve() if a.data else work / "calculator-fewshot.jsonl"
    if not a.data and not data.is_file():
        write_jsonl(data, 2000, 0, few_shot=True)  # python -m workbench.envs.calculator OUT 2000 0 --few-shot
    first = run_settings(a, model, data, template, a.seeds[0])
    render = workbench_renderer(first)
    longest = longest_prompt(first, render)
    mapping = {k: v for k, v in trl_spec(a, first, work / "-", longest, []).items() if k not in ("train", "check_rows", "out", "seed")}
    mapping["longest_prompt_tokens"] = longest
    say(f"TRL's settings: {json.dumps(mapping)}")
    if a.check_prompts:
        return check_only(a, first, work, longest, render)
    book = ScoreBook(work / "scores.jsonl", score_checkpoint)
    sides: list[EnvSide] = []
    for seed, name in schedule(a.sides, a.seeds):
        settings = run_settings(a, model, data, template, seed)
        path = work / f"{name}-s{seed}.side.json"
        if path.is_file():
            say(f"{name} s{seed}: read from {path}")
            sides.append(EnvSide.from_json(json.loads(path.read_text())))
            continue
        say(f"{name} s{seed}: {a.prompts} x {a.generations} episodes a step for {budget_seconds(a, name) / 60:g} min of training clock ...")
        side = run_workbench(a, settings, work, book) if name == "workbench" else run_trl(a, settings, work, book, longest, render)
        if not side.error:
            path.write_text(json.dumps(asdict(side)))
        say(f"{name} s{seed}: {side.error or f'{side.steps} steps, training clock {side.train_s:.0f} s, whole {side.total_s:.0f} s'}")
        sides.append(side)
    comps = comparisons_env(sides, a.target)
    print(json.dumps(report(a, sides, comps, mapping)) if a.json else table(sides, comps))
    return 0


def check_only(a: argparse.Namespace, settings: dict, work: Path, longest: int, render: Callable[[list[dict]], dict[str, Any]]) -> int:
    """--check-prompts: TRL's trainer built (no step trained) and its prompt ids for the first training
    rows and its tool-result suffix compared with the workbench's; row 0's ids printed on both sides."""
    folder = work / "check-prompts"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    spec = {**trl_spec(a, settings, folder / "out", longest, train_rows(settings)), "check_only": True}
    spec["train"] = spec["train"][: max(CHECK_ROWS, a.prompts * a.generations)]
    (folder / "spec.json").write_text(json.dumps(spec))
    with open(folder / "log.txt", "w") as log:
        subprocess.run([sys.executable, str(HERE / "vs_trl_env.py"), str(folder / "spec.json"), str(folder / "result.json")],
                       env=run_env(), stdout=log, stderr=subprocess.STDOUT, timeout=1800)  # fmt: skip
    got = json.loads((folder / "result.json").read_text()) if (folder / "result.json").is_file() else {}
    if not got or got.get("error"):
        print(f"TRL did not build: {got.get('error') or last_line((folder / 'log.txt').read_text(errors='replace'))}")
        return 1
    ours = render(spec["check_rows"])
    check = check_prompts(ours, got["prompt_check"])
    out = {"check": check, "row0_workbench": ours["prompt_ids"][0] if ours["prompt_ids"] else None,
           "row0_trl": (got["prompt_check"] or {}).get("prompt_ids", [None])[0]}  # fmt: skip
    (folder / "check.json").write_text(json.dumps(out))
    if a.json:
        print(json.dumps(out))
    else:
        print(f"row 0, the workbench ({len(out['row0_workbench'] or [])} ids): {out['row0_workbench']}")
        print(f"row 0, TRL ({len(out['row0_trl'] or [])} ids): {out['row0_trl']}")
        print(f"tool-result suffix: workbench {check.get('suffix_ids')}, TRL {check.get('trl_suffix_ids')}")
        print(f"prompts: {prompt_line(check)}")
    return 0 if check.get("identical") else 1


if __name__ == "__main__":
    sys.exit(main())
