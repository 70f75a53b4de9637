"""Measure one trainer's peak host memory on CPU, in its own process (run by test_plan_reality.py).

    python tests/engine/plan/trainer_peak.py DIR --hidden 256 --layers 4 --inter 512 --vocab 1000 \
        --rows 8 --prompt 24 --completion 1000 --micro-tokens 8192 [--lora-rank 16] \
        [--arch llama --heads 8 --kv-heads 2 --dtype bfloat16]

Builds a random Qwen2-shaped (or Llama-shaped) model in DIR (config.json, weights, a character
tokenizer), then
records the resident set before the model is loaded (every module already imported) and runs two
trainer steps (the second with the AdamW states alive, as every later step); with --lora-rank,
LoRA adapters on every linear layer over the frozen base (model.lora). Prints one JSON
object: the config.json path, the baseline and the peak (VmHWM, reset at the baseline), in bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    for k in ("hidden", "layers", "inter", "vocab", "rows", "prompt", "completion", "micro_tokens"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, required=True)
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--arch", choices=["qwen2", "llama"], default="qwen2")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")  # model.dtype: bfloat16 computes in bf16 over the fp32 masters
    a = ap.parse_args()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from benchmarks.bench_real_shape import vm_hwm
    from benchmarks.bench_trainer_memory import make_groups, reset_peak_rss, rss_bytes
    from workbench.config import run_config_from_dict
    from workbench.engine.model.builtin import build_char_tokenizer
    from workbench.engine.train.trainer import Trainer
    from workbench.engine.run.actors import trainer_parts

    d = Path(a.dir)
    tok = build_char_tokenizer("0123456789+=")
    Config, Model = (LlamaConfig, LlamaForCausalLM) if a.arch == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    config = Config(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter, num_hidden_layers=a.layers,
                    num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=4096,
                    tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    Model(config).save_pretrained(d)
    tok.save_pretrained(d)
    groups = make_groups(a.rows, a.prompt, a.completion)
    for g in groups:  # the vocabulary of this model, not Qwen's
        for c in g.completions:
            c.prompt_tokens[:] = [4 + t % (a.vocab - 4) for t in c.prompt_tokens]
            c.tokens[:] = [4 + t % (a.vocab - 4) for t in c.tokens]
    cfg = run_config_from_dict({}, {"model.path": str(d), "task.num_train": 40, "task.num_val": 20, "eval.num_prompts": 10,
                                    "train.micro_batch_size": 1024, "train.micro_batch_tokens": a.micro_tokens,
                                    "train.lr": 1e-6, "train.warmup_steps": 1, "model.dtype": a.dtype,
                                    **({"model.lora.rank": a.lora_rank} if a.lora_rank else {})})
    import gc

    gc.collect()
    base = rss_bytes()
    reset_peak_rss()  # the model built above is not the trainer's
    tr = Trainer(**trainer_parts(cfg))
    for step in range(2):
        result, weights = tr.train_step(groups, step)
        stats = result.stats
        del weights  # the actor hands it to Ray's object store: not the trainer's memory
        assert stats["train/skipped"] == 0.0, stats
    peak = vm_hwm(os.getpid())
    print(json.dumps({"config": str(d / "config.json"), "baseline": base, "peak": peak}))


if __name__ == "__main__":
    main()
