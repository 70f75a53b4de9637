"""The weight push with `model.lora` against the full-weight push, on the same model: bytes and seconds.

    .venv/bin/python benchmarks/bench_lora_push.py [--model quickstart|smollm2] [--rank 8] [--repeat 5] [--json]
    .venv/bin/python benchmarks/bench_lora_push.py --model smollm2 --backend vllm   # the vLLM-CPU generator

In-process (no Ray): a real `Trainer` and a real torch `Generator` built from the run config, once
with full fine-tuning and once with `model.lora` (all-linear, `--rank`), in the quickstart's dtype
(bfloat16 compute where the CPU has it). Per arm: the push's bytes (`FlatWeights.nbytes`, what Ray's
object store carries), the trainer's `get_weights` (gathered and cast into the flat buffer) and the
generator's load of it (`set_weights` then the swap a decode step takes), each the median of
`--repeat`. `smollm2`: SmolLM2-135M-Instruct from the GGUF `make setup` installs (converted once).
`--backend vllm`: the generator is the vLLM one (vllm-cpu here; SmolLM2 only: vLLM has no LoRA for
the quickstart's GPT-2), whose load is the in-place weight reload, or for LoRA the adapter written
in PEFT's layout and reloaded into its slot (engine/rollout/vllm/adapter.py).
Ray's object-store copy is left out: it scales with the bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def run_config(model: str, rank: int | None, cache: str, backend: str = "torch"):
    from workbench.config import load_run_config
    from workbench.engine.model.gguf import smollm2_path

    overrides: dict = {"model.cache_dir": cache, "tracking.mlflow": False, "generation.backend": backend}
    if model == "smollm2":
        overrides.update({"model.path": str(smollm2_path()), "task.chat_template": True})
    if rank is not None:
        overrides["model.lora"] = {"rank": rank}
    return load_run_config(REPO / "configs" / "quickstart.yaml", overrides)


def measure(model: str, rank: int | None, repeat: int, cache: str, backend: str = "torch") -> dict:
    """One arm: the push's bytes, get_weights' and the generator's load's median seconds."""
    from workbench.engine.model.load import resolved_path
    from workbench.engine.rollout.torch_backend import Generator
    from workbench.engine.rollout.vllm.backend import VllmGenerator
    from workbench.engine.run.actors import actor_config, generator_parts, trainer_parts
    from workbench.engine.train.trainer import Trainer
    from workbench.tasks.base import load_task

    cfg = run_config(model, rank, cache, backend)
    cfg.model = resolved_path(cfg.model)
    cfg = actor_config(cfg, load_task(cfg.task))
    gen_cls = VllmGenerator if backend == "vllm" else Generator
    trainer, gen = Trainer(**trainer_parts(cfg)), gen_cls(**generator_parts(cfg))
    gets, loads, flat = [], [], None
    for version in range(1, repeat + 1):
        t0 = time.perf_counter()
        flat = trainer.get_weights()
        t1 = time.perf_counter()
        gen.set_weights(flat, version)
        gen._apply_pending()  # what the decode loop calls between two decode steps
        loads.append(time.perf_counter() - t1)
        gets.append(t1 - t0)
    row = {"arm": "full" if rank is None else f"lora r{rank}", "params": trainer.num_params, "bytes": flat.nbytes,
           "tensors": len(flat.layout), "get_s": statistics.median(gets), "load_s": statistics.median(loads)}  # fmt: skip
    gen.shutdown()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("quickstart", "smollm2"), default="quickstart")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cache", default="~/.cache/workbench/models")
    ap.add_argument("--backend", choices=("torch", "vllm"), default="torch", help="the generator that loads the push")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.backend == "vllm" and a.model != "smollm2":
        ap.error("--backend vllm takes --model smollm2 (vLLM has no LoRA for the quickstart's GPT-2)")
    rows = [measure(a.model, r, a.repeat, a.cache, a.backend) for r in (None, a.rank)]
    if a.json:
        print(json.dumps(rows))
        return
    print(f"{a.model}: the weight push to the {a.backend} generator, full fine-tuning vs LoRA (median of {a.repeat})")
    print(f"{'arm':<10} {'bytes':>14} {'tensors':>8} {'get_weights s':>14} {'generator load s':>17}")
    for r in rows:
        print(f"{r['arm']:<10} {r['bytes']:>14,} {r['tensors']:>8} {r['get_s']:>14.4f} {r['load_s']:>17.4f}")
    print(f"the LoRA push is {rows[0]['bytes'] / rows[1]['bytes']:.0f}x smaller")


if __name__ == "__main__":
    main()
