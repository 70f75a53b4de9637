"""The trainer worker: one optimizer step of the recipe's loss on a batch of rollout groups.

Runs as the Ray actor `Trainer` (see launch.py); the class itself is plain Python so tests can
drive it directly. Per step: zero-variance filter -> advantages -> per-token aggregation
weights over the WHOLE step (so micro-batch gradients add up to the full-batch gradient) ->
micro-batched forward/backward with the FP32 head -> clip -> AdamW (warm-up, then constant LR).
A non-finite loss or gradient skips the update (and is counted); an empty batch (everything
filtered) skips explicitly instead of dividing by zero.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from workbench.config import RunConfig
from workbench.engine.devices import resolve_device, trainer_precision
from workbench.engine.logs import quiet_hf
from workbench.engine.weights import FlatWeights
from workbench.engine.rollouts import Group, PackedGroups, build_batch
from workbench.rl.advantages import group_advantages, zero_variance_keep
from workbench.rl.aggregation import aggregation_weights
from workbench.rl.head import causal_lm_forward, token_entropy, token_logprobs
from workbench.rl.length import overlong_penalty
from workbench.rl.losses import policy_loss


def count_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


class Trainer:
    """Holds the policy being optimised, its optimizer and the policy version counter."""

    def __init__(self, cfg: RunConfig):
        from workbench.engine.models import load_policy
        from workbench.tasks.base import load_task

        self.cfg = cfg
        quiet_hf()
        torch.set_num_threads(cfg.resources.torch_threads)
        torch.manual_seed(cfg.seed)
        self.device = resolve_device(cfg.resources.trainer_gpus)
        # fp32 master weights always (a bf16 weight does not move at lr 5e-7); see devices.py
        self.precision = trainer_precision(cfg.model.dtype, self.device)
        self.model, self.tokenizer = load_policy(
            cfg.model, load_task(cfg.task), device=self.device, dtype=self.precision.master, progress=False
        )
        self.model.train()
        t = cfg.train
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=t.lr,
            betas=tuple(t.adam_betas),
            eps=t.adam_eps,
            weight_decay=t.weight_decay,
        )
        warmup = max(0, t.warmup_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
        )
        self.version = 0  # optimizer updates applied so far
        self.nonfinite_in_a_row = 0
        self.num_params = count_params(self.model)
        self.pad_id = self.tokenizer.pad_token_id

    # -- weights -------------------------------------------------------------------------
    def get_weights(self) -> FlatWeights:
        return FlatWeights.from_module(self.model)

    def info(self) -> dict[str, Any]:
        return {"version": self.version, "num_params": self.num_params, "device": self.device}

    # -- one step ------------------------------------------------------------------------
    def train_step(self, groups: list[Group] | PackedGroups, step: int) -> tuple[dict[str, float], Any]:
        """Train on `groups`; returns (stats, new weights or None when the update was skipped)."""
        t0 = time.perf_counter()
        pg = groups if isinstance(groups, PackedGroups) else PackedGroups.from_groups(groups)
        recipe, tcfg = self.cfg.recipe, self.cfg.train
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
            return self._skip(stats, t0, "no groups within the staleness bound")
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
            return self._skip(stats, t0, "every group had zero reward variance")
        idx = keep.nonzero().squeeze(-1)
        prompt_index = torch.unique(batch.prompt_index[idx], return_inverse=True)[1]
        adv = group_advantages(rewards[idx], prompt_index, recipe.advantage_norm)
        ids, attn = batch.input_ids[idx], batch.attention_mask[idx]
        mask, gen_logp = batch.loss_mask[idx], batch.gen_logp[idx]
        if float(mask.sum()) == 0:
            return self._skip(stats, t0, "no sampled tokens to train on")
        weights = aggregation_weights(mask, prompt_index, recipe.aggregation)
        n_tokens_trained = int(attn.sum())
        self.optimizer.zero_grad(set_to_none=True)
        t_fwd = time.perf_counter()
        loss_total, sums, ent_sum, tok_sum = 0.0, {}, 0.0, 0.0
        mb = max(1, tcfg.micro_batch_size)
        temp = self.cfg.generation.temperature
        for s in range(0, ids.shape[0], mb):
            sl = slice(s, s + mb)
            logits, _ = causal_lm_forward(self.model, ids[sl], attn[sl], fp32_head=recipe.fp32_head)
            logits = logits[:, :-1]
            logp = token_logprobs(logits, ids[sl, 1:], temperature=temp)
            if not bool(torch.isfinite(logp[mask[sl] > 0]).all()):
                loss_total = math.nan  # diverged weights: skip this update below
                break
            entropy = None
            with torch.no_grad():
                ent = token_entropy(logits, temperature=temp)
            if recipe.loss.entropy_coef:
                entropy = token_entropy(logits, temperature=temp)
            loss, st = policy_loss(
                recipe.loss, logp, gen_logp[sl], adv[sl], mask[sl], weights[sl], entropy=entropy
            )
            loss.backward()
            loss_total += float(loss.detach())
            m = mask[sl]
            ntok = float(m.sum())
            ent_sum += float((ent * m).sum())
            tok_sum += ntok
            for key, val in st.items():
                if key.endswith("_max"):
                    sums[key] = max(sums.get(key, -math.inf), float(val))
                elif key.endswith("_min"):
                    sums[key] = min(sums.get(key, math.inf), float(val))
                elif key in ("tokens", "loss"):
                    continue  # summed elsewhere
                else:
                    sums[key] = sums.get(key, 0.0) + float(val) * ntok
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), tcfg.grad_clip))
        stats["train/loss"] = loss_total
        stats["train/grad_norm"] = grad_norm
        stats["train/entropy"] = ent_sum / max(tok_sum, 1.0)
        for key, val in sums.items():
            extreme = key.endswith("_max") or key.endswith("_min")
            stats[f"train/{key}"] = val if extreme else val / max(tok_sum, 1.0)
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
        stats.update(
            {
                "train/lr": float(self.optimizer.param_groups[0]["lr"]),
                "train/tokens_trained": float(n_tokens_trained),
                "train/sequences_trained": float(ids.shape[0]),
                "train/skipped": 0.0,
                "train/nonfinite": 0.0,
                "time/train_compute": t_end - t_fwd,
                "time/train_prep": t_fwd - t0,
                "policy/version": float(self.version),
            }
        )
        return stats, self.get_weights()

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
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
            "nonfinite_in_a_row": self.nonfinite_in_a_row,
            "torch_rng": torch.get_rng_state(),
        }
        tmp = p / "trainer.pt.tmp"
        torch.save(state, tmp)
        tmp.replace(p / "trainer.pt")
        return str(p / "trainer.pt")

    def load(self, path: str) -> int:
        state = torch.load(Path(path) / "trainer.pt", map_location=self.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = int(state["version"])
        self.nonfinite_in_a_row = int(state["nonfinite_in_a_row"])
        torch.set_rng_state(state["torch_rng"])
        return self.version

    def ping(self) -> int:
        return self.version
