"""`train:`: the trainer and its optimizer, and their check (the mismatch's bound and rows among them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from workbench.configtools import ConfigError


@dataclass
class TrainConfig:
    prompts_per_step: int = 16
    """Prompts (groups) per optimizer step."""
    generations_per_prompt: int = 8
    """Completions sampled per prompt: the group its advantages are centred in (>= 2)."""
    lr: float = 5e-7
    """AdamW's peak learning rate, reached after warmup_steps."""
    warmup_steps: int = 100
    """Steps of linear learning-rate warm-up from 0."""
    weight_decay: float = 0.01
    """AdamW's decoupled weight decay."""
    adam_eps: float = 1e-15
    """AdamW's epsilon (the paper's tiny value keeps small gradients from being damped)."""
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW's (beta1, beta2)."""
    grad_clip: float = 1.0
    """Clip the gradient's global norm to this value."""
    micro_batch_size: int = 64
    """At most this many sequences per forward/backward micro-batch."""
    micro_batch_tokens: int = 16384
    """At most this many padded tokens (rows x longest row) per micro-batch."""
    max_steps: int = 100
    """Optimizer steps in the run (`workbench run --max-steps` overrides it)."""
    max_nonfinite_in_a_row: int = 3
    """Stop the run after this many steps in a row whose loss was not finite (each such update is skipped)."""
    gradient_checkpointing: bool = False
    """Recompute layer activations in the backward pass (less memory, more compute)."""
    learning_check_steps: int = 3
    """The not-learning watch: warn when no sampled completion has passed after this many steps."""
    min_trained_share: float = 0.05
    """The not-learning watch: warn when fewer than this share of sampled completions were trained on over learning_check_steps."""
    stop_if_not_learning: bool = False
    """Stop the run (after the step in flight) when the not-learning watch fires."""
    mismatch_bound: list[float] = field(default_factory=lambda: [0.5, 2.0])
    """[lo, hi]: train/mismatch_frac is the share of measured tokens whose ratio pi_trainer / pi_generator falls outside it."""
    mismatch_rows: Optional[int] = None
    """Rows a step also measures the mismatch on under the earlier versions that sampled them (in a pipelined run, most tokens): no-grad forwards with those versions' weights, kept between steps (a copy of the trained weights per version a token can lag, generation.max_ahead_steps; counted by the memory plan). 0: only the tokens the trainer's current version sampled (no copy, no forward); null: 16 with one trainer worker, 0 with several (where it is refused)."""

    def lagged_rows(self, trainer_workers: int) -> int:
        """mismatch_rows as the trainer runs it (null: 16 with one worker, 0 with several)."""
        if self.mismatch_rows is None:
            return 16 if trainer_workers == 1 else 0
        return self.mismatch_rows


def validate_train(t: TrainConfig, trainer_workers: int) -> None:
    """Step sizes, the learning rate and the not-learning watch; `train.mismatch_bound` an ordered
    pair around 1, and `mismatch_rows` only with one trainer worker (`trainer_workers`)."""
    if t.prompts_per_step < 1:
        raise ConfigError("train.prompts_per_step must be >= 1")
    if t.generations_per_prompt < 2:
        raise ConfigError("train.generations_per_prompt must be >= 2 (advantages need a group)")
    if t.micro_batch_size < 1:
        raise ConfigError("train.micro_batch_size must be >= 1")
    if t.micro_batch_tokens < 1:
        raise ConfigError("train.micro_batch_tokens must be >= 1")
    if t.learning_check_steps < 1 or not 0 <= t.min_trained_share <= 1:
        raise ConfigError("train.learning_check_steps must be >= 1 and train.min_trained_share in [0, 1]")
    if t.max_steps < 1:
        raise ConfigError("train.max_steps must be >= 1")
    if t.lr <= 0:
        raise ConfigError("train.lr must be > 0")
    b = t.mismatch_bound
    if len(b) != 2 or not 0 < b[0] <= 1 <= b[1]:
        raise ConfigError(f"train.mismatch_bound must be [lo, hi] with 0 < lo <= 1 <= hi, got {list(b)}")
    rows = t.mismatch_rows
    if rows is not None and rows < 0:
        raise ConfigError(f"train.mismatch_rows must be >= 0 (0: measure only the current version's tokens), got {rows}")
    if rows and trainer_workers > 1:
        raise ConfigError(
            f"train.mismatch_rows={rows} needs one trainer worker (earlier versions' weights are kept whole; "
            f"this run has resources.trainer_workers={trainer_workers}): set it to 0 or null"
        )
