"""The run loop: schedules generators, trainer and evaluator by the recipe's off-policy algorithm.

- `pipeline` (PipelineRL-k): generators are kept busy; after every trainer step the new weights
  are pushed at once and picked up by sequences in flight. New generation is dispatched only
  while the data already buffered or in flight would be trained on within k policy versions,
  and the trainer drops any group whose oldest token is more than k versions behind.
- `ppo-off-policy` (k): one policy generates k steps' worth of prompts; k optimizer steps follow;
  then the weights are pushed.
- `sync`: generate one step, train it, push, repeat.

`RunCoordinator` is plain Python; handle.py runs it inside the Ray actor `Coordinator` so a
notebook can detach from it. It owns the loop and the checkpoint state; the rows, events and
summary it writes are metrics.py's (`RunLog`), the versions and weight pushes weight_sync.py's
(`WeightSync`, through `Workers.sync`), the actors actors.py's, the prompts each chunk gets
prompt_supply.py's (`PromptSupply`: sampler, replay, No-Positive-Resampling's warnings).
Checkpoints (every N steps and at the end; loop_checkpoint.py's `LoopCheckpoint`) hold the trainer state
and this loop's state (step, sampler, counters, prompts in flight); resuming truncates
metrics.jsonl to the checkpoint so no step is lost or logged twice. A trainer worker that dies
mid-run restarts the trainer group from the last checkpoint the same way, up to
`resources.max_restarts` times (a run event: events.log, status, summary).

The loop is a sequence of phase methods over a `LoopState`: `_dispatch_generation`,
`_queue_train_steps`, `_collect` (-> `_on_generated`, `_on_trained`), `_restart_trainer`.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import ray

from workbench.config import RunConfig
from workbench.configtools import to_dict
from workbench.engine.batch import Chunk, GroupBuffer
from workbench.engine.failures import RunFailed, describe_error, record_failure
from workbench.engine.run import accounting
from workbench.engine.run import reward_metrics
from workbench.engine.run.env_faults import EnvFaults
from workbench.engine.run.actors import Workers, spawn_workers
from workbench.engine.run.lag import PipelineDepth
from workbench.engine.run.learning import LearningWatch
from workbench.engine.run.loop_checkpoint import LoopCheckpoint
from workbench.engine.run.metrics import RunLog, run_summary, step_row
from workbench.engine.run.prompt_supply import PromptSupply
from workbench.engine.run.restarts import GeneratorRestarts
from workbench.engine.train.group import TrainerDied, as_group_failure
from workbench.engine.train.trainer import StepResult
from workbench.runs.export import export_final
from workbench.runs.folder import PARAMS_KEY
from workbench.runs.liveness import Heartbeat
from workbench.runs.samples import SAMPLES_KEY, file_notes, step_samples, take_notes
from workbench.tracking.sink import MetricSink


def _fresh_gen_stats() -> dict[str, float]:
    return {"gen_seconds": 0.0, "swaps": 0, "chunks": 0, "rewards": reward_metrics.fresh_reward_stats()}


@dataclass
class LoopState:
    """What the loop holds between phases; dropped as a whole when the trainer restarts."""

    last_ckpt: int = 0
    groups: GroupBuffer = field(default_factory=GroupBuffer)  # generated, not yet trained
    gen_refs: dict = field(default_factory=dict)  # ref -> (generator rank, prompts, chunk id)
    eval_refs: dict = field(default_factory=dict)  # ref -> (step, compute stamp)
    train_q: collections.deque = field(default_factory=collections.deque)  # (TrainCall, meta)
    trainer_clock: accounting.TrainerClock = field(default_factory=accounting.TrainerClock)  # trainer wall and wait time
    gen_stats: dict = field(default_factory=_fresh_gen_stats)
    notes: dict = field(default_factory=dict)  # (chunk id, prompt id) -> buffered groups' texts (runs/samples.py)


class RunCoordinator:
    def __init__(self, cfg: RunConfig, *, resume: bool = True, sinks: Optional[list[MetricSink]] = None):
        from workbench.tasks.base import load_task

        self.cfg = cfg
        self.out = cfg.output_dir()
        self.out.mkdir(parents=True, exist_ok=True)
        self.task = load_task(cfg.task)
        self.prompts = PromptSupply(cfg, self.task)  # sampler, replay, No-Positive-Resampling's warnings
        self.checkpoints = LoopCheckpoint(cfg, self.out, self.prompts)
        self.max_steps = cfg.train.max_steps  # the one owner of the target is the config
        self.counters = accounting.Counters()
        self.step = 0
        self.resumed_from: Optional[int] = None
        state = self.checkpoints.latest() if resume else None
        if state is not None:
            self._restore(state)
        elif (self.out / "metrics.jsonl").exists():
            (self.out / "metrics.jsonl").unlink()  # a fresh run in an old folder starts clean
        self.earlier_rows: list[dict[str, Any]] = []  # a resumed run's rows up to its checkpoint (summary.json covers the whole run)
        if state is not None:  # what the lost timeline had done after the checkpoint, if it logged it
            from workbench.tracking.sink import read_jsonl

            logged = read_jsonl(self.out / "metrics.jsonl")
            accounting.discarded_from_rows(self.counters, [r for r in logged if r.get("step", 0) > self.step])
            self.earlier_rows = [r for r in logged if r.get("step", 0) <= self.step]
        self.log = RunLog(self.out, sinks, samples=cfg.samples)
        self.env_faults = EnvFaults(self.log.event)
        self.gen_restarts = GeneratorRestarts(self.log.event)
        if state is not None:
            self.log.back_to(self.step)  # steps logged after the checkpoint are redone: logged once
        else:
            self.log.start_fresh()  # a fresh run in an old folder: none of the old samples, a new W&B run
        if self.prompts.resampling_off:
            self.log.event(self.prompts.resampling_off)  # told live by `workbench run`, kept in summary.json and the dashboard
        self._stop = threading.Event()
        self._paused = threading.Event()
        self.status = "created"
        self.error: Optional[str] = None
        self.policy: Optional[dict[str, Any]] = None  # where the final policy was exported (or why not)
        self.learning = LearningWatch(cfg, self.task)  # the not-learning warnings and stop rule (learning.py)
        self.depth = PipelineDepth.from_config(cfg)  # the pipeline's depth: fixed, or measured (lag.py)
        self.n_params = 0
        self.n_trainable: Optional[int] = None  # the parameters with weight gradients (LoRA: the adapters)
        self.restarts = 0  # trainer-group restarts so far
        self.trainer_nodes = 0  # Ray nodes the trainer workers run on
        self.generation: dict = {}  # the generators' backend facts (vLLM: version, engine_mode, fp32_head)
        self.checkpoints.mark_start(self.step, self.counters)  # where a trainer restart without any checkpoint goes back to

    # -- control (called from other threads) ---------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def metrics_since(self, index: int) -> list[dict[str, Any]]:
        return self.log.since(index)

    def status_dict(self) -> dict[str, Any]:
        return {
            "status": "paused" if self._paused.is_set() and self.status == "running" else self.status,
            "step": self.step,
            "max_steps": self.max_steps,
            "error": self.error,
            "resumed_from": self.resumed_from,
            "out_dir": str(self.out),
            "events": list(self.log.events),
            "learning": self.learning.warning,
            **accounting.compute_metrics(self.counters, self.n_params),
        }

    # -- checkpoint state ----------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        """The loop state a checkpoint would hold now (step, sampler, counters)."""
        return self.checkpoints.state(self.step, self.counters)

    def _restore(self, state: dict[str, Any]) -> None:
        restored = self.checkpoints.restore(state)
        self.step, self.counters = restored.step, restored.counters
        self.resumed_from = self.step

    # -- the loop ------------------------------------------------------------------------
    def run(self, max_minutes: Optional[float] = None) -> dict[str, Any]:
        """Train to train.max_steps (or `max_minutes`, or a stop request); returns the summary."""
        deadline = time.monotonic() + 60 * max_minutes if max_minutes else math.inf
        self.status = "starting"
        self.log.log_config(to_dict(self.cfg))
        workers = None
        beat = Heartbeat(self.out).start()  # a run whose beat stops is marked dead (runs/liveness.py)
        try:
            workers = spawn_workers(self.cfg, self.task)
            self.workers = workers
            self.n_params = workers.n_params
            self.n_trainable = workers.n_trainable
            self.log.tag(PARAMS_KEY, str(self.n_params))  # `workbench predict --by model.params` reads it
            self.trainer_nodes = workers.trainer.num_nodes
            if self.resumed_from is not None:
                workers.load_trainer(self.checkpoints.trainer_path(self.step))
            self.clock = accounting.Clock(self.counters, accounting.devices_held(self.cfg))
            self.status = "running"
            self._loop(workers, deadline)
            status = "stopped" if self._stop.is_set() and self.step < self.max_steps else "finished"
            if status == "finished" and self.cfg.checkpoint.export_policy:
                self.status = "exporting"  # from the last checkpoint: the actors' memory is freed first
                workers.shutdown()
                workers = None
                self.policy = export_final(self.out, self.log.event)
            self.status = status
        except Exception as e:  # noqa: BLE001 - its traceback to error.log, its line to summary.json and the caller
            self.status, self.error = "failed", describe_error(e)
            record_failure(self.out, e)
        finally:
            beat.stop()
        summary = run_summary(
            self.cfg, status=self.status, steps=self.step, resumed_from=self.resumed_from, rows=self.earlier_rows + self.log.rows,
            counters=self.counters, n_params=self.n_params, trainer_nodes=self.trainer_nodes, restarts=self.restarts,
            events=self.log.events, generation=self.generation, error=self.error,
            extra={**self.learning.summary(self.counters.samples_trained), "pipeline": self.depth.summary()},
        )  # fmt: skip
        summary.update(reward_metrics.reward_summary(self.task, self.earlier_rows + self.log.rows, self.counters.trainer_wall_seconds))
        summary["retirement"] = self.prompts.sampler.retirement()  # No-Positive-Resampling's retired share (report.retirement_line)
        summary["policy"] = self.policy  # the exported final policy (runs/export.py), or None
        self.log.tag_health(self.earlier_rows + self.log.rows, self.cfg)
        self.log.finish(summary, self.status)
        if workers is not None:
            workers.shutdown()
        if self.error:
            raise RunFailed(self.error)
        return summary

    def _loop(self, workers: Workers, deadline: float) -> None:
        """Phases, until the last step is trained: dispatch generation, queue train steps, collect
        whatever finished. A dead trainer worker restarts the group from the last checkpoint."""
        self.loop = LoopState(last_ckpt=self.step)
        if self.step == 0 and self.cfg.eval.at_start and self.cfg.eval.enabled:
            self.loop.eval_refs[workers.evaluate(self.cfg.seed, initial=True, keep_samples=self.cfg.samples.val_cap)] = (0, self._snapshot())
        self.clock.start()
        while True:
            stopping = self._stop.is_set() or time.monotonic() > deadline
            if (self.step >= self.max_steps or stopping) and not self.loop.train_q and not self.loop.eval_refs:
                break
            if self._paused.is_set() and not self.loop.train_q:
                self._wait_while_paused()
                continue
            try:
                if not stopping and not self._paused.is_set():
                    self._dispatch_generation(workers)
                self._queue_train_steps(workers, stopping)
                self._collect(workers, deadline)
            except TrainerDied as e:
                self._restart_trainer(workers, str(e))
        if self.loop.last_ckpt != self.step:
            self._checkpoint(workers, self.loop.groups.prompt_ids(), self.loop.gen_refs)

    # -- loop phases ---------------------------------------------------------------------
    def _snapshot(self) -> dict:
        self.clock.tick()
        return accounting.compute_metrics(self.counters, self.n_params)

    def _wait_while_paused(self) -> None:
        self.clock.pause()
        t0 = time.monotonic()
        while self._paused.is_set() and not self._stop.is_set():
            time.sleep(0.05)
        self.loop.trainer_clock.paused(time.monotonic() - t0)
        self.clock.start()

    def _in_flight_groups(self) -> int:
        return len(self.loop.groups) + sum(len(p) for _, p, _ in self.loop.gen_refs.values())

    def _dispatch(self, workers, n: int) -> None:
        """A chunk of `n` prompts to the least busy generator."""
        rank = workers.least_busy(self.loop.gen_refs)
        cid, prompts = self.prompts.next_chunk(n)
        self.loop.gen_refs[workers.generate(rank, cid, prompts, self.cfg.seed * 1_000_003 + cid)] = (rank, prompts, cid)

    def _dispatch_generation(self, workers) -> None:
        """Pipeline: keep up to `max_ahead_steps` (<= k) steps of rollouts buffered or in flight.
        Otherwise: a new round (1 step for sync, k for ppo-off-policy) once the last is trained."""
        cfg, loop = self.cfg, self.loop
        alg, k = cfg.recipe.off_policy.algorithm, cfg.recipe.off_policy.k
        per_step = cfg.train.prompts_per_step
        steps_needed = self.max_steps - (self.step + len(loop.train_q))
        if steps_needed <= 0:
            return
        split = workers.split_sizes(per_step)
        short = (-self._in_flight_groups()) % per_step  # a step some dropped groups left short
        if short and len(loop.gen_refs) < 2 * workers.num_generators and (alg == "pipeline" or not loop.train_q):
            # groups dropped for a sandbox or environment error: top the step up with fresh prompts,
            # so it trains at the lag it was sent for (a whole new step on top would stay a step behind)
            self._dispatch(workers, short)
            return
        if alg == "pipeline" and self.depth.depth > 0:
            ahead = self.depth.depth  # <= k (lag.py)
            # the step the trainer is running does not count; one queued behind it does
            lag_steps = math.ceil(self._in_flight_groups() / per_step) + max(0, len(loop.train_q) - 1)
            while (
                lag_steps < ahead
                and math.ceil(self._in_flight_groups() / per_step) < steps_needed
                and len(loop.gen_refs) < 2 * workers.num_generators
            ):
                for n in split:
                    self._dispatch(workers, n)
                lag_steps += 1
        elif not loop.gen_refs and not loop.groups and not loop.train_q:  # sync, a round, or auto's depth 0
            for _ in range(min(k, steps_needed) if alg == "ppo-off-policy" else 1):
                for n in split:
                    self._dispatch(workers, n)

    def _queue_train_steps(self, workers, stopping: bool) -> None:
        """Up to two trainer steps are queued, so the trainer never idles for a round trip while
        the next batch travels; never across a checkpoint, whose state must match the trainer's."""
        loop, per_step = self.loop, self.cfg.train.prompts_per_step
        while (
            len(loop.groups) >= per_step
            and not stopping
            and self.step + len(loop.train_q) < self.max_steps
            and (not loop.train_q or (len(loop.train_q) < 2 and (self.step + 1) % self.cfg.checkpoint.every_steps != 0))
        ):
            batch = loop.groups.take(per_step)
            kept = step_samples(batch, take_notes(loop.notes, batch), self.task.train, self.cfg.samples.groups_per_step)
            waited = loop.trainer_clock.step_sent(self.counters, queue_was_empty=not loop.train_q)
            reward_row = reward_metrics.step_reward_row(self.task, batch, loop.gen_stats["rewards"], waited)
            loop.train_q.append((workers.train(batch, self.step + len(loop.train_q)), {"gen": dict(loop.gen_stats), "rewards": reward_row, "samples": kept}))
            loop.gen_stats = _fresh_gen_stats()

    def _collect(self, workers, deadline: float) -> None:
        """Wait for anything to finish (every rank of the head train step is watched: a dead rank
        leaves the others blocked) and handle it."""
        loop = self.loop
        head = loop.train_q[0][0].all_results if loop.train_q else []
        # evaluations are logged in the order they were asked for (a threaded evaluator may finish a
        # later one first): only the oldest is waited on, and those done behind it follow it
        pending = list(loop.gen_refs) + list(loop.eval_refs)[:1] + head
        if not pending:
            time.sleep(0.01)
            return
        ready, _ = ray.wait(pending, num_returns=1, timeout=0.5)
        for ref in ready:
            if ref in loop.gen_refs:
                self._on_generated(workers, ref)
            elif ref in loop.eval_refs:
                while loop.eval_refs and ray.wait([ref := next(iter(loop.eval_refs))], timeout=0)[0]:
                    step, stamp = loop.eval_refs.pop(ref)
                    result = ray.get(ref)
                    self.log.keep_samples(step, "val", result.pop(SAMPLES_KEY, []))
                    self.log.log({**result, **stamp}, step)
                    self.log.tag_health(self.earlier_rows + self.log.rows, self.cfg)  # health/<rule> tags as flags appear
        if head and any(r in head for r in ready):
            try:
                ray.get([r for r in ready if r in head])
            except ray.exceptions.RayError as e:
                raise as_group_failure(e, head) from None
            done, _ = ray.wait(head, num_returns=len(head), timeout=0)
            if len(done) == len(head):
                self._on_trained(workers, deadline)

    def _on_generated(self, workers, ref) -> None:
        loop = self.loop
        rank, prompts, cid = loop.gen_refs.pop(ref)
        try:
            chunk: Chunk = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            # the actor died: Ray restarts it; give it the current weights, redo the chunk
            self.gen_restarts.failed(rank, cid, e)  # one event a death, however often the resubmission fails
            workers.sync.resync(rank)
            loop.gen_refs[workers.generate(rank, cid, prompts, self.cfg.seed * 1_000_003 + cid)] = (rank, prompts, cid)
            return
        self.gen_restarts.returned(rank)
        if chunk.meta and not self.generation:
            self.generation = dict(chunk.meta)  # every generator runs the same backend build
        self.prompts.saw(chunk.packed)
        self.prompts.warn_if_draining(self.step, self.cfg.train.prompts_per_step, self.log.event)
        loop.groups.add(chunk.packed)
        if self.cfg.samples.groups_per_step and self.cfg.samples.max_mb and chunk.notes:
            file_notes(loop.notes, chunk.packed, chunk.notes)
        accounting.add_generated(self.counters, chunk.tokens_generated, self.n_params)
        self.learning.saw(chunk.packed)
        self.counters.gen_seconds += chunk.gen_seconds
        self.depth.generated(chunk.gen_seconds, len(chunk.packed))
        loop.gen_stats["gen_seconds"] += chunk.gen_seconds
        loop.gen_stats["swaps"] += chunk.weight_swaps
        loop.gen_stats["chunks"] += 1
        reward_metrics.add_chunk(loop.gen_stats["rewards"], chunk)
        self.env_faults.saw(getattr(chunk, "env", None))  # an environment's faults: said once; all failing stops the run

    def _on_trained(self, workers, deadline: float) -> None:
        cfg, loop = self.cfg, self.loop
        call, meta = loop.train_q.popleft()
        result: StepResult = ray.get(call.result)
        loop.trainer_clock.step_done(self.counters, queue_empty=not loop.train_q)
        round_done = not loop.gen_refs and not loop.groups and not loop.train_q
        self._finish_step(workers, result, None if result.skipped else call.weights, meta, round_done)
        stamp = self._snapshot()
        # stopping: evaluate once, after the last queued step (not after each step still in the queue)
        last = self.step >= self.max_steps or ((self._stop.is_set() or time.monotonic() > deadline) and not loop.train_q)
        if cfg.eval.enabled and (self.step % cfg.eval.every_steps == 0 or last):
            loop.eval_refs[workers.evaluate(cfg.seed + self.step, keep_samples=cfg.samples.val_cap)] = (self.step, stamp)
        if not loop.train_q and (self.step % cfg.checkpoint.every_steps == 0 or last):
            self._checkpoint(workers, loop.groups.prompt_ids(), loop.gen_refs)
            loop.last_ckpt = self.step

    def _restart_trainer(self, workers, reason: str) -> None:
        """Back to the last checkpoint (or the start) with a fresh trainer group; the steps after
        it are redone, so each step is still logged once. In-flight rollouts are dropped."""
        limit = self.cfg.resources.max_restarts
        self.restarts += 1
        if self.restarts > limit:
            raise RunFailed(f"{reason} at step {self.step + 1}; gave up after {limit} trainer restarts (resources.max_restarts)")
        died_at, ck, resumed_from = self.step + 1, self.checkpoints.latest_step(), self.resumed_from
        self.clock.tick()
        lost, lost_step, t0 = self.counters, self.step, time.monotonic()
        self._restore(self.checkpoints.latest() if ck is not None else self.checkpoints.start)
        self.resumed_from = resumed_from
        self.log.back_to(self.step)
        self.clock = accounting.Clock(self.counters, accounting.devices_held(self.cfg))
        self.loop = LoopState(last_ckpt=self.step)
        version = workers.load_trainer(self.checkpoints.trainer_path(ck) if ck is not None else None, restart=True)
        held = accounting.devices_held(self.cfg) * (time.monotonic() - t0) / 3600.0  # devices idle while restarting
        accounting.carry_discarded(self.counters, lost, lost_step - self.step, held)
        self.clock.start()
        self.log.event(
            f"{reason} during step {died_at}; restarted the trainer group from step {self.step} "
            f"(restart {self.restarts} of {limit}); the generators reloaded the weights (policy version {version})"
        )

    def _finish_step(self, workers: Workers, result: StepResult, weights_ref, meta: dict, round_done: bool) -> None:
        stats = result.row()
        if stats.get("train/nonfinite", 0.0) and stats.get("train/nonfinite_in_a_row", 0) >= self.cfg.train.max_nonfinite_in_a_row:
            raise RunFailed(
                f"{int(stats['train/nonfinite_in_a_row'])} non-finite losses in a row at step {self.step + 1} "
                f"(limit train.max_nonfinite_in_a_row={self.cfg.train.max_nonfinite_in_a_row}); "
                "lower train.lr or check the rewards"
            )
        self.step += 1
        t_sync = time.monotonic()
        workers.sync.trained(weights_ref, result.version, round_done=round_done)  # None: skipped
        sync_s = time.monotonic() - t_sync
        self.counters.weight_sync_seconds += sync_s
        accounting.add_trained(self.counters, int(stats.get("train/tokens_trained", 0)),
                               int(stats.get("train/sequences_trained", 0)), self.n_params, self.n_trainable)  # fmt: skip
        self.counters.train_seconds += stats.get("time/train_compute", 0.0)
        self.clock.tick()
        row = step_row(stats, meta["gen"], self.counters, self.n_params, sync_seconds=sync_s,
                       num_generators=workers.num_generators, sampler=self.prompts.sampler.stats())  # fmt: skip
        row.update(meta.get("rewards", {}))
        row["gen/ahead_steps"] = float(self.depth.depth)  # the depth this step's rollouts ran at
        if (change := self.depth.trained(stats.get("time/train_compute", 0.0), self.step)) is not None:
            self.log.event(change.reason)
        self.log.log(row, self.step)
        kept = meta["samples"].trained(result.trained) if meta.get("samples") else []  # the trainer's advantages
        self.log.keep_samples(self.step, "train", kept, result.version - (0 if result.skipped else 1))
        self.learning.after_step(self.step, stats, self.log, self._stop)

    def _checkpoint(self, workers, buffered: list[int], gen_refs) -> None:
        pending = buffered + [p for _, ps, _ in gen_refs.values() for p in ps]
        self.checkpoints.save(workers, self.step, self.counters, pending)
        self.log.commit(self.step)  # the steps this checkpoint covers are final in every sink
