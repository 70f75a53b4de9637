"""The trainer sections of the GPU check (benchmarks/gpu_check.py runs them; see its docstring).

- `trainer_section(cfg, folder)`: one trainer, in this process. The master and compute dtypes,
  the first step's loss and grad norm, the fraction of the fp32 master weights that moved at
  lr 5e-7, the peak GPU memory, and a save/load that repeats the next step exactly (a fresh
  trainer loads the checkpoint and trains the same batch: same loss, same weights).
- `workers_section(cfg, folder)`: the trainer group on Ray, 2 workers (NCCL on GPUs, gloo on CPU)
  against 1: loss and grad norm agree at each step; then the 2 workers save a sharded checkpoint,
  restart (fresh actors), load it, and repeat the last step.

Each returns its figures; `check_trainer` / `check_workers` list what is wrong (empty: passed).

    figures = trainer_section(cfg, "/tmp/x"); problems = check_trainer(figures, cuda=True)
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
from typing import Any

import torch

from workbench.config import RunConfig

SMALL_LR = 5e-7  # ScaleRL's learning rate: a bf16 weight would not move, an fp32 master does
MOVED_AT_LEAST = 0.5  # of the weights after one step at SMALL_LR
# 2 workers vs 1: the sums run in another order (and in bf16 on GPUs, or on CPUs with native bf16),
# so agreement within
GLOO_TOLERANCE, NCCL_TOLERANCE = 1e-5, 2e-2  # absolute in fp32 on CPU; relative (absolute below 1) in bf16 or on GPUs
# a restart that loads the checkpoint repeats the step: the same weights within 1e-6 on CPU; on
# GPUs (bf16 copies) at most this fraction of elements off by a last-bit flip of a reduction
RESUME_ATOL_CPU, RESUME_MISMATCH_CUDA = 1e-6, 1e-3


def step_groups(cfg: RunConfig, n: int) -> list[list]:
    """n steps of generated groups (the torch generator, on the trainer's device) with both
    rewards in every group, so nothing is filtered."""
    from workbench.engine.rollout.torch_backend import Generator
    from workbench.engine.run.actors import generator_parts

    gen = Generator(**{**generator_parts(cfg), "gpus": cfg.resources.trainer_gpus})
    steps = []
    for i in range(n):
        chunk = gen.generate(i, [3 * i, 3 * i + 1, 3 * i + 2], 4, seed=i)
        for j, g in enumerate(chunk.groups):
            g.rewards = [1.0 if (c + j) % 3 == 0 else -1.0 for c in range(len(g.rewards))]
        steps.append(chunk.groups)
    del gen
    _release()
    return steps


def _release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _cuda(cfg: RunConfig) -> bool:
    return cfg.resources.trainer_gpus > 0 and torch.cuda.is_available()


def trainer_section(cfg: RunConfig, folder: str) -> dict[str, Any]:
    """One trainer at lr 5e-7: dtypes, first step, weights moved, peak memory, save/load/repeat.
    `cfg` is an actor config (the model folder resolved)."""
    from workbench.engine.run.actors import trainer_parts
    from workbench.engine.train.trainer import Trainer

    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=SMALL_LR, warmup_steps=1))
    cuda = _cuda(cfg)
    steps = step_groups(cfg, 2)
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)  # the repeat must be exact on GPUs too
    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        tr = Trainer(**trainer_parts(cfg))
        before = {k: p.detach().clone() for k, p in tr.model.named_parameters()}
        first = tr.train_step(steps[0], 0)[0].stats
        moved = sum(int((p.detach() != before[k]).sum()) for k, p in tr.model.named_parameters())
        total = sum(p.numel() for p in tr.model.parameters())
        del before
        path = tr.save(os.path.join(folder, "trainer-check"))
        nxt = tr.train_step(steps[1], 1)[0].stats
        expected = {k: p.detach().cpu().clone() for k, p in tr.model.named_parameters()}
        peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
        figures = {"master_dtype": str(tr.precision.master), "compute_dtype": str(tr.precision.compute),
                   "device": str(tr.device), "loss": first["train/loss"], "grad_norm": first["train/grad_norm"],
                   "skipped": first["train/skipped"], "moved_fraction": moved / total, "peak_gib": peak}  # fmt: skip
        del tr
        _release()
        again = Trainer(**trainer_parts(cfg))
        figures["resumed_version"] = again.load(os.path.dirname(path))
        repeat = again.train_step(steps[1], 1)[0].stats
        figures["repeat_loss_diff"] = abs(repeat["train/loss"] - nxt["train/loss"])
        figures["repeat_max_weight_diff"] = max(
            float((p.detach().cpu() - expected[k]).abs().max()) for k, p in again.model.named_parameters()
        )
        del again
        _release()
        return figures
    finally:
        torch.use_deterministic_algorithms(deterministic)


def check_trainer(f: dict[str, Any], cuda: bool) -> list[str]:
    bad = []
    if f["master_dtype"] != "torch.float32":
        bad.append(f"master weights are {f['master_dtype']}, not fp32")
    if cuda and f["compute_dtype"] not in ("torch.bfloat16", "torch.float32"):
        bad.append(f"compute dtype {f['compute_dtype']} (fp16 has no loss scaling)")
    if f["skipped"] or not (math.isfinite(f["grad_norm"]) and f["grad_norm"] > 0):
        bad.append(f"the first step did not train (skipped={f['skipped']}, grad norm {f['grad_norm']})")
    if f["moved_fraction"] < MOVED_AT_LEAST:
        bad.append(f"only {f['moved_fraction']:.1%} of the master weights moved at lr {SMALL_LR:g}")
    if f["resumed_version"] != 1:
        bad.append(f"the checkpoint loaded as version {f['resumed_version']}, not 1")
    if f["repeat_loss_diff"] != 0.0 or f["repeat_max_weight_diff"] != 0.0:
        bad.append(f"save/load did not repeat the next step exactly (loss differs by {f['repeat_loss_diff']:.3g}, "
                   f"weights by up to {f['repeat_max_weight_diff']:.3g})")  # fmt: skip
    return bad


def _group(cfg: RunConfig) -> Any:
    """The trainer group of `cfg`, as spawn_workers makes it (without the shared-folder check)."""
    from workbench.engine.run.actors import trainer_parts
    from workbench.engine.train.group import TrainerGroup

    return TrainerGroup(trainer_parts(cfg), cfg.resources, name=cfg.name)


def _with_workers(cfg: RunConfig, n: int) -> RunConfig:
    # micro-batch 5: uneven rows per rank (12 rows); adam_eps 1e-8: at 1e-15 AdamW turns the
    # rounding noise of a ~0 gradient (summed in another order by 2 ranks) into a full step
    train = dataclasses.replace(cfg.train, micro_batch_size=5, adam_eps=1e-8)
    return dataclasses.replace(cfg, train=train, resources=dataclasses.replace(cfg.resources, trainer_workers=n))


def _connect(cfg: RunConfig, workers: int) -> None:
    """A Ray local cluster of this process with room for the workers (GPUs: every one visible)."""
    import ray

    from workbench.engine.cluster.bootstrap import connect

    if ray.is_initialized():
        ray.shutdown()
    gpus = torch.cuda.device_count() if _cuda(cfg) else 0
    connect(max(os.cpu_count() or 1, math.ceil(workers * cfg.resources.trainer_cpus) + 1), gpus, lasting=False)


def workers_section(cfg: RunConfig, folder: str, workers: int = 2) -> dict[str, Any]:
    """`workers` trainer workers against 1 on the same 2 steps, then a sharded save, a restart
    and a load that repeats the second step, on a Ray local cluster of this process (started here).
`cfg` is an actor config."""
    import ray

    steps = step_groups(cfg, 2)
    _connect(cfg, workers)
    one = _group(_with_workers(cfg, 1))
    try:
        ref = [ray.get(one.train(groups, step).result).stats for step, groups in enumerate(steps)]
    finally:
        one.kill()
    group = _group(_with_workers(cfg, workers))
    try:
        got = [ray.get(group.train(steps[0], 0).result).stats]
        group.save(os.path.join(folder, "workers-check"))
        call = group.train(steps[1], 1)
        got.append(ray.get(call.result).stats)
        expected = ray.get(call.weights).tensors()
        group.restart()  # fresh workers with the initial weights
        version = group.load(os.path.join(folder, "workers-check"))
        repeat = ray.get(group.train(steps[1], 1).weights).tensors()
        nodes = group.num_nodes
    finally:
        group.kill()

    def rel(a: float, b: float) -> float:  # relative, and absolute below 1 (a loss near 0 is a sum that cancels)
        return abs(a - b) / max(abs(b), 1.0)

    from workbench.engine.model.devices import trainer_precision

    bf16 = trainer_precision(cfg.model.dtype, "cuda" if _cuda(cfg) else "cpu").compute != torch.float32
    return {"workers": workers, "nodes": nodes, "resumed_version": version, "low_precision": bf16,
            "loss": [(r["train/loss"], g["train/loss"]) for r, g in zip(ref, got)],
            "grad_norm": [(r["train/grad_norm"], g["train/grad_norm"]) for r, g in zip(ref, got)],
            "loss_abs_diff": max(abs(a - b) for a, b in ((r["train/loss"], g["train/loss"]) for r, g in zip(ref, got))),
            "loss_rel_diff": max(rel(g["train/loss"], r["train/loss"]) for r, g in zip(ref, got)),
            "grad_norm_abs_diff": max(abs(g["train/grad_norm"] - r["train/grad_norm"]) for r, g in zip(ref, got)),
            "grad_norm_rel_diff": max(rel(g["train/grad_norm"], r["train/grad_norm"]) for r, g in zip(ref, got)),
            "resume_max_diff": max(float((repeat[k].float() - v.float()).abs().max()) for k, v in expected.items()),
            "resume_mismatch": sum(int((repeat[k] != v).sum()) for k, v in expected.items()) / sum(v.numel() for v in expected.values())}  # fmt: skip


def check_workers(f: dict[str, Any], cuda: bool) -> list[str]:
    bad = []
    rel = cuda or f.get("low_precision", False)
    loss, norm = (f["loss_rel_diff"], f["grad_norm_rel_diff"]) if rel else (f["loss_abs_diff"], f["grad_norm_abs_diff"])
    tol = NCCL_TOLERANCE if rel else GLOO_TOLERANCE
    if loss > tol or norm > tol:
        bad.append(f"{f['workers']} workers disagree with 1: loss by {loss:.3g}, grad norm by {norm:.3g} (tolerance {tol:g})")
    if f["resumed_version"] != 1:
        bad.append(f"the sharded checkpoint loaded as version {f['resumed_version']}, not 1")
    if (f["resume_mismatch"] > RESUME_MISMATCH_CUDA) if cuda else (f["resume_max_diff"] > RESUME_ATOL_CPU):
        bad.append(f"restart + load did not repeat the step: {f['resume_mismatch']:.2%} of the weights differ, "
                   f"by up to {f['resume_max_diff']:.3g}")  # fmt: skip
    return bad
