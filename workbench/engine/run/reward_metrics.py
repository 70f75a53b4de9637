"""The run's side of rewards: the sandboxed reward pool's size, and what each step records about rewards.

    pool = start_reward_pool(cfg, task)        # a RewardPool (Ray) for a task with code, else None
    row = step_reward_row(task, batch, gen_stats, waited)   # per-domain train metrics, verdicts, wait
    summary.update(reward_summary(task, rows, trainer_wall_seconds))

Every training check's verdict is counted per step: `reward/verdict/<v>` for v in pass, fail,
timeout, error, sandbox_error, not_applicable (`reward/dropped_groups`: groups left out for a sandbox error).
With `reward.functions`, each function's values over the same checks give `rewards/<name>/mean`
and `/std` (TRL's names; over the samples it gave a value) and `/none` (the samples it gave None).
`time/reward_wait` is the part of the trainer's wait for this step's rollouts that rewards can
explain: the trainer waited `waited` seconds for the batch, and the chunks behind it were held
`reward_wait` seconds between the end of their decoding and their last verdict; the wait is the
smaller of the two (without rewards the rollouts would have come at most that much sooner, and the
trainer cannot have waited longer than it waited). So it is 0 when the trainer never waited.
`reward/latency` is that `reward_wait` itself (summed over the step's chunks), whether or not the
trainer waited. The generators score code through the pool; the evaluator through a sandbox of
its own, so validation's checks never queue ahead of training's.

A mixed task adds per domain `train/reward_mean/<d>` and `gen/length_mean/<d>` (mean completion
tokens of the step's training samples of that domain); single-task runs keep today's names only.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from workbench.config import RunConfig
from workbench.rl.reward_functions import value_metrics
from workbench.tasks.types import VERDICTS

MAX_REWARD_WORKERS = 64


def reward_pool_size(cfg: RunConfig, cluster_cpus: float) -> tuple[int, float]:
    """(workers, CPUs per worker): `resources.reward_workers`, else one per CPU the run's other
    actors leave free, at least 1. Workers get a whole CPU each when that many are free, else an
    equal share of what is free, or, with none free, they share the cores as logical slots
    (CPU 0, like the evaluator)."""
    from workbench.engine.cluster import required_resources

    free = max(0.0, cluster_cpus - required_resources(cfg)["CPU"])
    n = cfg.resources.reward_workers or max(1, min(MAX_REWARD_WORKERS, int(free)))
    return n, 1.0 if free >= n else round(free / n, 4)


def start_reward_pool(cfg: RunConfig, task: Any) -> Optional[Any]:
    """The run's RewardPool (sandboxed workers as Ray actors) when `task` has code, else None."""
    if not getattr(task, "sandboxed", False):
        return None
    import ray

    from workbench.engine.sandbox_pool.pool import RewardPool

    workers, cpus = reward_pool_size(cfg, float(ray.cluster_resources().get("CPU", 0.0)))
    return RewardPool.start(num_workers=workers, cpus_per_worker=cpus)


def fresh_reward_stats() -> dict[str, Any]:
    """What the coordinator sums over the chunks of one trainer step (`reward_values`: each reward
    function's rl.reward_functions.ValueStats, by name)."""
    return {**{f"reward/verdict/{v}": 0.0 for v in VERDICTS}, "reward/dropped_groups": 0.0, "reward_wait": 0.0,
            "reward_values": {}}  # fmt: skip


def add_chunk(stats: dict[str, Any], chunk: Any) -> None:
    """Add one generated chunk's verdict counts, reward functions' values, dropped groups and reward wait to `stats`."""
    for v, n in getattr(chunk, "verdicts", {}).items():
        stats[f"reward/verdict/{v}"] = stats.get(f"reward/verdict/{v}", 0.0) + float(n)
    stats["reward/dropped_groups"] = stats.get("reward/dropped_groups", 0.0) + float(getattr(chunk, "dropped_groups", 0))
    stats["reward_wait"] = stats.get("reward_wait", 0.0) + float(getattr(chunk, "reward_wait", 0.0))
    sums = stats.setdefault("reward_values", {})
    for name, s in getattr(chunk, "reward_values", {}).items():
        sums[name] = sums[name].merged(s) if name in sums else s
    env = getattr(chunk, "env", None)  # an environment's episodes (engine/rollout/episodes.EnvStats)
    if env is not None:
        stats["env"] = stats["env"].merged(env) if stats.get("env") is not None else env


def step_reward_row(task: Any, batch: Any, stats: dict[str, Any], waited: float) -> dict[str, float]:
    """The reward metrics of one trainer step (`batch`: its PackedGroups; see the module docstring)."""
    row = {k: v for k, v in stats.items() if k not in ("reward_wait", "reward_values", "env")}
    row.update(value_metrics(stats.get("reward_values", {}), "rewards"))
    if stats.get("env") is not None:  # env/*: the episodes generated since the step before was sent
        row.update(stats["env"].metrics())
    if getattr(task, "env", None) is not None:  # the trained batch's tokens, by origin (every step, buffered groups too)
        sampled = int(batch.sampled.sum())
        row["train/sampled_tokens"] = float(sampled)
        row["train/env_tokens"] = float(int(batch.t_len.sum()) - sampled)
    row["reward/latency"] = stats.get("reward_wait", 0.0)
    row["time/reward_wait"] = min(max(waited, 0.0), stats.get("reward_wait", 0.0))
    if getattr(task, "parts", None) and batch.num_sequences:
        domains = np.array([task.train[int(p)].domain for p in batch.prompt_id])
        per_seq = np.repeat(domains, batch.size)
        for d in task.parts:
            mask = per_seq == d
            if mask.any():  # a domain with no samples this step has no point (not a zero)
                row[f"train/reward_mean/{d}"] = float(batch.rewards[mask].mean())
                row[f"gen/length_mean/{d}"] = float(batch.t_len[mask].mean())
    return row


def reward_summary(task: Any, rows: list[dict[str, Any]], trainer_wall_seconds: float) -> dict[str, Any]:
    """summary.json's reward facts: domains, verdict totals, reward wait and its share of the
    trainer's wall time, and each domain's first and last validation pass rate."""
    steps = [r for r in rows if "time/reward_wait" in r]
    wait = float(sum(r["time/reward_wait"] for r in steps))
    out: dict[str, Any] = {
        "domains": list(getattr(task, "parts", {}) or {}),
        "reward_verdicts": {v: int(sum(r.get(f"reward/verdict/{v}", 0.0) for r in steps)) for v in VERDICTS},
        "reward_wait_seconds": wait,
        "reward_latency_seconds": float(sum(r.get("reward/latency", 0.0) for r in steps)),
        "reward_wait_share": wait / trainer_wall_seconds if trainer_wall_seconds > 0 else 0.0,
    }
    for d in out["domains"]:
        evals = [r[f"val/pass_rate/{d}"] for r in rows if f"val/pass_rate/{d}" in r]
        out[f"val_pass_rate_first/{d}"] = evals[0] if evals else None
        out[f"val_pass_rate_last/{d}"] = evals[-1] if evals else None
    return out
