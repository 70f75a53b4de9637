"""Where the trainer's step goes, and what each speed-up of issue 23 buys: one trainer, no Ray.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_trainer_step.py [--config configs/quickstart.yaml]
        [--steps 15] [--threads 1] [--profile]

Builds the config's Trainer in this process and trains it on synthetic steps shaped like the
config's (prompts_per_step x generations_per_prompt rows; real task prompts, completions of 2 to
max_new_tokens random tokens, 40% of them rewarded), with each change of issue 23 turned on in
turn:

    before        fp32 compute, transformers' Python `gelu_new`, SDPA, every row run whole
    +fused GELU   engine/model/kernels.py
    +bf16         bf16 autocast over fp32 masters, eager attention (CPU with native bf16 only)
    +shared prompt   a group's prompt run once (engine/model/forward.shared_prompt_hidden)
    sdpa instead  the same, with SDPA in place of the eager attention kernels.py picks for bf16 on
                  the CPU (a candidate, issue 52: eager keeps every layer's T x T probabilities for
                  the backward, engine/plan/attention.attention_bytes; SDPA keeps none)

Printed: ms per step, samples per second and the speed-up over `before`; with --profile the
top operators of the first and the last variant (torch.profiler, self CPU time per step). Run it
alone on the machine (`/work/bin/quiet` here): the figures are wall-clock.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

VARIANTS = ("before", "+fused GELU", "+bf16", "+shared prompt", "sdpa instead")


def make_trainer(cfg, variant: str, threads: int):
    """The config's trainer with the changes up to `variant` on (the earlier kernels put back)."""
    from transformers.activations import NewGELUActivation

    from workbench.engine.train.trainer import Trainer

    level = VARIANTS.index(variant)
    model_cfg = dataclasses.replace(cfg.model, dtype="bfloat16" if level >= 2 else "float32")
    tr = Trainer(model_cfg, cfg.train, cfg.recipe, temperature=cfg.generation.temperature,
                 max_new_tokens=cfg.generation.max_new_tokens, threads=threads, seed=cfg.seed)  # fmt: skip
    if level < 1:  # transformers' own activation, as loaded before kernels.py
        for parent in list(tr.model.modules()):
            for name, child in parent.named_children():
                if isinstance(child, torch.nn.GELU):
                    setattr(parent, name, NewGELUActivation())
    tr.share_prompts = level >= 3
    if level >= 4:
        tr.model.set_attn_implementation("sdpa")
    return tr


def synthetic_steps(cfg, task, tokenizer, vocab: int, n: int, seed: int = 0) -> list:
    """`n` steps of groups shaped like the config's (their versions are set when trained)."""
    from workbench.engine.batch import Group
    from workbench.engine.model.sampling import Completion

    rng = random.Random(seed)
    steps = []
    for _ in range(n):
        groups = []
        for pid in range(cfg.train.prompts_per_step):
            prompt = tokenizer.encode(task.train[rng.randrange(len(task.train))].prompt)
            comps, rewards = [], []
            for _ in range(cfg.train.generations_per_prompt):
                k = rng.randint(2, max(2, cfg.generation.max_new_tokens))
                comps.append(Completion(prompt_tokens=prompt, tokens=[rng.randrange(4, vocab) for _ in range(k)],
                                        logprobs=[-1.0] * k, versions=[0] * k, sampled=[True] * k, finished=True))  # fmt: skip
                rewards.append(1.0 if rng.random() < 0.4 else 0.0)
            groups.append(Group(pid, 0, comps, [r > 0 for r in rewards], rewards))
        steps.append(groups)
    return steps


def at_version(groups: list, version: int) -> list:
    for g in groups:
        for c in g.completions:
            c.versions = [version] * len(c.tokens)
    return groups


def measure(tr, steps: list, profile: bool) -> tuple[float, int, str]:
    """(seconds per step, sequences trained per step, profile table or "")."""
    for groups in steps[:3]:  # warm-up
        tr.train_step(at_version(groups, tr.version), 0)
    t, rows = 0.0, 0
    for i, groups in enumerate(steps[3:]):
        at_version(groups, tr.version)
        t0 = time.perf_counter()
        stats = tr.train_step(groups, i)[0].stats
        t += time.perf_counter() - t0
        rows += int(stats["train/sequences_trained"])
    table = ""
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for groups in steps[3:8]:
                tr.train_step(at_version(groups, tr.version), 0)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
    n = len(steps) - 3
    return t / n, rows // n, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the actors' default: 1)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()

    from workbench.config import load_run_config
    from workbench.engine.model.devices import cpu_has_native_bf16
    from workbench.engine.model.load import resolved_model
    from workbench.tasks.base import load_task

    cfg = load_run_config(args.config)
    task = load_task(cfg.task)
    cfg = dataclasses.replace(cfg, model=resolved_model(cfg.model, task, progress=True))
    print(f"{args.config}: {cfg.train.prompts_per_step} x {cfg.train.generations_per_prompt} rows per step, "
          f"{args.threads} thread(s), native bf16: {cpu_has_native_bf16()}")  # fmt: skip
    base, tables = None, {}
    print(f"{'variant':>16} {'ms/step':>8} {'rows/step':>10} {'samples/s':>10} {'speed-up':>9}")
    for variant in VARIANTS:
        tr = make_trainer(cfg, variant, args.threads)
        steps = synthetic_steps(cfg, task, tr.tokenizer, tr.model.config.vocab_size, args.steps + 3)
        sec, rows, table = measure(tr, steps, args.profile and variant in (VARIANTS[0], VARIANTS[-1]))
        base = base or sec
        tables[variant] = table
        print(f"{variant:>16} {sec * 1000:8.1f} {rows:10d} {rows / sec:10.0f} {base / sec:8.2f}x")
    for variant, table in tables.items():
        if table:
            print(f"\n{variant}: top operators over 5 steps\n{table}")


if __name__ == "__main__":
    main()
