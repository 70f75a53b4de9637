"""The memory plan at real shapes (no GPU needed): what `workbench plan` says for published models.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_plan.py [--brief]

Each case is a published config.json (tests/data/model_configs) on a cluster shape, with the
settings a user would pick; the table of every term is printed (--brief: the verdicts only).
The figures are the plan's arithmetic (workbench/engine/plan/memory.py); the CPU checks of that
arithmetic are tests/engine/plan/test_plan_reality.py (trainer peaks, vLLM's KV cache).
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
MODELS = os.path.join(ROOT, "tests", "data", "model_configs")
LONG = {"generation.max_new_tokens": 4096, "train.micro_batch_tokens": 16384}  # RL with chain of thought
CASES = [
    ("Qwen2.5-7B on 8 x 80 GB (H100), 4 FSDP trainers + 4 vLLM generators, checkpointing",
     "qwen2.5-7b", (8, 80), {**LONG, "train.gradient_checkpointing": True}),
    ("Qwen2.5-7B on 8 x 80 GB without gradient checkpointing", "qwen2.5-7b", (8, 80), LONG),
    ("Qwen2.5-7B on 8 x 24 GB (A10G)", "qwen2.5-7b", (8, 24), {**LONG, "train.gradient_checkpointing": True}),
    ("Qwen2.5-1.5B on one 24 GB A10G shared 0.5 / 0.5 (env/ray-cluster.yaml)", "qwen2.5-1.5b", (1, 24),
     {**LONG, "train.micro_batch_tokens": 4096, "train.gradient_checkpointing": True}),
    ("Qwen2.5-0.5B on one 24 GB GPU shared 0.5 / 0.5", "qwen2.5-0.5b", (1, 24),
     {**LONG, "train.micro_batch_tokens": 8192, "train.gradient_checkpointing": True}),
    ("Llama-3.1-8B on 2 nodes x 8 x 80 GB, 8 trainers + 4 TP=2 generators", "llama-3.1-8b", (8, 80),
     {**LONG, "train.gradient_checkpointing": True, "resources.trainer_gpus": 1, "resources.trainer_workers": 8,
      "resources.generator_gpus": 2, "generation.num_generators": 4, "generation.vllm_tensor_parallel_size": 2,
      "generation.backend": "vllm", "_nodes": 2}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brief", action="store_true", help="verdicts only")
    args = ap.parse_args()
    from workbench.config import run_config_from_dict
    from workbench.engine.plan import cluster_shape, plan_for

    for title, model, (gpus, gb), sets in CASES:
        sets = dict(sets)
        nodes = sets.pop("_nodes", 1)
        cfg = run_config_from_dict({}, {**sets, "model.path": os.path.join(MODELS, model)})
        plan = plan_for(cfg, cluster_shape(gpus, gb, nodes), prompt=512)
        print(f"== {title}")
        print(plan.verdict if args.brief else plan.table(), end="\n\n")


if __name__ == "__main__":
    main()
