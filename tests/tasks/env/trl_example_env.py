# An environment_factory class from TRL's own documentation, copied verbatim (class body unchanged).
#
# Source: TRL docs, docs/source/grpo_trainer.md, "Agent Training" > "Environments"
#   https://github.com/huggingface/trl/blob/main/docs/source/grpo_trainer.md
#   https://huggingface.co/docs/trl/main/en/grpo_trainer#environments
# Copyright 2020-2026 The HuggingFace Team. Licensed under the Apache License, Version 2.0
# (http://www.apache.org/licenses/LICENSE-2.0); distributed on an "AS IS" BASIS, WITHOUT WARRANTIES
# OR CONDITIONS OF ANY KIND. Only the `import random` it needs is kept from the snippet; its
# GRPOTrainer(...) call is left out. Not part of the workbench: a fixture for
# tests/tasks/env/test_env_trl_example.py.

import random


class IncrementEnv:
    # Reserved methods
    def reset(self, **kwargs) -> str | None:  # required; called at the start of each rollout
        self.counter = 0
        self.target = random.randint(1, 6)  # self-sample the task
        return f"Increment the counter by {self.target}."  # returned string becomes the prompt

    def get_reward(self) -> float:  # optional: the environment scores itself from its own state
        return float(self.counter == self.target)

    # Public methods (exposed as tools)
    def increment(self, step: int) -> int:
        """
        Increment the internal counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The updated counter value.
        """
        self.counter += step
        return self.counter
