"""`checkpoint:`: how often a run saves, how many full checkpoints it keeps, and the final export.

Nothing here needs a check beyond its types: the run's checkpoint store is workbench/runs/checkpoint.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CheckpointConfig:
    every_steps: int = 50
    """Write an atomic checkpoint every this many steps: a resume starts from the last and redoes the steps after it (every tracking store still holds each step once)."""
    keep: int = 2
    """Full checkpoints (weights and AdamW state, what a resume needs) kept in the run folder; an older one is pruned to its policy snapshot (the weights alone, in the model's own dtype: 2 bytes a parameter for a bf16 model against 12), so `workbench export --step N` works for every step ever saved."""
    export_policy: bool = True
    """When the run finishes, write its final policy as a Hugging Face folder to <run>/policy/ (`workbench export` does any step)."""
