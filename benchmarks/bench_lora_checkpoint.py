"""Bytes per checkpoint of a `model.lora` run, on the real architectures, against a full one.

    .venv/bin/python benchmarks/bench_lora_checkpoint.py [--json] [--old]

The two LoRA recipes: configs/gpu/qwen0.5b-gsm8k-1gpu.yaml with `model.lora.rank=16` (the 7B
recipe's adapters: rank 16 on every linear layer) and configs/gpu/qwen7b-lora-1gpu.yaml. No hub
access and no weights are needed: each model is built from its config.json shapes
(tests/data/model_configs/qwen2.5-{0.5b,7b}, Qwen2.5's own) on the `meta` device and wrapped with
PEFT as the trainer wraps it (engine/model/lora.apply_lora). Only the adapters are materialised,
with their AdamW states after one update (the optimizer and scheduler the trainer builds), and the
checkpoint is written as the trainer writes it (engine/train/fsdp.save_state, trainer_meta.pt).

Printed per recipe:
- measured: the LoRA checkpoint's bytes on disk (trainer_dcp/ + trainer_meta.pt);
- computed: what the same step held before checkpoints left the frozen base out (the base in the
  compute dtype, plus the adapters and their states) and a full fine-tuning checkpoint (fp32
  weights and AdamW's two moments: 12 bytes a parameter), from the parameter counts;
- `--old` also measures the former (base in the checkpoint) on the 0.5B model, whose bf16 base
  fits in memory (the 7B's 15 GB does not fit on a 24 GB machine beside the rest): it checks the
  computed figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RECIPES = {  # name -> (run config, overrides, the model's config.json shapes)
    "qwen2.5-0.5b": ("configs/gpu/qwen0.5b-gsm8k-1gpu.yaml", {"model.lora.rank": 16}, "tests/data/model_configs/qwen2.5-0.5b"),
    "qwen2.5-7b": ("configs/gpu/qwen7b-lora-1gpu.yaml", {}, "tests/data/model_configs/qwen2.5-7b"),
}


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def lora_trainer_parts(config: str, overrides: dict, shapes: str):
    """(policy root, optimizer, scheduler, counts) as a LoRA trainer holds them, the base on `meta`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from workbench.config import load_run_config
    from workbench.engine.model.lora import adapter_state, apply_lora
    from workbench.engine.model.policy import PolicyForward
    from workbench.engine.train.optim import build_optimizer, build_scheduler

    cfg = load_run_config(REPO / config, {"tracking.mlflow": False, **overrides})
    compute = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(cfg.model.dtype, torch.bfloat16)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(REPO / shapes), dtype=compute)
        model = apply_lora(model, cfg.model.lora)
    for module in model.modules():  # the adapters alone get memory: fp32, as apply_lora leaves them
        for name, p in list(module._parameters.items()):
            if p is not None and p.requires_grad:
                module._parameters[name] = torch.nn.Parameter(torch.randn(p.shape, dtype=torch.float32) * 0.01)
    trainable = list(adapter_state(model).values())
    optimizer = build_optimizer(trainable, cfg.train)
    scheduler = build_scheduler(optimizer, cfg.train)
    for p in trainable:
        p.grad = torch.full_like(p, 1e-3)
    optimizer.step()  # AdamW's two moments now exist, as after any trained step
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    adapters = sum(p.numel() for p in trainable)
    counts = {"base_params": sum(p.numel() for p in model.parameters()) - adapters, "adapter_params": adapters,
              "base_bytes_per_param": torch.empty(0, dtype=compute).element_size(), "compute_dtype": str(compute)[6:]}
    return cfg, PolicyForward(model, cfg.recipe.fp32_head), optimizer, scheduler, counts


def save_like_trainer(path: Path, root, optimizer, scheduler) -> int:
    """What Trainer.save writes (trainer_dcp/ by fsdp.save_state, trainer_meta.pt): its bytes."""
    import torch

    from workbench.engine.train import fsdp
    from workbench.runs.checkpoint import TRAINER_DCP

    path.mkdir(parents=True)
    fsdp.save_state(path / TRAINER_DCP, root, optimizer)
    torch.save({"scheduler": scheduler.state_dict(), "version": 1, "nonfinite_in_a_row": 0,
                "torch_rng": torch.get_rng_state(), "workers": 1}, path / "trainer_meta.pt")
    return folder_bytes(path)


def measure_old(root, optimizer, folder: Path) -> int:
    """The former checkpoint, base included: the frozen base materialised (random, its own dtype) and saved whole."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    for module in root.modules():
        for name, p in list(module._parameters.items()):
            if p is not None and p.is_meta:
                module._parameters[name] = torch.nn.Parameter(torch.zeros(p.shape, dtype=p.dtype), requires_grad=False)
    model_sd, optim_sd = get_state_dict(root, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(folder), no_dist=True)
    return folder_bytes(folder)


def measure(name: str, old: bool) -> dict:
    import warnings

    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    config, overrides, shapes = RECIPES[name]
    cfg, root, optimizer, scheduler, c = lora_trainer_parts(config, overrides, shapes)
    with tempfile.TemporaryDirectory(prefix="bench-lora-ck-") as tmp:
        lora_bytes = save_like_trainer(Path(tmp) / "step", root, optimizer, scheduler)
        base_bytes = c["base_params"] * c["base_bytes_per_param"]
        out = {"recipe": name, "config": config, "overrides": overrides, "lora": {"rank": cfg.model.lora.rank,
               "target_modules": cfg.model.lora.target_modules}, **c,
               "lora_checkpoint_bytes_measured": lora_bytes,
               "with_base_bytes_computed": lora_bytes + base_bytes,
               "full_finetune_bytes_computed": c["base_params"] * 12}  # fmt: skip
        if old:
            out["with_base_bytes_measured"] = measure_old(root, optimizer, Path(tmp) / "old")
    return out


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", choices=sorted(RECIPES), action="append", help="default: both")
    ap.add_argument("--old", action="store_true", help="also measure the former checkpoint (base included) on 0.5B")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = [measure(r, args.old and r == "qwen2.5-0.5b") for r in (args.recipe or list(RECIPES))]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        print(f"{r['recipe']} ({r['config']}{' ' + str(r['overrides']) if r['overrides'] else ''}; rank {r['lora']['rank']}, {r['lora']['target_modules']}): "
              f"{r['base_params'] / 1e9:.2f}B base parameters, {r['adapter_params'] / 1e6:.1f}M in the adapters")
        print(f"  LoRA checkpoint (adapters + AdamW), measured:      {gb(r['lora_checkpoint_bytes_measured'])}")
        print(f"  with the {r['compute_dtype']} base as before, computed:        {gb(r['with_base_bytes_computed'])}"
              + (f" (measured {gb(r['with_base_bytes_measured'])})" if "with_base_bytes_measured" in r else ""))
        print(f"  full fine-tuning (fp32 + AdamW), computed:          {gb(r['full_finetune_bytes_computed'])}")
        print(f"  the LoRA checkpoint is {r['lora_checkpoint_bytes_measured'] / r['with_base_bytes_computed']:.1%} of the former, "
              f"{r['lora_checkpoint_bytes_measured'] / r['full_finetune_bytes_computed']:.2%} of a full one")


if __name__ == "__main__":
    main()
