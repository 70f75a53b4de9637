"""The trainer worker: one optimizer step of the recipe's loss on a batch of rollout groups.

Runs as the Ray actor `Trainer` (see launch.py); the class itself is plain Python so tests can
drive it directly. Per step: zero-variance filter -> advantages -> per-token aggregation
weights over the WHOLE step (so micro-batch gradients add up to the full-batch gradient) ->
micro-batched forward/backward with the FP32 head -> clip -> AdamW (warm-up, then constant LR).
A non-finite loss or gradient skips the update (and is counted); an empty batch (everything
filtered) skips explicitly instead of dividing by zero.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from workbench.config import RunConfig
from workbench.engine.cluster.common import free_port
from workbench.engine.train import fsdp as distributed
from workbench.engine.model.devices import move_to, resolve_device, trainer_precision
from workbench.engine.train.fsdp import PolicyForward
from workbench.engine.model.logs import quiet_hf
from workbench.errors import UserError
from workbench.engine.weights import FlatWeights
from workbench.engine.batch import Group, PackedGroups, build_batch
from workbench.rl.advantages import group_advantages, zero_variance_keep
from workbench.rl.aggregation import aggregation_weights
from workbench.rl.head import token_entropy, token_logprobs
from workbench.rl.length import overlong_penalty
from workbench.rl.losses import policy_loss


def count_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def _extreme(key: str) -> bool:
    return key.endswith("_max") or key.endswith("_min")


def add_partial(sums: dict[str, float], part: dict[str, float]) -> None:
    """Fold one partial result into `sums` (micro-batches, ranks): extremes take max/min, the rest add."""
    for key, val in part.items():
        if key.endswith("_max"):
            sums[key] = max(sums.get(key, -math.inf), val)
        elif key.endswith("_min"):
            sums[key] = min(sums.get(key, math.inf), val)
        else:
            sums[key] = sums.get(key, 0.0) + val


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Add up the ranks' partial sums (loss, entropy, token counts); extremes take max/min."""
    sums: dict[str, float] = {}
    for p in parts:
        add_partial(sums, p["sums"])
    total = {k: sum(p[k] for p in parts) for k in ("loss", "ent", "tok")}
    return {**total, "sums": sums}


@dataclass
class StepRows:
    """What one optimizer step trains on, weighted against the WHOLE batch (every rank holds it all)."""

    input_ids: torch.Tensor  # [N, L]
    attention_mask: torch.Tensor  # [N, L]
    loss_mask: torch.Tensor  # [N, L-1]
    gen_logp: torch.Tensor  # [N, L-1]
    advantages: torch.Tensor  # [N]
    weights: torch.Tensor  # [N, L-1] aggregation weights over the whole batch
    num_tokens: int = 0  # prompt + completion tokens of the rows (counted on the host)

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])


class Trainer:
    """Holds the policy being optimised, its optimizer and the policy version counter.

    `rank`/`world_size` > 1: one of several workers; the model is sharded with FSDP2 once
    `connect(address, port)` has joined the process group (trainer_group.py drives this).
    """

    def __init__(self, cfg: RunConfig, rank: int = 0, world_size: int = 1):
        from workbench.engine.model.load import load_policy

        self.cfg = cfg
        self.rank, self.world_size = rank, world_size
        quiet_hf()
        torch.set_num_threads(cfg.resources.torch_threads)
        torch.manual_seed(cfg.seed)
        self.device = torch.device(resolve_device(cfg.resources.trainer_gpus))
        if self.device.type == "cuda":
            self.device = torch.device("cuda", torch.cuda.current_device())
        # fp32 master weights always (a bf16 weight does not move at lr 5e-7); see devices.py
        self.precision = trainer_precision(cfg.model.dtype, self.device)
        # cfg.model.path is the model folder the driver resolved (run/actors.actor_config)
        self.model, self.tokenizer = load_policy(cfg.model, device=str(self.device), dtype=self.precision.master, progress=False)
        self.model.train()
        if cfg.train.gradient_checkpointing:
            # recompute each layer's activations in the backward: memory for compute
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.version = 0  # optimizer updates applied so far
        self.nonfinite_in_a_row = 0
        self.num_params = count_params(self.model)
        self.pad_id = self.tokenizer.pad_token_id
        self.policy = PolicyForward(self.model, self.cfg.recipe.fp32_head)
        if world_size == 1:
            self._build_optimizer()

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0: the address and a free port where the process group meets."""
        return distributed.node_ip(), free_port()

    def connect(self, address: str, port: int, timeout_s: float = 600.0) -> int:
        """Join the process group and shard the model (every rank at once)."""
        distributed.init_group(self.device, address, port, self.rank, self.world_size, timeout_s)
        self.policy = distributed.shard(self.model, self.device, self.precision, self.cfg.recipe.fp32_head)
        self._build_optimizer()
        return self.rank

    def _build_optimizer(self) -> None:
        t = self.cfg.train
        self.optimizer = torch.optim.AdamW(
            self.policy.parameters(),
            lr=t.lr,
            betas=tuple(t.adam_betas),
            eps=t.adam_eps,
            weight_decay=t.weight_decay,
        )
        warmup = max(0, t.warmup_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
        )

    @property
    def sharded(self) -> bool:
        return self.world_size > 1

    def _autocast(self):
        """bf16 compute over the fp32 master weights (FSDP2 casts by its own policy instead)."""
        if not self.precision.mixed or self.sharded:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.precision.compute)

    # -- weights -------------------------------------------------------------------------
    def get_weights(self) -> Optional[FlatWeights]:
        """The full weights in the compute dtype, for the generators (None on ranks > 0).

        With several workers every rank must call this (it all-gathers the shards)."""
        if not self.sharded:
            return FlatWeights.from_module(self.model, dtype=self.precision.compute)
        state = distributed.full_state_dict(self.policy)
        if self.rank != 0:
            return None
        return FlatWeights.from_state_dict(state, dtype=self.precision.compute)

    def info(self) -> dict[str, Any]:
        import ray

        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        return {"version": self.version, "num_params": self.num_params, "device": str(self.device), "rank": self.rank,
                "node_id": node}

    # -- one step ------------------------------------------------------------------------
    def plan(self, pg: PackedGroups) -> tuple[dict[str, float], Optional[StepRows], str]:
        """Filtering, advantages and aggregation weights over the whole batch, on the host; the
        rows come back on the trainer's device (or None with the reason to skip the step)."""
        recipe = self.cfg.recipe
        k = recipe.off_policy.k
        stats: dict[str, float] = {"train/groups": float(len(pg))}
        # Staleness in policy versions, per token; groups beyond k are dropped (the bound).
        fresh = self.version - pg.min_version_per_group(default=self.version) <= k
        stats["train/dropped_stale_groups"] = float((~fresh).sum())
        has_seq = pg.num_sequences > 0
        stats["train/reward_mean"] = float(pg.rewards.mean()) if has_seq else float("nan")
        stats["train/pass_rate"] = float(pg.correct.mean()) if has_seq else float("nan")
        stats["train/response_len"] = float(pg.t_len.mean()) if has_seq else 0.0
        stats["train/truncation_rate"] = float((~pg.finished).mean()) if has_seq else 0.0
        stats["train/interruption_rate"] = float(pg.interrupted.mean()) if has_seq else 0.0
        kept = pg if bool(fresh.all()) else pg.select(fresh)
        if not kept.num_sequences:
            return stats, None, "no groups within the staleness bound"
        batch = build_batch(kept, self.pad_id)
        rewards = batch.rewards
        if recipe.length_control.type == "penalty":
            rewards = rewards + overlong_penalty(
                batch.lengths.float(),
                self.cfg.generation.max_new_tokens,
                recipe.length_control.l_max,
                recipe.length_control.l_cache,
            )
        keep = torch.ones_like(rewards, dtype=torch.bool)
        if recipe.zero_variance_filter:
            keep = zero_variance_keep(rewards, batch.prompt_index)
        stats["train/zero_variance_frac"] = float(1.0 - keep.float().mean())
        # staleness over every token that will be trained on (trainer version at update - token version)
        tok = batch.loss_mask > 0
        stale = (self.version - batch.versions)[tok].float()
        stats["train/staleness_mean"] = float(stale.mean()) if stale.numel() else 0.0
        stats["train/staleness_max"] = float(stale.max()) if stale.numel() else 0.0
        if not bool(keep.any()):
            return stats, None, "every group had zero reward variance"
        idx = keep.nonzero().squeeze(-1)
        prompt_index = torch.unique(batch.prompt_index[idx], return_inverse=True)[1]
        mask = batch.loss_mask[idx]
        if float(mask.sum()) == 0:
            return stats, None, "no sampled tokens to train on"
        rows = StepRows(
            input_ids=batch.input_ids[idx],
            attention_mask=batch.attention_mask[idx],
            loss_mask=mask,
            gen_logp=batch.gen_logp[idx],
            advantages=group_advantages(rewards[idx], prompt_index, recipe.advantage_norm),
            weights=aggregation_weights(mask, prompt_index, recipe.aggregation),
            num_tokens=int(batch.attention_mask[idx].sum()),
        )
        return stats, move_to(rows, self.device), ""

    def _micro_batches(self, n: int) -> list[slice]:
        """This rank's rows in micro-batches; every rank runs the same number (FSDP collectives),
        so a rank short of rows gets empty slices (trained as a zero-weight row)."""
        per_rank = math.ceil(n / self.world_size)
        mb = max(1, self.cfg.train.micro_batch_size)
        first, last = self.rank * per_rank, min(n, (self.rank + 1) * per_rank)
        return [slice(min(s, last), min(s + mb, last)) for s in range(first, first + max(per_rank, 1), mb)]

    def train_step(self, groups: list[Group] | PackedGroups, step: int) -> tuple[dict[str, float], Any]:
        """Train on `groups`; returns (stats, new weights or None when the update was skipped).

        With several workers each rank gets the whole batch, plans it identically, and trains
        its share of the rows; rank 0 returns the gathered weights."""
        t0 = time.perf_counter()
        pg = groups if isinstance(groups, PackedGroups) else PackedGroups.from_groups(groups)
        stats, rows, reason = self.plan(pg)
        if rows is None:
            return self._skip(stats, t0, reason)
        self.optimizer.zero_grad(set_to_none=True)
        t_fwd = time.perf_counter()
        part = self._accumulate(rows)
        if self.sharded:
            part = _merge([p for p in distributed.gather_objects(part)])
        loss_total, sums, ent_sum, tok_sum = part["loss"], part["sums"], part["ent"], part["tok"]
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.train.grad_clip)
        grad_norm = float(distributed.to_local(norm)) if self.sharded else float(norm)
        stats["train/loss"] = loss_total
        stats["train/grad_norm"] = grad_norm
        stats["train/entropy"] = ent_sum / max(tok_sum, 1.0)
        for key, val in sums.items():
            stats[f"train/{key}"] = val if _extreme(key) else val / max(tok_sum, 1.0)
        if not (math.isfinite(loss_total) and math.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self.nonfinite_in_a_row += 1
            stats["train/nonfinite"] = 1.0
            stats["train/nonfinite_in_a_row"] = float(self.nonfinite_in_a_row)
            return self._skip(stats, t0, "non-finite loss or gradient", fwd_start=t_fwd)
        self.nonfinite_in_a_row = 0
        self.optimizer.step()
        self.scheduler.step()
        self.version += 1
        t_end = time.perf_counter()
        weights = self.get_weights()
        stats.update(
            {
                "train/lr": float(self.optimizer.param_groups[0]["lr"]),
                "train/tokens_trained": float(rows.num_tokens),
                "train/sequences_trained": float(rows.num_rows),
                "train/skipped": 0.0,
                "train/nonfinite": 0.0,
                "time/train_compute": t_end - t_fwd,
                "time/train_prep": t_fwd - t0,
                "time/weight_gather": time.perf_counter() - t_end,
                "policy/version": float(self.version),
            }
        )
        return stats, weights

    def _accumulate(self, rows: StepRows) -> dict[str, Any]:
        """Forward/backward over this rank's micro-batches; gradients add up in the parameters."""
        recipe = self.cfg.recipe
        temp = self.cfg.generation.temperature
        loss_total, sums, ent_sum, tok_sum = 0.0, {}, 0.0, 0.0
        for sl in self._micro_batches(rows.num_rows):
            empty = sl.start == sl.stop
            if empty:  # FSDP: every rank takes part in every gather; this one adds nothing
                sl = slice(0, 1)
            ids, attn, mask = rows.input_ids[sl], rows.attention_mask[sl], rows.loss_mask[sl]
            with self._autocast():
                logits = self.policy(ids, attn)[:, :-1]
            logp = token_logprobs(logits, ids[:, 1:], temperature=temp)
            finite = empty or bool(torch.isfinite(logp[mask > 0]).all())
            if empty or not finite:
                if not finite:
                    loss_total = math.nan  # diverged weights: the update is skipped
                    if not self.sharded:
                        break
                (logits.sum() * 0.0).backward()
                continue
            entropy = None
            with torch.no_grad():
                ent = token_entropy(logits, temperature=temp)
            if recipe.loss.entropy_coef:
                entropy = token_entropy(logits, temperature=temp)
            loss, st = policy_loss(
                recipe.loss, logp, rows.gen_logp[sl], rows.advantages[sl], mask, rows.weights[sl], entropy=entropy
            )
            # FSDP averages over ranks; the weights already sum to the whole batch: undo the mean
            (loss * self.world_size if self.sharded else loss).backward()
            loss_total += float(loss.detach())
            ntok = float(mask.sum())
            ent_sum += float((ent * mask).sum())
            tok_sum += ntok
            add_partial(sums, {k: float(v) * (1.0 if _extreme(k) else ntok) for k, v in st.items() if k not in ("tokens", "loss")})
        return {"loss": loss_total, "sums": sums, "ent": ent_sum, "tok": tok_sum}

    def _skip(self, stats: dict, t0: float, reason: str, fwd_start: float | None = None):
        for key in ("train/entropy", "train/clip_fraction", "train/loss", "train/grad_norm"):
            stats.setdefault(key, math.nan)  # no update: nothing to measure (logged as null)
        stats.setdefault("train/nonfinite", 0.0)
        stats.setdefault("train/nonfinite_in_a_row", float(self.nonfinite_in_a_row))
        stats["train/skipped"] = 1.0
        stats["_skip_reason"] = reason  # type: ignore[assignment]  (not a metric)
        stats["train/tokens_trained"] = 0.0
        stats["train/sequences_trained"] = 0.0
        now = time.perf_counter()
        stats["time/train_compute"] = now - (fwd_start or now)
        stats["time/train_prep"] = (fwd_start or now) - t0
        stats["policy/version"] = float(self.version)
        return stats, None

    # -- checkpoints ---------------------------------------------------------------------
    def save(self, path: str) -> str:
        """One worker: `trainer.pt` (fp32 weights and AdamW states). Several: every rank writes
        its shards to `trainer_dcp/` (torch.distributed.checkpoint), rank 0 the rest."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        state: dict[str, Any] = {
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
            "nonfinite_in_a_row": self.nonfinite_in_a_row,
            "torch_rng": torch.get_rng_state(),
            "workers": self.world_size,
        }
        if self.sharded:
            distributed.save_sharded(p / "trainer_dcp", self.policy, self.optimizer)
            name = "trainer_meta.pt"
        else:
            state.update(model=self.model.state_dict(), optimizer=self.optimizer.state_dict())
            name = "trainer.pt"
        if self.rank == 0:
            tmp = p / f"{name}.tmp"
            torch.save(state, tmp)
            tmp.replace(p / name)
        return str(p / name)

    def load(self, path: str) -> int:
        p = Path(path)
        name = "trainer_meta.pt" if self.sharded else "trainer.pt"
        if not (p / name).exists():
            other = "several trainer workers" if (p / "trainer_meta.pt").exists() else "one trainer worker"
            raise UserError(
                f"the checkpoint {p} was written by {other}; resume with the same "
                f"resources.trainer_workers (this run has {self.world_size})"
            )
        state = torch.load(p / name, map_location=self.device, weights_only=True)
        if self.sharded:
            distributed.load_sharded(p / "trainer_dcp", self.policy, self.optimizer)
        else:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = int(state["version"])
        self.nonfinite_in_a_row = int(state["nonfinite_in_a_row"])
        torch.set_rng_state(state["torch_rng"].cpu())
        return self.version

    def ping(self) -> int:
        return self.version

    def pid(self) -> int:
        return os.getpid()

    def shutdown(self) -> None:
        distributed.destroy()
