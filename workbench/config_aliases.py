"""TRL's and verl's config names, mapped to workbench config keys: the one table of them.

Each row is (tool, their name, our key, note). TRL names are `GRPOConfig` fields (with the
transformers `TrainingArguments` it extends); verl names are dotted paths in verl's
`ppo_trainer.yaml`. `ours` is a dotted RunConfig key, or None where the workbench has no such
setting (the note says what to do instead). The note says where the meaning differs; empty: the
same meaning.

Two readers: the unknown-key error (`configtools.from_dict` suggests `train.lr (TRL's
learning_rate)` for `train.learning_rate`), and the manual's page docs/reference/trl-verl.md,
generated from this table by docs/_hooks/reference.py. tests/test_config_aliases.py checks that
every `ours` key exists in RunConfig.

    alias_for("train.learning_rate").hint()   # "did you mean train.lr (TRL's learning_rate)?"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

Tool = Literal["TRL", "verl"]


@dataclass(frozen=True)
class Alias:
    tool: Tool
    theirs: str
    """The name as written in the tool's config (verl: the full dotted path)."""
    ours: Optional[str]
    """The workbench config key; None: the workbench has no such setting."""
    note: str = ""
    """Where the meaning differs (empty: the same meaning)."""

    def hint(self) -> str:
        """What the unknown-key error says for a key that is this tool's name."""
        if self.ours is None:
            return f"{self.tool}'s {self.theirs} has no workbench key: {self.note}"
        return f"did you mean {self.ours} ({self.tool}'s {self.theirs})?"


_A = Alias
ALIASES: tuple[Alias, ...] = (
    # --- TRL: GRPOConfig and the TrainingArguments it extends ---
    _A("TRL", "learning_rate", "train.lr",
       "Both are AdamW's peak rate; ours is reached after train.warmup_steps of linear warm-up, then held."),
    _A("TRL", "beta", "recipe.loss.kl_coef",
       "The same k3 KL estimator to the starting weights; 0 (both defaults) turns it off."),
    _A("TRL", "num_generations", "train.generations_per_prompt",
       "Completions per prompt: the group whose mean centres the advantages."),
    _A("TRL", "max_completion_length", "generation.max_new_tokens"),
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
    _A("TRL", "eval_steps", "eval.every_steps"),
    _A("TRL", "output_dir", "out_dir"),
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
)


def alias_for(key: str) -> Optional[Alias]:
    """The row for an unknown dotted key written in TRL's or verl's words, else None.

    A key matches a row when its trailing parts are the row's name's trailing parts: all of a
    one-part TRL name (`train.learning_rate`, `learning_rate`), at least two of a verl path
    (`rollout.n`, `actor_rollout_ref.rollout.n`), so a bare `n` or `lr` is no match. The row
    matching the most parts wins; on a tie, the first in the table.
    """
    parts = key.split(".")
    best, best_n = None, 0
    for alias in ALIASES:
        theirs = alias.theirs.split(".")
        n = 0
        while n < min(len(parts), len(theirs)) and parts[-1 - n] == theirs[-1 - n]:
            n += 1
        if n >= min(2, len(theirs)) and n > best_n:
            best, best_n = alias, n
    return best
