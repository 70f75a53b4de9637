"""TRL's, PEFT's and verl's names, mapped to the workbench's: config keys (`ALIASES`) and logged
metrics (`METRIC_ALIASES`); the one table of each.

Each config row is (tool, their name, our key, note). TRL names are `GRPOConfig` fields (with the
transformers `TrainingArguments` it extends), `GRPOTrainer`'s arguments (`reward_funcs`,
`peft_config`) and TRL's script `ModelConfig` (`model_name_or_path`, `use_peft`, `lora_r`); PEFT
names are `peft.LoraConfig` fields, met under `model.lora` (`section`); verl names are dotted paths
in verl's `ppo_trainer.yaml`. `ours` is a dotted RunConfig key, or None where the workbench has no
such setting (the note says what to do instead). The note says where the meaning differs; empty:
the same meaning. Each metric row is (tool, the metric it logs, ours in docs/metrics.md, note).

Two readers: the unknown-key error (`configtools.from_dict` suggests `train.lr (TRL's
learning_rate)` for `train.learning_rate`), and the manual's page docs/reference/trl-verl.md,
generated from these tables by docs/_hooks/reference.py. tests/test_config_aliases.py checks that
every `ours` key exists in RunConfig and every `ours` metric is in the metrics glossary.

    alias_for("train.learning_rate").hint()   # "did you mean train.lr (TRL's learning_rate)?"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

Tool = Literal["TRL", "PEFT", "verl"]


@dataclass(frozen=True)
class Alias:
    tool: Tool
    theirs: str
    """The name as written in the tool's config (verl: the full dotted path)."""
    ours: Optional[str]
    """The workbench config key; None: the workbench has no such setting."""
    note: str = ""
    """Where the meaning differs (empty: the same meaning)."""
    section: str = ""
    """The workbench section this name is met in and only there (PEFT's `r` as `model.lora.r`); empty: anywhere."""
    example: str = ""
    """Our key written out, where its value is shaped unlike theirs (the error shows it); empty: none."""

    def hint(self) -> str:
        """What the unknown-key error says for a key that is this tool's name."""
        if self.ours is None:
            return f"{self.tool}'s {self.theirs} has no workbench key: {self.note}"
        example = f", e.g. {self.example}" if self.example else ""
        return f"did you mean {self.ours} ({self.tool}'s {self.theirs}){example}?"


_A = Alias
ALIASES: tuple[Alias, ...] = (
    # --- TRL: GRPOConfig and the TrainingArguments it extends ---
    _A("TRL", "learning_rate", "train.lr",
       "Both are AdamW's peak rate; ours is reached after train.warmup_steps of linear warm-up, then held."),
    _A("TRL", "beta", "recipe.loss.kl_coef",
       "The same k3 KL estimator to the starting weights; 0 (both defaults) turns it off."),
    _A("TRL", "num_generations", "train.generations_per_prompt",
       "Completions per prompt: the group whose mean centres the advantages."),
    _A("TRL", "max_completion_length", "generation.max_new_tokens",
       "With an environment, TRL's bounds the whole conversation after the prompt; here each turn has "
       "generation.max_new_tokens and the whole episode, prompt included, env.max_episode_tokens."),
    _A("TRL", "max_tool_calling_iterations", "env.max_turns",
       "TRL counts tool rounds: k allows k + 1 generations, which is env.max_turns = k + 1 (the last turn's calls are not run in either)."),
    _A("TRL", "environment_factory", "task.env",
       "The same class, named package.module:Class, with task.name: env; its episodes' budgets are the env: section."),
    _A("TRL", "per_device_train_batch_size", "train.prompts_per_step",
       "TRL counts completions per device per micro-step; ours counts prompts (groups) per optimizer step, "
       "for the whole run: per_device_train_batch_size x processes x gradient_accumulation_steps / num_generations."),
    _A("TRL", "gradient_accumulation_steps", "train.micro_batch_size",
       "No count to set: a step's train.prompts_per_step groups are cut into micro-batches of at most "
       "train.micro_batch_size sequences and train.micro_batch_tokens tokens, with the same gradient whatever the cut."),
    _A("TRL", "loss_type", "recipe.loss.type",
       "TRL's loss_type also picks the averaging, which is recipe.aggregation here: grpo is sample, dapo and bnpo "
       "are token; cispo is recipe.loss.type cispo with token averaging. Our default averages per prompt (ScaleRL)."),
    _A("TRL", "epsilon", "recipe.loss.clip_low",
       "The lower clip of the ratio; it applies with recipe.loss.type ppo_clip."),
    _A("TRL", "epsilon_high", "recipe.loss.clip_high",
       "With recipe.loss.type ppo_clip. With TRL's loss_type cispo, epsilon_high is CISPO's cap: recipe.loss.eps_max."),
    _A("TRL", "temperature", "generation.temperature",
       "Ours samples from the full softmax: there is no top_p or top_k."),
    _A("TRL", "max_prompt_length", None,
       "prompts are never truncated (recent TRL deprecates it too); keep long prompts out of the data."),
    _A("TRL", "num_iterations", None,
       "each sample is trained on once. Several optimizer steps per round of generation are "
       "recipe.off_policy.algorithm ppo-off-policy with recipe.off_policy.k steps."),
    _A("TRL", "scale_rewards", "recipe.advantage_norm",
       "group is prompt, batch is batch, none is none; our default is batch (ScaleRL)."),
    _A("TRL", "importance_sampling_level", "recipe.loss.type",
       "sequence is recipe.loss.type gspo (with recipe.loss.gspo_clip_low and gspo_clip_high)."),
    _A("TRL", "cast_lm_head_to_fp32", "recipe.fp32_head", "Ours defaults to true."),
    _A("TRL", "vllm_importance_sampling_cap", "recipe.loss.tis_cap",
       "Ours truncates each token's weight at the cap (TRL's token_truncate mode); null turns it off."),
    _A("TRL", "use_vllm", "generation.backend", "true is vllm; ours otherwise samples with torch."),
    _A("TRL", "vllm_gpu_memory_utilization", "generation.vllm_gpu_memory_utilization"),
    _A("TRL", "vllm_tensor_parallel_size", "generation.vllm_tensor_parallel_size"),
    _A("TRL", "num_generations_eval", "eval.samples_per_prompt",
       "Ours scores validation prompts on their own schedule, eval.every_steps."),
    _A("TRL", "max_grad_norm", "train.grad_clip"),
    _A("TRL", "warmup_steps", "train.warmup_steps"),
    _A("TRL", "weight_decay", "train.weight_decay"),
    _A("TRL", "adam_epsilon", "train.adam_eps"),
    _A("TRL", "adam_beta1", "train.adam_betas", "Ours is the pair [beta1, beta2]."),
    _A("TRL", "adam_beta2", "train.adam_betas", "Ours is the pair [beta1, beta2]."),
    _A("TRL", "max_steps", "train.max_steps"),
    _A("TRL", "gradient_checkpointing", "train.gradient_checkpointing"),
    _A("TRL", "save_steps", "checkpoint.every_steps"),
    _A("TRL", "save_total_limit", "checkpoint.keep"),
    _A("TRL", "eval_steps", "eval.every_steps", "0 turns evaluation off (TRL's eval_strategy \"no\"): no evaluator is started."),
    _A("TRL", "output_dir", "out_dir"),
    _A("TRL", "run_name", "name", "The run's folder (runs/<name>) and its MLflow (and W&B) run name."),
    _A("TRL", "num_train_epochs", None,
       "runs are counted in steps: train.max_steps x train.prompts_per_step prompts in all."),
    _A("TRL", "top_p", None,
       "the workbench samples from the full softmax at generation.temperature, with no top-p or top-k: the "
       "log-probs the loss compares are then the full distribution's (a truncated sampler's are not); remove it."),
    _A("TRL", "top_k", None,
       "the workbench samples from the full softmax at generation.temperature, with no top-k or top-p; remove it."),
    _A("TRL", "reward_funcs", "reward.functions",
       "GRPOTrainer's argument: a list of {fn: package.module:function, weight: 1.0}, each an importable "
       "function called as TRL calls it (prompts, completions, the dataset's columns, trainer_state). "
       "A reward model's hub id is not taken.", example="reward.functions: [{fn: my_rewards:accuracy}]"),
    _A("TRL", "reward_weights", "reward.functions",
       "Each function's own weight: {fn: ..., weight: 2.0} in reward.functions (default 1.0).",
       example="reward.functions: [{fn: my_rewards:accuracy, weight: 2.0}]"),
    _A("TRL", "peft_config", "model.lora",
       "GRPOTrainer's argument: PEFT's LoraConfig(r, lora_alpha, lora_dropout, target_modules) is "
       "model.lora: {rank, alpha, dropout, target_modules}.", example="model.lora: {rank: 16, alpha: 32}"),
    _A("TRL", "use_peft", "model.lora",
       "No switch: setting model.lora (e.g. model.lora.rank=8) turns LoRA on; null is full fine-tuning.",
       example="model.lora.rank=8"),
    _A("TRL", "lora_r", "model.lora.rank", "TRL's ModelConfig; setting it turns LoRA on."),
    _A("TRL", "lora_alpha", "model.lora.alpha", "TRL's ModelConfig (PEFT's own name too)."),
    _A("TRL", "lora_dropout", "model.lora.dropout", "TRL's ModelConfig (PEFT's own name too)."),
    _A("TRL", "lora_target_modules", "model.lora.target_modules", "TRL's ModelConfig."),
    _A("TRL", "model_name_or_path", "model.path",
       "TRL's ModelConfig: a hub id or a local folder (or, here, a .gguf file or builtin:tiny)."),
    _A("TRL", "model_revision", "model.revision", "TRL's ModelConfig."),
    _A("TRL", "torch_dtype", "model.dtype", "auto, bfloat16 or float32 (float16 is refused: no loss scaling)."),
    _A("TRL", "bf16", "model.dtype", "true is bfloat16, which auto picks on a CUDA GPU."),
    _A("TRL", "report_to", "tracking.wandb.project",
       "wandb is tracking.wandb.project (W&B beside MLflow); mlflow is tracking.mlflow, on by default; none is "
       "tracking.mlflow false. The run folder's metrics.jsonl is always written.", example="tracking.wandb.project=NAME"),
    _A("TRL", "logging_steps", None,
       "every step's metrics are logged as the step ends (metrics.jsonl, MLflow, W&B): there is no interval to set."),
    _A("TRL", "log_completions", "tracking.wandb.log_completions",
       "On by default: every step's kept samples (samples.groups_per_step groups, each evaluation's "
       "samples.val_cap) go to W&B as the tables completions and val/completions; they are always in "
       "<run>/samples/ (workbench samples, the dashboard's Samples tab).", example="tracking.wandb.log_completions=true"),
    # --- PEFT: peft.LoraConfig's names, written under model.lora ---
    _A("PEFT", "r", "model.lora.rank", "PEFT's LoraConfig.r.", section="model.lora"),
    # --- verl: ppo_trainer.yaml ---
    _A("verl", "data.train_batch_size", "train.prompts_per_step",
       "verl's rollout batch, in prompts, is split into train_batch_size / ppo_mini_batch_size optimizer steps; "
       "ours is one step. verl's split is recipe.off_policy.algorithm ppo-off-policy with recipe.off_policy.k "
       "that many steps."),
    _A("verl", "actor_rollout_ref.actor.ppo_mini_batch_size", "train.prompts_per_step",
       "Prompts per optimizer step (each with its group of completions), as in verl."),
    _A("verl", "actor_rollout_ref.rollout.n", "train.generations_per_prompt"),
    _A("verl", "data.max_response_length", "generation.max_new_tokens"),
    _A("verl", "data.max_prompt_length", None,
       "prompts are never truncated or filtered; keep long prompts out of the data."),
    _A("verl", "algorithm.adv_estimator", "recipe.advantage_norm",
       "Every workbench recipe centres rewards in their group (grpo); gae and the other critic or "
       "leave-one-out estimators have no counterpart. verl's grpo divides by the group's std: advantage_norm prompt."),
    _A("verl", "algorithm.norm_adv_by_std_in_grpo", "recipe.advantage_norm",
       "true is prompt, false is none (Dr. GRPO); ours also has batch (ScaleRL, the default)."),
    _A("verl", "actor_rollout_ref.actor.clip_ratio_low", "recipe.loss.clip_low",
       "With recipe.loss.type ppo_clip."),
    _A("verl", "actor_rollout_ref.actor.clip_ratio_high", "recipe.loss.clip_high",
       "With recipe.loss.type ppo_clip."),
    _A("verl", "actor_rollout_ref.actor.clip_ratio", "recipe.loss.clip_low",
       "Ours sets the two sides apart: recipe.loss.clip_low and recipe.loss.clip_high."),
    _A("verl", "actor_rollout_ref.actor.policy_loss.loss_mode", "recipe.loss.type",
       "vanilla is ppo_clip, gspo is gspo."),
    _A("verl", "actor_rollout_ref.actor.loss_agg_mode", "recipe.aggregation",
       "token-mean is token, seq-mean-token-mean is sample; ours adds prompt (ScaleRL, the default)."),
    _A("verl", "actor_rollout_ref.actor.use_kl_loss", "recipe.loss.kl_coef",
       "No switch: a kl_coef above 0 turns the KL loss on."),
    _A("verl", "actor_rollout_ref.actor.kl_loss_coef", "recipe.loss.kl_coef",
       "The KL loss to the starting weights, estimated with k3 (verl's default kl_loss_type, low_var_kl)."),
    _A("verl", "actor_rollout_ref.actor.entropy_coeff", "recipe.loss.entropy_coef"),
    _A("verl", "actor_rollout_ref.actor.optim.lr", "train.lr"),
    _A("verl", "actor_rollout_ref.actor.optim.lr_warmup_steps", "train.warmup_steps"),
    _A("verl", "actor_rollout_ref.actor.optim.weight_decay", "train.weight_decay"),
    _A("verl", "actor_rollout_ref.actor.grad_clip", "train.grad_clip"),
    _A("verl", "actor_rollout_ref.actor.ppo_epochs", None,
       "each sample is trained on once (see recipe.off_policy for several steps per round)."),
    _A("verl", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "train.micro_batch_size",
       "Sequences per micro-batch on each trainer worker."),
    _A("verl", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "train.micro_batch_tokens",
       "Always on here (verl's use_dynamic_bsz): padded tokens per micro-batch."),
    _A("verl", "actor_rollout_ref.model.path", "model.path"),
    _A("verl", "actor_rollout_ref.model.enable_gradient_checkpointing", "train.gradient_checkpointing"),
    _A("verl", "actor_rollout_ref.rollout.name", "generation.backend", "vllm is vllm; ours has torch, not sglang."),
    _A("verl", "actor_rollout_ref.rollout.temperature", "generation.temperature",
       "Ours samples from the full softmax: there is no top_p or top_k."),
    _A("verl", "actor_rollout_ref.rollout.gpu_memory_utilization", "generation.vllm_gpu_memory_utilization"),
    _A("verl", "actor_rollout_ref.rollout.tensor_model_parallel_size", "generation.vllm_tensor_parallel_size"),
    _A("verl", "actor_rollout_ref.rollout.val_kwargs.n", "eval.samples_per_prompt"),
    _A("verl", "data.train_files", "task.path", "One file (or a hub dataset id with task.name hf)."),
    _A("verl", "data.prompt_key", "task.prompt_key"),
    _A("verl", "trainer.total_training_steps", "train.max_steps"),
    _A("verl", "trainer.total_epochs", None,
       "runs are counted in steps: train.max_steps x train.prompts_per_step prompts in all."),
    _A("verl", "trainer.save_freq", "checkpoint.every_steps"),
    _A("verl", "trainer.max_actor_ckpt_to_keep", "checkpoint.keep"),
    _A("verl", "trainer.test_freq", "eval.every_steps"),
    _A("verl", "trainer.val_before_train", "eval.at_start"),
    _A("verl", "trainer.n_gpus_per_node", "resources.num_gpus"),
    _A("verl", "trainer.nnodes", "resources.nodes"),
    _A("verl", "trainer.experiment_name", "name"),
    _A("verl", "trainer.project_name", "tracking.experiment"),
    _A("verl", "trainer.logger", "tracking.wandb.project",
       "wandb is tracking.wandb.project; mlflow is tracking.mlflow, on by default; console is the run's "
       "own printout. The run folder's metrics.jsonl is always written.", example="tracking.wandb.project=NAME"),
    _A("verl", "trainer.log_val_generations", "samples.val_cap",
       "Validation completions kept per evaluation in <run>/samples/ (workbench samples RUN --val)."),
    _A("verl", "actor_rollout_ref.model.lora_rank", "model.lora.rank",
       "verl's 0 (no LoRA) is model.lora: null; any rank turns LoRA on."),
    _A("verl", "actor_rollout_ref.model.lora_alpha", "model.lora.alpha"),
    _A("verl", "actor_rollout_ref.model.target_modules", "model.lora.target_modules"),
    _A("verl", "actor_rollout_ref.rollout.top_p", None,
       "the workbench samples from the full softmax at generation.temperature, with no top-p or top-k; remove it."),
    _A("verl", "actor_rollout_ref.rollout.top_k", None,
       "the workbench samples from the full softmax at generation.temperature, with no top-k or top-p; remove it."),
    _A("verl", "custom_reward_function.path", "reward.functions",
       "verl's is a .py file whose custom_reward_function.name is called as compute_score(data_source, "
       "solution_str, ground_truth, extra_info); ours is a list of {fn: package.module:function}, an importable "
       "module, each called as TRL calls it: (prompts, completions, the dataset's columns) -> a list of floats.",
       example="reward.functions: [{fn: my_rewards:accuracy}]"),
    _A("verl", "custom_reward_function.name", "reward.functions",
       "The function's name: the part after the colon in {fn: package.module:function}.",
       example="reward.functions: [{fn: my_rewards:accuracy}]"),
)


@dataclass(frozen=True)
class MetricAlias:
    tool: Tool
    theirs: str
    """The metric as the tool logs it (TRL: GRPOTrainer's and Trainer's log keys; verl: its tracking keys)."""
    ours: Optional[str]
    """The workbench metric (docs/metrics.md's name, placeholders as written there); None: not logged."""
    note: str = ""
    """Where the meaning differs (empty: the same meaning)."""


_M = MetricAlias
METRIC_ALIASES: tuple[MetricAlias, ...] = (
    # --- TRL: GRPOTrainer's logs (eval_ before a name: the same over the eval set) ---
    _M("TRL", "reward", "train/reward_mean", "The mean of each completion's weighted sum of the reward functions."),
    _M("TRL", "reward_std", None,
       "not logged; train/zero_variance_frac is the share whose group's rewards were all equal."),
    _M("TRL", "frac_reward_zero_std", "train/zero_variance_frac",
       "TRL counts groups; ours counts the step's fresh completions in such groups (the same share when "
       "groups are whole), the ones the zero-variance filter dropped."),
    _M("TRL", "rewards/<name>/mean", "rewards/<name>/mean", "Over the samples the function gave a value (its Nones left out)."),
    _M("TRL", "rewards/<name>/std", "rewards/<name>/std"),
    _M("TRL", "eval_rewards/<name>/mean", "val/rewards/<name>/mean"),
    _M("TRL", "eval_reward", "val/pass_rate",
       "Ours is the share of validation completions that pass (mean@k over eval.samples_per_prompt), "
       "the curve the forecast fits; each function's mean is val/rewards/<name>/mean."),
    _M("TRL", "completions/mean_length", "train/response_len"),
    _M("TRL", "completions/clipped_ratio", "train/truncation_rate",
       "The share of completions cut by the length limit before EOS."),
    _M("TRL", "kl", "train/kl_mean", "With recipe.loss.kl_coef above 0 (TRL: beta); the same k3 estimator."),
    _M("TRL", "entropy", "train/entropy"),
    _M("TRL", "clip_ratio/region_mean", "train/clip_fraction",
       "The share of tokens whose ratio was clipped (CISPO: capped), both sides together."),
    _M("TRL", "clip_ratio/low_mean", "train/clip_fraction", "Ours counts both sides in one share."),
    _M("TRL", "clip_ratio/high_mean", "train/clip_fraction", "Ours counts both sides in one share."),
    _M("TRL", "sampling/importance_sampling_ratio/mean", "train/tis_ratio_mean",
       "With recipe.loss.tis_cap (TRL: vllm_importance_sampling_correction): pi_old / pi_gen before the cap."),
    _M("TRL", "sampling/sampling_logp_difference/mean", "train/mismatch_kl",
       "Ours measures the generator/trainer gap as a KL (k3) per token, each under the version that sampled it."),
    _M("TRL", "num_tokens", "tokens/trained",
       "TRL counts the prompt and completion tokens seen; tokens/generated counts the completions sampled."),
    _M("TRL", "loss", "train/loss"),
    _M("TRL", "grad_norm", "train/grad_norm"),
    _M("TRL", "learning_rate", "train/lr"),
    _M("TRL", "epoch", None, "not logged: runs are counted in steps (compute/*, tokens/*, samples/* count the work)."),
    # --- verl: its tracking keys (trainer.logger) ---
    _M("verl", "critic/score/mean", "train/reward_mean", "The reward function's score, before any KL in the reward."),
    _M("verl", "critic/rewards/mean", "train/reward_mean",
       "verl's is the score less its in-reward KL penalty (algorithm.use_kl_in_reward); ours puts KL in the "
       "loss (recipe.loss.kl_coef), so the reward is the score."),
    _M("verl", "critic/advantages/mean", None,
       "not logged; each kept sample's advantage is in <run>/samples/ (workbench samples)."),
    _M("verl", "response_length/mean", "train/response_len"),
    _M("verl", "response_length/clip_ratio", "train/truncation_rate"),
    _M("verl", "actor/pg_loss", "train/pg_loss"),
    _M("verl", "actor/pg_clipfrac", "train/clip_fraction", "Ours counts both sides (verl's pg_clipfrac_lower too)."),
    _M("verl", "actor/ppo_kl", None,
       "not logged; train/ratio_mean, train/ratio_min and train/ratio_max show how far the trained policy moved."),
    _M("verl", "actor/entropy", "train/entropy"),
    _M("verl", "actor/kl_loss", "train/kl_mean", "With recipe.loss.kl_coef above 0 (verl: use_kl_loss)."),
    _M("verl", "actor/grad_norm", "train/grad_norm"),
    _M("verl", "actor/lr", "train/lr"),
    _M("verl", "training/rollout_probs_diff_mean", "train/mismatch_kl",
       "verl's is the mean |p_rollout - p_trainer| per token; ours a KL (k3) estimate of the same gap."),
    _M("verl", "val-core/<data_source>/reward/mean@<n>", "val/pass_rate/<domain>",
       "The validation score per data source: val/pass_rate/<domain> in a task mix, val/pass_rate over all."),
    _M("verl", "timing_s/gen", "time/generate"),
    _M("verl", "timing_s/update_actor", "time/train"),
    _M("verl", "perf/throughput", "throughput/samples_per_second",
       "verl's counts tokens per second per GPU; ours trained samples per second of wall time."),
    _M("verl", "perf/total_num_tokens", "tokens/trained"),
)


def alias_for(key: str) -> Optional[Alias]:
    """The row for an unknown dotted key written in TRL's or verl's words, else None.

    A key matches a row when its trailing parts are the row's name's trailing parts: all of a
    one-part TRL name (`train.learning_rate`, `learning_rate`), at least two of a verl path
    (`rollout.n`, `actor_rollout_ref.rollout.n`), so a bare `n` or `lr` is no match; a row with a
    `section` matches its name in that section only (`model.lora.r`). The row matching the most
    parts wins; on a tie, the first in the table.
    """
    parts = key.split(".")
    best, best_n = None, 0
    for alias in ALIASES:
        if alias.section:  # met only in its section: PEFT's `r` as model.lora.r, never a bare r
            if key == f"{alias.section}.{alias.theirs}" and best_n < 99:
                best, best_n = alias, 99
            continue
        theirs = alias.theirs.split(".")
        n = 0
        while n < min(len(parts), len(theirs)) and parts[-1 - n] == theirs[-1 - n]:
            n += 1
        if n >= min(2, len(theirs)) and n > best_n:
            best, best_n = alias, n
    return best
