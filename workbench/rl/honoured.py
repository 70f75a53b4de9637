"""Which recipe field the engine honours where, and the run settings it cannot honour, refused.

`RECIPE_FIELDS` is the walk: every field of `RecipeConfig` (dotted) and the one place in the
engine that acts on it, or what is refused instead. tests/rl/test_recipe_honoured.py fails when
a field appears that the table does not name, and docs/concepts/recipe.md shows the table.

`check_honoured(cfg)` runs at config load (`workbench.config.validate`): settings the engine
would silently not honour in this setup, each refused in one line naming the key, its value and
why. What needs the tokenizer, the task's data or the installed vLLM is checked in the driver's
preflight instead (engine/run/preflight.py: `check_sequences`, `check_vllm`, `check_npr_cap`),
still before Ray starts.

    check_honoured(run_config)   # ConfigError, one line, or None
"""

from __future__ import annotations

from typing import Any

from workbench.configtools import ConfigError

# field -> where the engine honours it; "refused:" says what is refused before Ray starts
RECIPE_FIELDS: dict[str, str] = {
    "name": "the MLflow param recipe.name and the run summary (engine/run/metrics.py)",
    "loss.type": "rl/losses.py `_surrogate` (cispo, ppo_clip, gspo); another value is refused at load",
    "loss.eps_max": "rl/losses.py, cispo only (inert for the other types)",
    "loss.clip_low": "rl/losses.py, ppo_clip only",
    "loss.clip_high": "rl/losses.py, ppo_clip only",
    "loss.gspo_clip_low": "rl/losses.py, gspo only",
    "loss.gspo_clip_high": "rl/losses.py, gspo only",
    "loss.tis_cap": "engine/train/trainer.py gives the loss old_logp (this forward's, detached); every loss type",
    "loss.kl_coef": "engine/train/reference.py holds the frozen start (sharded under FSDP2); the plan counts it",
    "loss.entropy_coef": "engine/train/trainer.py gives the loss the per-token entropy",
    "aggregation": "rl/step.py -> rl/aggregation.py, weights over the whole step (all three modes)",
    "advantage_norm": "rl/step.py -> rl/advantages.py (all three modes)",
    "zero_variance_filter": "rl/step.py; train.generations_per_prompt < 2 is refused for every recipe",
    "no_positive_resampling": "the run's prompt supply (engine/run) -> rl/sampler.py (off, and said, past npr_max_epochs)",
    "resample_threshold": "rl/sampler.py, with No-Positive-Resampling on",
    "npr_max_retired_share": "rl/sampler.py; refused: a cap under one prompt of the training set (preflight)",
    "npr_max_epochs": "the run's prompt supply (engine/run) -> rl/sampler.npr_off_reason",
    "fp32_head": "trainer (PolicyForward), model/sampling.py, vllm/extension.py; refused: a vLLM it cannot patch (preflight)",
    "length_control.type": "interrupt: the generators (rollout/worker.py, vllm/decode.py); penalty: rl/shaping.py",
    "length_control.budget_min": "rl/length.py; refused: a budget that does not fit max_new_tokens (preflight)",
    "length_control.budget_max": "rl/length.py; refused: a budget that does not fit max_new_tokens (preflight)",
    "length_control.answer_budget": "rl/length.py; refused: an answer that does not fit max_new_tokens (preflight)",
    "length_control.phrase": "rl/length.py; refused: a phrase the tokenizer cannot spell or fit (preflight)",
    "length_control.end_think": "rl/length.py; refused: not in the phrase (load), not spelled (preflight)",
    "length_control.l_max": "rl/shaping.py step_rewards; refused: past max_new_tokens (preflight)",
    "length_control.l_cache": "rl/shaping.py step_rewards; refused: above l_max (load, preflight)",
    "off_policy.algorithm": "engine/run/weight_sync.py and the coordinator; refused: generators it cannot keep busy (load)",
    "off_policy.k": "rl/step.py drops staler groups; pipeline: caps max_ahead_steps; ppo-off-policy: steps a round",
}


def check_honoured(cfg: Any) -> None:
    """ConfigError (one line) for a setting of the run config `cfg` the engine would not honour."""
    g, r, t = cfg.generation, cfg.resources, cfg.train
    if g.max_ahead_steps != "auto" and g.max_ahead_steps < 1:  # the coordinator would run it as 1
        raise ConfigError(f"generation.max_ahead_steps={g.max_ahead_steps}: the pipeline keeps at least one step of "
                          "rollouts ahead of the trainer; set it >= 1")  # fmt: skip
    if r.trainer_gpus > 1:  # a trainer worker computes on one device (engine/model/devices.resolve_device)
        raise ConfigError(f"resources.trainer_gpus={r.trainer_gpus:g}: a trainer worker computes on one GPU, so the "
                          f"others would sit idle; set resources.trainer_gpus=1 and resources.trainer_workers="
                          f"{r.trainer_workers * max(1, int(r.trainer_gpus))} (FSDP2 over one GPU each)")  # fmt: skip
    _check_generators_used(cfg.recipe.off_policy, g, t)
    if g.backend == "torch":
        _check_torch_generators(g, r)
    # rollout/worker.py decodes at least one prompt's whole group at once (vLLM queues the rest)
    torch_sides = [("train.generations_per_prompt", t.generations_per_prompt)] if g.backend == "torch" else []
    if g.backend == "torch" or r.evaluator_gpus == 0:  # the evaluator is a torch one then (engine/run/actors.py)
        torch_sides.append(("eval.samples_per_prompt", cfg.eval.samples_per_prompt))
    for key, group in torch_sides:
        if g.max_batch_sequences < group:
            who = "generator" if key.startswith("train") else "evaluator"
            raise ConfigError(f"generation.max_batch_sequences={g.max_batch_sequences} is below {key}={group}: the torch "
                              f"{who} decodes a prompt's {group} samples together; raise generation.max_batch_sequences "
                              f"to {group} or more")  # fmt: skip


def _check_generators_used(op: Any, g: Any, t: Any) -> None:
    """Generators the off-policy algorithm can never keep busy: a step's prompts go out in at most one
    chunk per generator, and only so many steps are in flight at once (coordinator._dispatch_generation)."""
    why = {"sync": (1, "one step's"), "ppo-off-policy": (op.k, f"recipe.off_policy.k={op.k} steps'"),
           "pipeline": (g.ahead_cap(op.k), "min(recipe.off_policy.k, generation.max_ahead_steps)="
                        f"{g.ahead_cap(op.k)} steps'")}[op.algorithm]  # fmt: skip
    steps, said = why if why[0] <= t.max_steps else (t.max_steps, f"train.max_steps={t.max_steps} steps'")
    most = steps * t.prompts_per_step  # prompt chunks in flight at most
    if g.num_generators > most:
        raise ConfigError(f"generation.num_generators={g.num_generators} with recipe.off_policy.algorithm={op.algorithm}: at "
                          f"most {said} prompts ({most} at train.prompts_per_step={t.prompts_per_step}) are generating at "
                          f"once, one chunk per generator, so {g.num_generators - most} would never generate; lower "
                          f"generation.num_generators to {most}, or raise train.prompts_per_step")  # fmt: skip


def _check_torch_generators(g: Any, r: Any) -> None:
    """The torch generator: one device per actor and no tensor parallelism."""
    if g.vllm_tensor_parallel_size > 1:
        raise ConfigError(f"generation.vllm_tensor_parallel_size={g.vllm_tensor_parallel_size} with generation.backend=torch: "
                          "the torch generator has no tensor parallelism; set generation.backend=vllm, or "
                          "vllm_tensor_parallel_size=1")  # fmt: skip
    for role in ("generator", "evaluator"):
        share = getattr(r, f"{role}_gpus")
        if share > 1:
            raise ConfigError(f"resources.{role}_gpus={share:g} with generation.backend=torch: a torch {role} computes on "
                              f"one GPU, so the others would sit idle; set resources.{role}_gpus=1"
                              + (" (more GPUs: generation.num_generators)" if role == "generator" else "")
                              + ", or generation.backend=vllm with vllm_tensor_parallel_size")  # fmt: skip
