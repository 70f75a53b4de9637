"""`reward:`: how completions are rewarded (the task's checker, or TRL-style reward functions), and its check.

The functions' shape is checked by workbench/rl/reward_functions.py, which also calls them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class RewardConfig:
    functions: list[dict[str, Any]] = field(default_factory=list)
    """Reward functions called as TRL calls them: [{fn: package.module:function, weight: 1.0, pass: true}, ...]; the only one, or the one with pass: true, decides pass / fail (its value > 0; several, none marked: the task's checker); None from any: not applicable; empty: the task's checker, +1 pass / -1 fail."""
    validate_with: Literal["pass", "task"] = "pass"
    """What decides a validation sample's verdict (val/pass_rate, the curve): pass, the pass function (as in training); task, the task's own checker, so a training reward a trick fools cannot fool the curve."""


def validate_reward(reward: RewardConfig) -> None:
    """`reward.functions`' shape (nothing of the user's is imported here)."""
    from workbench.rl.reward_functions import check_reward_functions

    check_reward_functions(reward.functions)
