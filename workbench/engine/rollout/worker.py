"""The backend-neutral rollout worker: what every generator and evaluator does, whatever samples.

`RolloutWorker` owns the task, the tokenizer's ids, the weight slot (a push lands there and is
taken between two decode steps: PipelineRL), prompt encoding (one owner: `hf_dir.prompt_ids`,
with the chat template when `task.chat_template`), forced-interruption budgets, scoring, the
chunk (`_make_chunk`) and validation (`evaluate`). Scoring goes through `tasks.base.submit_checks`
in batches: a decode batch's code checks are sent to the reward pool (`reward_pool`, or a local
sandbox without one) as soon as it ends, and gathered after the last one; one call decodes at a
time (`_decode_lock`) while another may wait for its verdicts (scoring.py: groups and metrics). A backend is a subclass that supplies three
things and nothing else:

    def _start(self, gpus) -> None            # set self.device, self.tokenizer; load model/engine
    def _load_weights(self, state) -> None    # copy a state dict (any float dtype) into the policy
    def _decode(self, prompts, *, seed, budgets, on_step) -> list[Completion]

and may override `_prompts_per_call(n)` (how many prompts one `_decode` call takes), `_describe()`
(extra `ping` facts, chunk meta) and `_release()`. The torch backend is `torch_backend.Generator`,
the vLLM one `vllm/backend.VllmGenerator`. Methods the coordinator calls over Ray: `generate`,
`evaluate` ("compute" concurrency group), `set_weights`, `ping` ("io" group), `shutdown`.

    gen = Generator(**generator_parts(cfg), rank=0)               # a backend; no Ray needed (parts: run/actors.py)
    chunk = gen.generate(chunk_id=0, prompt_ids=[0, 1], n_per_prompt=4, seed=1)
    gen.set_weights(trainer.get_weights(), version=1)
    gen.evaluate(None, 1, num_prompts=20, k=2, seed=0)
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

import torch

from workbench.config import GenerationConfig, ModelConfig, TaskConfig
from workbench.engine.model.hf_dir import prompt_ids as encode_prompt
from workbench.engine.model.logs import quiet_hf
from workbench.engine.batch import Chunk
from workbench.engine.rollout.scoring import reward_value_stats, validation_metrics, verdict_groups
from workbench.engine.model.sampling import Completion
from workbench.engine.weights import Weights, as_state_dict
from workbench.rl.recipe import LengthControlConfig

try:  # concurrency groups are a Ray feature; the classes stay usable without Ray (tests)
    import ray

    io_group = ray.method(concurrency_group="io")
    compute_group = ray.method(concurrency_group="compute")
except ImportError:  # pragma: no cover
    io_group = compute_group = lambda f: f  # noqa: E731

# One generate/evaluate call at a time; weight pushes and pings answered meanwhile. A task with code
# checks allows two, one decoding (`_decode_lock`): a chunk waits for its verdicts while the next
# one decodes. (Two for every task made PipelineRL's k = 2 runs drop whole steps as stale in
# tests/engine/run/test_coordinator.py; a single task keeps one.)
CONCURRENCY_GROUPS = {"io": 1, "compute": 1}
CODE_CONCURRENCY_GROUPS = {"io": 1, "compute": 2}


@dataclass(frozen=True)
class PendingUpdate:
    """Weights pushed to a generator and not yet loaded: taken between two decode steps.
    `forced`: load even when not newer (a trainer restarted from a checkpoint)."""

    weights: Weights
    version: int
    forced: bool = False


def concurrency_groups(sandboxed: bool) -> dict[str, int]:
    """The Ray concurrency groups of a generator / evaluator actor for a task with code or not."""
    return CODE_CONCURRENCY_GROUPS if sandboxed else CONCURRENCY_GROUPS


class RolloutWorker:
    """Sampling, scoring and validation over a backend; see the module docstring.

    Its config parts (chosen by the driver, run/actors.generator_parts): the model, the task, the
    `generation:` section, the recipe's length control and FP32 head, its GPU share (0: the CPU)
    and torch threads. `rank`: the generator's (the evaluator is -1)."""

    device: str
    tokenizer: Any

    def __init__(
        self, model: ModelConfig, task: TaskConfig, generation: GenerationConfig, *, length_control: LengthControlConfig,
        fp32_head: bool, gpus: float = 0.0, threads: int = 1, rank: int = 0, reward_pool: Any = None,
        reward_functions: Optional[list] = None, validate_with: str = "pass", max_steps: int = 0, prompts_per_step: int = 0,
        env: Any = None,
    ):  # fmt: skip
        from workbench.rl.reward_functions import load_reward_functions
        from workbench.tasks.base import load_task

        quiet_hf()
        self.model_cfg, self.generation, self.fp32_head = model, generation, fp32_head
        self.rank = rank
        torch.set_num_threads(threads)
        self.task = load_task(task)
        # reward.functions: called on every scored batch (tasks.base.check_batch); [] the task's +1 / -1
        self.task.reward_functions = load_reward_functions(reward_functions or [])
        self.validate_with = validate_with  # reward.validate_with: "task": the task's checker decides validation
        self.max_steps, self.prompts_per_step = max_steps, prompts_per_step  # train.*: the functions' trainer_state
        # code checks: the run's RewardPool (actors.py), else a sandbox of our own (`_sandbox`)
        self.reward_pool = reward_pool
        self._local_sandbox: Any = None
        self.version = 0
        self._pending: Optional[PendingUpdate] = None
        self._lock = threading.Lock()
        self._decode_lock = threading.Lock()  # the model / engine: one call decodes at a time
        self._swaps = 0
        self._prompt_cache: dict[tuple[str, int], list[int]] = {}
        self._prompt_texts: dict[tuple[str, int], str] = {}  # the same prompts decoded, for the kept samples
        self.env_settings = None  # task.name env: the episodes' budgets (`env`: the run's env: section)
        if self.task.env is not None:
            from workbench.config import EnvConfig, env_settings

            self.env_settings = env_settings(env or EnvConfig(), generation.max_new_tokens, task.prompt_key,
                                             task.system_prompt or "")  # fmt: skip
        self._start(gpus)
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id
        self._interruption = None
        if length_control.type == "interrupt":
            from workbench.rl.length import ForcedInterruption

            self._interruption = ForcedInterruption.from_config(length_control, generation.max_new_tokens, self.tokenizer)
        self._env = None  # task.name env: its episodes (episodes.py), run with env_settings
        if self.env_settings is not None:
            from workbench.engine.rollout.episodes import EnvRollouts

            self._env = EnvRollouts(self.task, self.tokenizer, self.env_settings, self.eos_id)

    # -- backend hooks ---------------------------------------------------------------------
    def _start(self, gpus: float) -> None:
        """Set self.device and self.tokenizer; load the model or start the engine."""
        raise NotImplementedError

    def _load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Copy `state` into the policy (cast to the backend's own dtype)."""
        raise NotImplementedError

    def _decode(self, prompts: list[list[int]], *, seed: int, budgets: Optional[list[int]], on_step: Any,
                limits: Optional[list[int]] = None) -> list[Completion]:  # fmt: skip
        """One completion per prompt; `budgets`: thinking budgets (forced interruption) or None;
        `on_step()` between decode steps takes a pending push and returns the version in force;
        `limits`: each prompt's most new tokens (an episode's turn), else generation.max_new_tokens."""
        raise NotImplementedError

    def _prompts_per_call(self, n_per_prompt: int) -> int:
        """Prompts per `_decode` call (each with `n_per_prompt` samples)."""
        return max(1, self.generation.max_batch_sequences // n_per_prompt)

    def _describe(self) -> dict[str, Any]:
        """Backend facts for `ping` and each chunk's meta."""
        return {}

    def _prefix_counts(self) -> tuple[int, int]:
        """(prompt tokens a prefix cache served, prompt tokens asked for) since the last call; (0, 0) without one."""
        return 0, 0

    def _release(self) -> None:
        """Free the model / engine (and its device memory)."""

    # -- weights (io group: runs while a generate call is decoding) ------------------------
    @io_group
    def set_weights(self, weights: Weights, version: int, force: bool = False) -> int:
        """Put `weights` in the slot, taken between two decode steps. Only a newer version replaces
        what is held, unless `force` (a trainer restarted from a checkpoint: its version is the
        policy's now, though older). A forced load pending stays forced when newer weights follow it."""
        with self._lock:
            pending = self._pending
            if force:
                self._pending = PendingUpdate(weights, version, forced=True)
            elif pending is None or version > pending.version:
                self._pending = PendingUpdate(weights, version, forced=pending is not None and pending.forced)
        return version

    @io_group
    def ping(self) -> dict[str, Any]:
        return {"rank": self.rank, "version": self.version, "pid": os.getpid(), **self._describe()}

    def _apply_pending(self) -> int:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None and (pending.forced or pending.version > self.version):
            self._load_weights(as_state_dict(pending.weights))
            self.version = pending.version
            self._swaps += 1
        return self.version

    # -- prompts, sampling, scoring ----------------------------------------------------------
    def _examples(self, split: str) -> list:
        return self.task.train if split == "train" else self.task.val

    def _prompt_ids(self, split: str, prompt_id: int) -> list[int]:
        key = (split, prompt_id)
        if key not in self._prompt_cache:
            from workbench.tasks.chat import prompt_input
            from workbench.tasks.mixture import part_for

            ex = self._examples(split)[prompt_id]  # a conversation, the system prompt: tasks/chat.py
            text = prompt_input(part_for(self.task, ex), ex)
            self._prompt_cache[key] = encode_prompt(self.tokenizer, text, chat_template=self.task.chat_template)
        return self._prompt_cache[key]

    def _prompt_text(self, split: str, prompt_id: int) -> str:
        """The prompt as the model saw it (the system turn, the chat template): its ids decoded, for the kept samples."""
        key = (split, prompt_id)
        if key not in self._prompt_texts:  # an environment's prompts are noted as its episodes render them (_episodes)
            self._prompt_texts[key] = self.tokenizer.decode(self._prompt_ids(split, prompt_id), skip_special_tokens=False)
        return self._prompt_texts[key]

    def _sandbox(self) -> Any:
        """Where code checks run: the run's RewardPool; without one (no Ray: tests, scripts) a
        local sandbox of this process. None for a task without code (nothing runs code then)."""
        if not self.task.sandboxed:
            return None
        if self.reward_pool is not None:
            return self.reward_pool
        if self._local_sandbox is None:
            from workbench.tasks.sandbox import LocalSandbox, require_sandbox

            require_sandbox()  # fail closed
            self._local_sandbox = LocalSandbox(workers=1).__enter__()
        return self._local_sandbox

    def _code_first(self, split: str, prompt_ids: list[int]) -> list[int]:
        """A task mix's code prompts first (stable): their checks then run while the rest decodes.
        A single task keeps its order."""
        if not self.task.parts or not self.task.sandboxed:
            return prompt_ids
        from workbench.tasks.mixture import part_for

        examples = self._examples(split)
        return sorted(prompt_ids, key=lambda p: not part_for(self.task, examples[p]).sandboxed)

    def _submit_checks(self, split: str, prompt_ids: list[int], n: int, outs: list[Completion], texts: list[str]):
        """Start checking prompt-major completions (`n` per prompt; `texts`: them decoded); `.get()`
        gives the verdicts. Code checks go to the reward pool at once and run while this worker decodes on."""
        from workbench.tasks.base import submit_checks

        examples = self._examples(split)
        return submit_checks(self.task, texts, [examples[p] for p in prompt_ids for _ in range(n)], self._sandbox(),
                             completion_ids=[list(c.tokens) for c in outs], trainer_state=self._trainer_state(),
                             task_verdict=split == "val" and self.validate_with == "task")  # fmt: skip

    def _trainer_state(self) -> Any:
        """TRL's `trainer_state` for reward functions: `global_step` is the trainer's optimizer steps as
        this worker last heard them, the version of the newest weights pushed to it (a version counts
        the optimizer updates applied: engine/run/weight_sync.py), taken or still pending."""
        from workbench.rl.reward_functions import RewardState

        with self._lock:
            p = self._pending
            step = p.version if p is not None and (p.forced or p.version > self.version) else self.version
        epoch = step * self.prompts_per_step / max(1, len(self.task.train))
        return RewardState(global_step=step, max_steps=self.max_steps, epoch=epoch)

    def _texts(self, outs: list[Completion]) -> list[str]:
        """The completions decoded once: what the checks score and the kept samples show (an
        episode: everything after its prompt, the turns' chat markers kept)."""
        if self._env is not None:
            return [self.tokenizer.decode(c.tokens, skip_special_tokens=False) for c in outs]
        return [self.tokenizer.decode(c.tokens[:-1] if c.tokens and c.tokens[-1] == self.eos_id else c.tokens,
                                      skip_special_tokens=True) for c in outs]  # fmt: skip

    def _sample(self, split: str, prompt_ids: list[int], n: int, seed: int, in_flight: bool) -> list[Completion]:
        """`n` completions per prompt (prompt-major); interruption budgets on training prompts only."""
        prompts = [self._prompt_ids(split, p) for p in prompt_ids for _ in range(n)]
        budgets = None
        if self._interruption is not None and split == "train":
            rng = torch.Generator().manual_seed(seed + 1)
            budgets = [self._interruption.draw_budget(rng) for _ in prompts]
        if in_flight:
            self._apply_pending()
        return self._decode(prompts, seed=seed, budgets=budgets, on_step=self._apply_pending if in_flight else None)

    def _scored(self, split: str, prompt_ids: list[int], n: int, seed: int, in_flight: bool) -> "Scored":
        """`n` samples per prompt, their texts and their checks started at once: one decode call, or
        an environment's episodes (_episodes)."""
        if self._env is not None:
            return self._episodes(split, prompt_ids, n, seed, in_flight)
        outs = self._sample(split, prompt_ids, n, seed, in_flight=in_flight)
        texts = self._texts(outs)
        return Scored(outs, texts, self._submit_checks(split, prompt_ids, n, outs, texts))

    def _episodes(self, split: str, prompt_ids: list[int], n: int, seed: int, in_flight: bool) -> "Scored":
        """An environment task's `n` episodes per prompt, their turns decoded together (episodes.py), scored."""
        from workbench.engine.rollout.episodes import EnvStats, episode_turns
        from workbench.tasks.env.scoring import episode_verdicts

        rounds = itertools.count()
        on_step = self._apply_pending if in_flight else None
        if in_flight:
            self._apply_pending()

        def decode(prompts: list[list[int]], limits: list[int]) -> list[Completion]:
            return self._decode(prompts, seed=seed + 7919 * next(rounds), budgets=None, on_step=on_step, limits=limits)

        examples = self._examples(split)
        exs = [examples[p] for p in prompt_ids]
        outs, episodes = self._env.run(exs, n, decode)
        for gi, p in enumerate(prompt_ids):  # the prompt as the group's episodes saw it (the tools' schema included)
            if outs[gi * n].prompt_tokens:
                self._prompt_texts[(split, p)] = self.tokenizer.decode(outs[gi * n].prompt_tokens, skip_special_tokens=False)
        verdicts = episode_verdicts(self.task, episodes, [ex for ex in exs for _ in range(n)],
                                    threshold=self.env_settings.pass_threshold, trainer_state=self._trainer_state(),
                                    task_verdict=split == "val" and self.validate_with == "task")  # fmt: skip
        stats = EnvStats.of(episodes)
        stats.prefix_cached, stats.prefix_prompt = self._prefix_counts()
        turns = [episode_turns(ep, len(c.prompt_tokens), self.tokenizer) for ep, c in zip(episodes, outs)]
        return Scored(outs, self._texts(outs), _Ready(verdicts), stats, turns)

    # -- the calls the coordinator makes -----------------------------------------------------
    @compute_group
    def generate(
        self, chunk_id: int, prompt_ids: list[int], n_per_prompt: int, seed: int, in_flight: bool = True
    ) -> Chunk:
        """Sample `n_per_prompt` completions for each training prompt.

        in_flight=True (PipelineRL): weights pushed meanwhile are taken between decode steps.
        in_flight=False: the whole chunk uses the weights in force when it starts.
        """
        prompt_ids = self._code_first("train", prompt_ids)
        outs: list[Completion] = []
        pending, texts = [], []
        with self._decode_lock:
            t0 = time.perf_counter()
            swaps0 = self._swaps
            self._apply_pending()
            step = self._prompts_per_call(n_per_prompt)
            env_stats, turns = None, None
            for s in range(0, len(prompt_ids), step):
                part = self._scored("train", prompt_ids[s : s + step], n_per_prompt, seed + s, in_flight)
                pending.append(part.checks)  # checked while we decode on
                texts += part.texts
                outs += part.outs
                if part.env is not None:
                    env_stats = part.env if env_stats is None else env_stats.merged(part.env)
                    turns = (turns or []) + part.turns
            swaps = self._swaps - swaps0
        t_wait = time.perf_counter()  # the next chunk may decode from here on
        verdicts = [v for p in pending for v in p.get()]
        wait = time.perf_counter() - t_wait
        chunk = self._make_chunk(chunk_id, prompt_ids, n_per_prompt, outs, verdicts, t0, swaps, wait, self._describe(), texts,
                                 turns)  # fmt: skip
        chunk.env = env_stats
        return chunk

    def _make_chunk(
        self, chunk_id: int, prompt_ids: list[int], n_per_prompt: int, outs: list, verdicts: list, t0: float,
        swaps: int, reward_wait: float, meta: Optional[dict] = None, texts: Optional[list[str]] = None,
        turns: Optional[list[str]] = None,
    ) -> Chunk:  # fmt: skip
        """Groups from the completions (prompt-major order), their verdicts and texts (the kept samples'; an
        environment's episodes also turn by turn)."""
        from workbench.tasks.base import verdict_counts

        groups, dropped = verdict_groups(chunk_id, prompt_ids, n_per_prompt, outs, verdicts, texts, turns)
        for g in groups:  # the kept samples show the prompt rendered as tokenised
            if g.note is not None:
                g.note["prompt"] = self._prompt_text("train", g.prompt_id)
        return Chunk(
            chunk_id=chunk_id,
            groups=groups,
            generator_rank=self.rank,
            gen_seconds=time.perf_counter() - t0,
            tokens_generated=sum(len(c.tokens) for c in outs),
            prompt_tokens=sum(len(c.prompt_tokens) for c in outs),
            weight_swaps=swaps,
            meta=meta or {},
            verdicts=verdict_counts(verdicts),
            reward_values=reward_value_stats(verdicts),
            reward_wait=reward_wait,
            dropped_groups=dropped,
            notes=[g.note for g in groups],
        )

    @compute_group
    def evaluate(self, weights: Optional[Weights], version: int, num_prompts: int, k: int, seed: int,
                 keep_samples: int = 0) -> dict[str, Any]:  # fmt: skip
        """Sampled mean pass rate over `k` generations per held-out prompt (weights loaded first):
        the first `num_prompts` of the validation set, or of each domain's for a task mix
        (metric names and the overall rate: engine/rollout/scoring.py). `keep_samples`: the first
        that many completions also come back, as records under SAMPLES_KEY (runs/samples.py)."""
        from workbench.runs.samples import SAMPLES_KEY, val_records
        from workbench.tasks.mixture import indices_by_domain

        ids = self._code_first("val", [i for idx in indices_by_domain(self.task.val).values() for i in idx[:num_prompts]])
        pending, texts, kept, turns = [], [], [], []
        tokens = 0
        with self._decode_lock:
            t0 = time.perf_counter()
            if weights is not None:
                self._load_weights(as_state_dict(weights))
                self.version = version
            step = self._prompts_per_call(k)
            for s in range(0, len(ids), step):
                batch = ids[s : s + step]
                part = self._scored("val", batch, k, seed + s, in_flight=False)
                tokens += sum(len(c.tokens) for c in part.outs)
                pending.append(part.checks)
                texts += part.texts
                turns += part.turns or []
                kept += part.outs[: max(0, keep_samples - len(kept))]
        verdicts = [v for p in pending for v in p.get()]
        samples = val_records(self.task.val, ids, k, texts, kept, verdicts, version, keep_samples,
                              prompt_text=lambda p: self._prompt_text("val", p), turns=turns or None)  # fmt: skip
        return {
            **({SAMPLES_KEY: samples} if samples else {}),
            # with val/pass_rate_se: the standard error over prompts, the noise a curve fit should expect
            **validation_metrics(self.task.val, ids, k, verdicts),
            "val/samples_per_prompt": float(k),
            "val/tokens": float(tokens),
            "time/eval": time.perf_counter() - t0,
            "policy/version": float(version),
        }

    def shutdown(self) -> None:
        """Release the model / engine and its device memory (tests; a Ray actor just exits)."""
        if self._local_sandbox is not None:
            self._local_sandbox.__exit__(None, None, None)
            self._local_sandbox = None
        self._release()


@dataclass
class Scored:
    """One `_decode` call's samples (or an environment's episodes): completions, their texts, verdicts on
    their way (`.get()`), and for an environment its EnvStats and each episode's turns (JSON, for the samples)."""

    outs: list
    texts: list[str]
    checks: Any
    env: Any = None
    turns: Optional[list[str]] = None


class _Ready:
    """Verdicts already in hand, with PendingChecks' `get()` (an environment's episodes are scored as they end)."""

    def __init__(self, verdicts: list) -> None:
        self._verdicts = verdicts

    def get(self) -> list:
        return self._verdicts
