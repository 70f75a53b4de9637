"""`workbench plan`: will this config fit? Memory per device and role, before anything starts.

    workbench plan --config configs/quickstart.yaml                      # the running Ray cluster, else this host
    workbench plan --model tests/data/model_configs/qwen2.5-7b --gpus-per-node 8 --gpu-memory 80
    workbench plan --config my.yaml --gpu-memory 24 --set train.micro_batch_tokens=4096
    HF_HUB_OFFLINE=1 workbench plan --config configs/gpu/qwen7b-math-8gpu.yaml --model ~/qwen7b/config.json --prompt-tokens 2048

Prints the table (build.plan_for / memory.format_plan) and the verdict; exits 0 when the plan
fits, 1 when it does not, 2 on bad input (one line). It needs no network (sources.py): a hub id is
read from the HF cache, or from `--model DIR_OR_CONFIG`; the dataset is never downloaded; a .gguf
file is read from its header, never converted.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="will it fit? the GPU/host memory plan of a config, before launch",
                       description="Print each role's memory (trainer, generators, evaluator) on its device, from the model's\n"
                                   "config.json alone (no weights are read; a .gguf file: its header, nothing converted), and a\n"
                                   "verdict: fits, or the setting that fixes it.\n"
                                   "The cluster is the one given, else the connected Ray cluster's, else this host (a CPU run).\n"
                                   "No network is needed: a hub id's config.json comes from the Hugging Face cache (or --model),\n"
                                   "and the longest prompt from --prompt-tokens, the task's cached prompts, or the model's bound.",
                       epilog="examples:\n  workbench plan --config configs/quickstart.yaml\n"
                              "  workbench plan --model tests/data/model_configs/qwen2.5-7b --gpus-per-node 8 --gpu-memory 80\n"
                              "  HF_HUB_OFFLINE=1 workbench plan --config configs/gpu/qwen7b-math-8gpu.yaml \\\n"
                              "      --model tests/data/model_configs/qwen2.5-7b/config.json --prompt-tokens 2048",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="run config YAML (default: the built-in defaults)")
    p.add_argument("--model", metavar="DIR_OR_CONFIG",
                   help="a model folder with config.json, a config.json file, or a .gguf file (sets model.path; no weights "
                        "are read or converted)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. train.micro_batch_tokens=4096 (repeatable)")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: the Ray cluster's, else a CPU plan)")
    p.add_argument("--gpu-memory", metavar="GB", help="memory of one GPU in GB, e.g. 24 or 80")
    p.add_argument("--nodes", type=int, help="nodes (default 1)")
    p.add_argument("--prompt-tokens", type=int, help="longest prompt in tokens (default: the task's cached prompts, "
                                                      "tokenized; else the model's context less generation.max_new_tokens)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return p


def _connect_running(cfg: Any) -> bool:
    """Connect to the running Ray cluster (resources.ray_address, $RAY_ADDRESS, or the recorded
    `workbench cluster`) to read its figures; False when there is none (this host is planned)."""
    import os

    from workbench.engine.cluster import connect, recorded_address
    from workbench.engine.cluster.local import reachable

    address = cfg.resources.ray_address or os.environ.get("RAY_ADDRESS") or recorded_address()
    if not address or (address.count(":") == 1 and not reachable(address)):
        return False
    connect(address=address, start_if_missing=False)
    return True


def run(args: argparse.Namespace) -> int:
    from workbench.config import load_run_config
    from workbench.engine.plan.build import cluster_shape, plan_for

    overrides = list(args.overrides) + ([f"model.path={args.model}"] if args.model else [])
    cfg = load_run_config(args.config, overrides)
    figures = (args.gpus_per_node, args.gpu_memory, args.nodes)
    connected = all(f is None for f in figures) and _connect_running(cfg)
    try:
        cluster = cluster_shape(*figures, cfg=cfg)
    finally:
        if connected:
            import ray

            ray.shutdown()
    plan = plan_for(cfg, cluster, prompt=args.prompt_tokens)
    if args.json:
        print(json.dumps({"fits": plan.fits, "verdict": plan.verdict, "params": plan.shape.params, "notes": plan.notes,
                          "problems": plan.problems,
                          "roles": [{"name": r.name, "device": r.device, "budget": r.budget, "need": r.need,
                                     "terms": r.terms, "fits": r.fits} for r in plan.roles]}))  # fmt: skip
    else:
        print(plan.table())
    return 0 if plan.fits else 1
