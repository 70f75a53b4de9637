"""The trainer worker: one optimizer step of the recipe's loss on a batch of rollout groups.

Runs as the Ray actor `Trainer` (see launch.py); the class itself is plain Python so tests can
drive it directly. Per step: the step prepared (rl/step.prepare_step: every filter - stale
groups, zero variance -, the penalties, advantages, aggregation weights over the WHOLE step)
-> forward/backward in micro-batches cut by tokens (micro.py), the FP32 head only at the positions
trained on, log-probs and entropy chunked (rl/head.py) -> clip -> AdamW (warm-up, then constant
LR). With `recipe.loss.tis_cap` the loss gets the pre-update log-probs (this forward's, detached);
with `recipe.loss.kl_coef` the frozen reference's (reference.py), computed before the policy's.
A non-finite loss or gradient skips the update (and is counted); an empty batch (everything
filtered) skips explicitly instead of dividing by zero. The result is a `StepResult` (version,
skip reason, stats, and what each sequence was trained with: `TrainedValues`, for the kept
samples). Checkpoints load into any worker count.

The step map: one RL step, file by file, from the coordinator to the weight push (paths under
workbench/; helpers a stop calls in parentheses). tests/engine/test_step_map.py checks that each
file exists and that a traced step enters no package file this map leaves out.

  1. engine/run/coordinator.py     the loop: _dispatch_generation, _on_generated, _queue_train_steps,
                                   _on_trained, _finish_step
  2. engine/run/actors.py          Workers.generate / Workers.train: the Ray calls
  3. engine/rollout/worker.py      generate: prompts (engine/model/hf_dir.py; tasks/chat.py: the system
                                   prompt, a conversation), sampling, checks, the chunk; set_weights and
                                   the PendingUpdate taken between decode steps
  4. engine/model/sampling.py      sample_batch, the decode loop (engine/rollout/torch_backend.py,
                                   engine/model/forward.py, rl/head.py; vLLM: engine/rollout/vllm/backend.py)
  5. tasks/base.py                 submit_checks: each example's task (tasks/mixture.py), its checker
                                   (tasks/types.py; code in engine/sandbox_pool/pool.py)
  6. engine/rollout/scoring.py     verdict_groups: groups scored by rl/shaping.py, packed by engine/batch.py
                                   (the texts kept as samples: runs/samples.py)
  7. engine/train/group.py         TrainerGroup.train: the batch to every trainer worker
  8. engine/train/trainer.py       train_step -> prepare (engine/batch.py build_batch; engine/model/devices.py)
  9. rl/step.py                    prepare_step: every filter, the penalties (rl/shaping.py), advantages
                                   (rl/advantages.py), aggregation weights (rl/aggregation.py, rl/_checks.py)
 10. rl/losses.py                  per micro-batch (engine/train/micro.py) on engine/model/policy.py's
                                   log-probs, beside the mismatch against the generator's (rl/mismatch.py;
                                   earlier versions' tokens: engine/train/lagged.py);
                                   then clip, AdamW (engine/train/optim.py), the weights out (engine/weights.py)
 11. engine/run/weight_sync.py     WeightSync.trained: the version, the push to worker.set_weights
 12. engine/run/metrics.py         step_row: the step's row in metrics.jsonl
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

from workbench.config import ModelConfig, TrainConfig
from workbench.engine.cluster.common import free_port
from workbench.engine.failures import answers_when_broken
from workbench.engine.train import fsdp
from workbench.engine.model.devices import move_to, resolve_device, trainer_memory_fraction, trainer_precision, within_share
from workbench.engine.model.forward import PromptShare
from workbench.engine.model.lora import adapter_state, apply_lora
from workbench.engine.model.policy import PolicyForward
from workbench.engine.model.logs import quiet_hf
from workbench.errors import UserError
from workbench.engine.weights import FlatWeights, policy_push
from workbench.engine.batch import Group, PackedGroups, build_batch
from workbench.engine.train.lagged import KeptVersions
from workbench.engine.train.micro import add_partial, is_extreme, merge_ranks, micro_batches
from workbench.engine.train.reference import ReferencePolicy
from workbench.engine.train.optim import build_optimizer, build_scheduler
from workbench.rl.losses import policy_loss
from workbench.rl.mismatch import mismatch_metrics, mismatch_partial
from workbench.runs.checkpoint import TRAINER_DCP
from workbench.rl.recipe import RecipeConfig
from workbench.rl.step import StepRows, TrainedValues, prepare_step


@dataclass
class StepResult:
    """One train step's outcome: the policy version after it, why its update was skipped (None:
    applied), its metrics (`train/...`, `time/...`: floats only) and `trained`: per sequence of the
    step's batch, whether it was trained, with which advantage and loss weight (rl/step.py; None
    where the caller did not say, e.g. a stand-in trainer)."""

    version: int
    stats: dict[str, float]
    skipped: Optional[str] = None
    trained: Optional[TrainedValues] = None

    def row(self) -> dict[str, float]:
        """The metrics as the step's row records them, the version included (`policy/version`)."""
        return {**self.stats, "policy/version": float(self.version)}


def count_params(model: Any, trainable: bool = False) -> int:
    """All parameters, or (`trainable`) those the backward computes weight gradients for."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable)


class Trainer:
    """Holds the policy being optimised, its optimizer and the policy version counter.

    Takes its config parts, chosen by the driver (run/actors.trainer_parts): the model, the
    `train:` section (optimizer, micro-batches), the recipe, the sampling temperature and
    max_new_tokens the rollouts were drawn with, its GPU share (0: the CPU), torch threads, seed, and
    `kept_versions`: earlier versions kept for the mismatch (engine/train/lagged.py; 0: none).
    `rank`/`world_size` > 1: one of several workers; the model is sharded with FSDP2 once
    `connect(address, port)` has joined the process group (train/group.py drives this).
    """

    def __init__(
        self, model: ModelConfig, train: TrainConfig, recipe: RecipeConfig, *, temperature: float, max_new_tokens: int,
        gpus: float = 0.0, threads: int = 1, seed: int = 0, rank: int = 0, world_size: int = 1, kept_versions: int = 1,
    ):  # fmt: skip
        from workbench.engine.model.load import load_policy

        self.train_cfg, self.recipe = train, recipe
        self.temperature, self.max_new_tokens = temperature, max_new_tokens
        self.rank, self.world_size = rank, world_size
        quiet_hf()
        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        self.device = torch.device(resolve_device(gpus))
        if self.device.type == "cuda":
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.memory_share = trainer_memory_fraction(gpus, self.device)
        if self.memory_share is not None:  # held to its share: an overrun fails here, not in vLLM beside it
            torch.cuda.set_per_process_memory_fraction(self.memory_share, self.device)
        # fp32 master weights always (a bf16 weight does not move at lr 5e-7); see devices.py
        self.precision = trainer_precision(model.dtype, self.device)
        # model.path is the model folder the driver resolved (run/actors.actor_config)
        load = load_policy if world_size == 1 else fsdp.load_skeleton  # N > 1: weights from rank 0 at connect
        # model.lora: the frozen base in the compute dtype, fp32 adapters over it (engine/model/lora.py)
        base = self.precision.master if model.lora is None else self.precision.compute
        with within_share(self.memory_share):
            self.model, self.tokenizer = load(model, device=str(self.device), dtype=base,
                                             compute=self.precision.compute, progress=False)
        self.model.train()
        if train.gradient_checkpointing:
            # recompute each layer's activations in the backward: memory for compute
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if model.lora is not None:
            self.model = apply_lora(self.model, model.lora, gradient_checkpointing=train.gradient_checkpointing)
        self.version = 0  # optimizer updates applied so far
        self.nonfinite_in_a_row = 0
        # a group's rows run their shared prompt once (engine/model/forward.py); FSDP and HF's
        # gradient checkpointing (no KV cache) run every row whole
        self.share_prompts = world_size == 1 and not train.gradient_checkpointing
        self.num_params = count_params(self.model)
        # the weights the backward computes gradients for: all, or a LoRA run's adapters (accounting.py)
        self.num_trainable = count_params(self.model, trainable=True)
        self.pad_id = self.tokenizer.pad_token_id
        self.policy = PolicyForward(self.model, recipe.fp32_head)
        self.model_cfg = model
        # earlier versions' weights, for the mismatch under the sampling version (lagged.py)
        self.lagged_rows = train.lagged_rows(world_size) if kept_versions else 0
        self.kept = KeptVersions(self.policy, self.precision, recipe.fp32_head, kept_versions) if self.lagged_rows else None
        # KL penalty: the frozen starting weights (reference.py); with several workers built in connect()
        self.reference: Optional[ReferencePolicy] = None
        if world_size == 1:
            if recipe.loss.kl_coef:
                with within_share(self.memory_share):
                    self.reference = ReferencePolicy.load(model, self.device, self.precision, recipe.fp32_head)
            self._build_optimizer()

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0: the address and a free port where the process group meets."""
        return fsdp.node_ip(), free_port()

    def connect(self, address: str, port: int, timeout_s: float = 600.0) -> int:
        """Join the process group and shard the model (every rank at once)."""
        fsdp.init_group(self.device, address, port, self.rank, self.world_size, timeout_s)
        self.policy = fsdp.shard(self.model, self.device, self.precision, self.recipe.fp32_head)
        fsdp.load_from_rank0(self.policy, self.device, self.model.workbench_info["dir"])
        if self.recipe.loss.kl_coef:
            self.reference = ReferencePolicy.sharded(self.model_cfg, self.device, self.precision, self.recipe.fp32_head)
        self._build_optimizer()
        return self.rank

    def _build_optimizer(self) -> None:
        # over the policy's parameters as they will train: after FSDP2 sharding when there are several workers
        # the trainable ones only: with model.lora the adapters (no AdamW state for the frozen base)
        self.optimizer = build_optimizer([p for p in self.policy.parameters() if p.requires_grad], self.train_cfg)
        self.scheduler = build_scheduler(self.optimizer, self.train_cfg)

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
        """The full weights in the compute dtype, the FP32 head in fp32, for the generators
        (None on ranks > 0). Cast per tensor on the device; a tied head is sent once.

        With several workers every rank must call this (it all-gathers the shards one by one).
        With model.lora: the adapters alone, fp32 (the generators hold the same base)."""
        if self.model_cfg.lora is not None:  # sharded: every rank gathers, rank 0 keeps them
            flat = FlatWeights.from_state_dict(adapter_state(self.model), gather=fsdp.to_local if self.sharded else None,
                                               write=self.rank == 0)  # fmt: skip
            return flat if self.rank == 0 else None
        flat = policy_push(self.model, self.precision.compute, self.recipe.fp32_head,
                           gather=fsdp.to_local if self.sharded else None, write=self.rank == 0)  # fmt: skip
        return flat if self.rank == 0 else None

    def info(self) -> dict[str, Any]:
        import ray

        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        return {"version": self.version, "num_params": self.num_params, "trainable_params": self.num_trainable,
                "device": str(self.device), "rank": self.rank, "node_id": node}

    # -- one step ------------------------------------------------------------------------
    def prepare(self, packed: PackedGroups) -> tuple[dict[str, float], Optional[StepRows], str]:
        """The step's rollouts as rows to train on: the batch and what it holds, then every filter,
        the penalties, advantages and weights (rl/step.prepare_step) on the host; the rows come
        back on the trainer's device (or None with the reason to skip)."""
        stats = packed.rollout_stats()
        if not packed.num_sequences:
            return stats, None, "no sequences in the step"
        prepared, rows, reason = prepare_step(build_batch(packed, self.pad_id), self.version, self.recipe, self.max_new_tokens)
        stats.update(prepared)
        return stats, (move_to(rows, self.device) if rows is not None else None), reason

    def train_step(self, groups: list[Group] | PackedGroups, step: int) -> tuple[StepResult, Optional[FlatWeights]]:
        """Train on `groups`; returns (the step's result, new weights or None when the update was skipped).

        With several workers each rank gets the whole batch, prepares it identically, and trains
        its share of the rows; rank 0 returns the gathered weights."""
        with within_share(self.memory_share):  # an OOM under a GPU share: one line naming it
            return self._train_step(groups, step)

    def _train_step(self, groups: list[Group] | PackedGroups, step: int) -> tuple[StepResult, Optional[FlatWeights]]:
        t0 = time.perf_counter()
        packed = groups if isinstance(groups, PackedGroups) else PackedGroups.from_groups(groups)
        stats, rows, reason = self.prepare(packed)
        if rows is None:
            return self._skip(stats, t0, reason, packed.num_sequences)
        self.optimizer.zero_grad(set_to_none=True)
        t_fwd = time.perf_counter()
        part = self._accumulate(rows)
        if self.sharded:
            part = merge_ranks(fsdp.gather_objects(part))
        loss_total, sums, ent_sum, tok_sum = part["loss"], part["sums"], part["ent"], part["tok"]
        if self.kept is not None:  # earlier versions' tokens, each under its own weights
            t = self.train_cfg
            add_partial(sums, self.kept.measure(rows, self.temperature, t.mismatch_bound, self.lagged_rows,
                                                t.micro_batch_size, t.micro_batch_tokens, self._autocast))
        stats.update(mismatch_metrics(sums))  # per measured token, not per trained token: out of the loop below
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.train_cfg.grad_clip)
        grad_norm = float(fsdp.to_local(norm)) if self.sharded else float(norm)
        stats["train/loss"] = loss_total
        stats["train/grad_norm"] = grad_norm
        stats["train/entropy"] = ent_sum / max(tok_sum, 1.0)
        for key, val in sums.items():
            stats[f"train/{key}"] = val if is_extreme(key) else val / max(tok_sum, 1.0)
        if not (math.isfinite(loss_total) and math.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self.nonfinite_in_a_row += 1
            stats["train/nonfinite"] = 1.0
            stats["train/nonfinite_in_a_row"] = float(self.nonfinite_in_a_row)
            return self._skip(stats, t0, "non-finite loss or gradient", packed.num_sequences, fwd_start=t_fwd)
        self.nonfinite_in_a_row = 0
        if self.kept is not None:
            self.kept.take(self.version)  # the next step measures this version's tokens with it
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
            }
        )
        return StepResult(self.version, stats, trained=rows.trained), weights

    def _accumulate(self, rows: StepRows) -> dict[str, Any]:
        """Forward/backward over this rank's micro-batches (by tokens, see micro.py); gradients
        add up in the parameters. The head runs only at the positions trained on."""
        recipe, t = self.recipe, self.train_cfg
        temp = self.temperature
        loss_total, sums, ent_sum, tok_sum = 0.0, {}, 0.0, 0.0
        lengths = rows.lengths
        for part in micro_batches(lengths, self.rank, self.world_size, t.micro_batch_size, t.micro_batch_tokens):
            empty = not part
            # FSDP: every rank takes part in every gather; an empty turn runs row 0 and adds nothing
            pick = torch.tensor(part or [0], device=rows.input_ids.device)
            width = max(lengths[i] for i in (part or [0]))  # trim the padding this micro-batch does not need
            ids, attn = rows.input_ids[pick, :width], rows.attention_mask[pick, :width]
            mask = rows.loss_mask[pick, : width - 1]
            pos = mask > 0
            share = None if empty or not self.share_prompts else PromptShare(
                [rows.prompt_lengths[i] for i in part], [lengths[i] for i in part], [rows.groups[i] for i in part])
            # the reference first (no grad): its temporaries are freed before the policy's activations peak
            ref_at = self.reference.logprobs(ids, attn, pos, temp, share) if self.reference is not None else None
            with self._autocast():
                logp_at, ent_at = self.policy(ids, attn, pos, temp, share)
            finite = empty or bool(torch.isfinite(logp_at).all())
            if empty or not finite:
                if not finite:
                    loss_total = math.nan  # diverged weights: the update is skipped
                    if not self.sharded:
                        break
                (logp_at.sum() * 0.0).backward()
                continue
            logp = torch.zeros(mask.shape, dtype=logp_at.dtype, device=mask.device).masked_scatter(pos, logp_at)
            ent = torch.zeros_like(logp).masked_scatter(pos, ent_at)
            ref = torch.zeros_like(logp).masked_scatter(pos, ref_at) if ref_at is not None else None
            # TIS's old_logp: one optimizer step per batch, so the pre-update log-probs are this
            # forward's, detached (several steps per batch would need their own no-grad pass)
            old = logp.detach() if recipe.loss.tis_cap is not None else None
            loss, st = policy_loss(
                recipe.loss, logp, rows.gen_logp[pick, : width - 1], rows.advantages[pick], mask,
                rows.weights[pick, : width - 1], old_logp=old, ref_logp=ref,
                entropy=ent if recipe.loss.entropy_coef else None,
            )  # fmt: skip
            if rows.versions is not None:  # the pre-update log-probs against the generator's (rl/mismatch.py)
                add_partial(sums, mismatch_partial(logp, rows.gen_logp[pick, : width - 1], mask,
                                                   rows.versions[pick, : width - 1], self.version, self.train_cfg.mismatch_bound))
            # FSDP averages over ranks; the weights already sum to the whole batch: undo the mean
            (loss * self.world_size if self.sharded else loss).backward()
            loss_total += float(loss.detach())
            ntok = float(pos.sum())
            ent_sum += float(ent_at.detach().sum())
            tok_sum += ntok
            add_partial(sums, {k: float(v) * (1.0 if is_extreme(k) else ntok) for k, v in st.items() if k not in ("tokens", "loss")})
        return {"loss": loss_total, "sums": sums, "ent": ent_sum, "tok": tok_sum}

    def _skip(self, stats: dict[str, float], t0: float, reason: str, n: int,
              fwd_start: float | None = None) -> tuple[StepResult, None]:  # fmt: skip
        """No update: the step's result, its `n` sequences none trained."""
        for key in ("train/entropy", "train/clip_fraction", "train/loss", "train/grad_norm"):
            stats.setdefault(key, math.nan)  # no update: nothing to measure (logged as null)
        stats.setdefault("train/nonfinite", 0.0)
        stats.setdefault("train/nonfinite_in_a_row", float(self.nonfinite_in_a_row))
        stats["train/skipped"] = 1.0
        stats["train/tokens_trained"] = 0.0
        stats["train/sequences_trained"] = 0.0
        now = time.perf_counter()
        stats["time/train_compute"] = now - (fwd_start or now)
        stats["time/train_prep"] = (fwd_start or now) - t0
        return StepResult(self.version, stats, skipped=reason, trained=TrainedValues.none(n)), None

    # -- checkpoints ---------------------------------------------------------------------
    def save(self, path: str) -> str:
        """fp32 weights and AdamW states as a `torch.distributed.checkpoint` folder `trainer_dcp/`
        (every rank writes its shards; one worker writes the whole state, in the same format),
        and rank 0's `trainer_meta.pt` (scheduler, counters, RNG). Any worker count can load it."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        state: dict[str, Any] = {
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
            "nonfinite_in_a_row": self.nonfinite_in_a_row,
            "torch_rng": torch.get_rng_state(),
            "workers": self.world_size,
        }
        fsdp.save_state(p / TRAINER_DCP, self.policy, self.optimizer)
        if self.rank == 0:
            tmp = p / "trainer_meta.pt.tmp"
            torch.save(state, tmp)
            tmp.replace(p / "trainer_meta.pt")
        return str(p / "trainer_meta.pt")

    def load(self, path: str) -> int:
        """Resume from `save`'s folder, written by this or any other number of workers (DCP
        reshards); a `trainer.pt` from before sharded checkpoints loads into one worker."""
        p = Path(path)
        if (p / "trainer_meta.pt").exists():
            state = torch.load(p / "trainer_meta.pt", map_location="cpu", weights_only=True)
            fsdp.load_state(p / TRAINER_DCP, self.policy, self.optimizer)
        elif (p / "trainer.pt").exists():
            if self.sharded:
                raise UserError(
                    f"the checkpoint {p} is in the one-worker format of earlier versions (trainer.pt); "
                    f"resume it with resources.trainer_workers=1 (this run has {self.world_size})"
                )
            state = torch.load(p / "trainer.pt", map_location=self.device, weights_only=True)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        else:
            raise UserError(f"the checkpoint {p} holds no trainer state (trainer_meta.pt)")
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = int(state["version"])
        self.nonfinite_in_a_row = int(state["nonfinite_in_a_row"])
        torch.set_rng_state(state["torch_rng"].cpu())
        return self.version

    @answers_when_broken
    def sees(self, path: str, token: str) -> dict[str, Any]:
        """Whether this worker's node reads `token` at `path` (the shared out_dir check; answered
        even when the constructor failed, e.g. on a model under an out_dir this node does not see)."""
        from workbench.runs.checkpoint import reads_token

        return {"node_ip": fsdp.node_ip(), "seen": reads_token(path, token)}

    def ping(self) -> int:
        return self.version

    def pid(self) -> int:
        return os.getpid()

    def shutdown(self) -> None:
        fsdp.destroy()
