"""Peak memory of one trainer step at Qwen2.5's vocabulary (151,936) and 2,048 tokens, before and after.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_trainer_memory.py [--rows 2] [--micro-rows 1]
        [--prompt 512] [--completion 1536] [--hidden 64] [--layers 2] [--device cpu]

The model is Qwen2-shaped (tied embeddings, GQA, RMSNorm, rotary) with the real vocabulary but
a small body (`--hidden`, `--layers`): the vocabulary and the length are what the head's memory
grows with. Each variant runs in its own process on the same step: one prompt group of `--rows`
sequences of `--prompt` + `--completion` tokens (the completion trained on), `--micro-rows`
sequences per forward/backward (1 by default: a single 2,048-token row, so "before" fits in a
few GB of host memory; the peak scales with it):

- before: the previous trainer's computation (`train.micro_batch_size: micro-rows`): fp32 logits
  over every position, prompt included, `token_logprobs` over them, `token_entropy` under no_grad
  (three more full-vocabulary tensors), the loss, backward.
- after: `Trainer.train_step` itself with `train.micro_batch_tokens` = micro-rows x length (head
  only at the completion positions, log-probs and entropy chunked from one logsumexp), the
  optimizer step and the weight hand-off included.

Printed: the shapes, and the peak memory each adds over the state held before the step (CPU:
peak resident set, VmHWM reset at the start, minus the resident set before; CUDA: `max_memory_allocated`
minus the allocation before).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

VOCAB = 151_936


def build_model_dir(path: Path, hidden: int, layers: int) -> None:
    """A random Qwen2-shaped model with the full vocabulary and a character tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from workbench.engine.model.builtin import build_char_tokenizer

    tok = build_char_tokenizer("0123456789+=")
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)


def make_trainer(model_dir: Path, device: str, micro_tokens: int):
    from workbench.config import run_config_from_dict
    from workbench.engine.train.trainer import Trainer
    from workbench.engine.run.actors import trainer_parts

    cfg = run_config_from_dict({}, {
        "model.path": str(model_dir), "task.name": "addition", "task.num_train": 40, "task.num_val": 20,
        "eval.num_prompts": 10, "train.micro_batch_size": 64, "train.micro_batch_tokens": micro_tokens,
        "resources.trainer_gpus": 1 if device == "cuda" else 0, "train.lr": 1e-6, "train.warmup_steps": 1,
    })  # fmt: skip
    return Trainer(**trainer_parts(cfg))


def make_groups(rows: int, prompt: int, completion: int) -> list:
    """One prompt group of `rows` sequences, rewards of both signs."""
    import torch

    from workbench.engine.batch import Group
    from workbench.engine.model.sampling import Completion

    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(4, VOCAB, (n,), generator=g).tolist()  # noqa: E731
    prompt_ids = ids(prompt)
    comps = [Completion(prompt_tokens=prompt_ids, tokens=ids(completion), logprobs=[-11.9] * completion,
                        versions=[0] * completion, sampled=[True] * completion, finished=True, interrupted=False)
             for _ in range(rows)]  # fmt: skip
    rewards = [1.0 if i % 2 == 0 else -1.0 for i in range(len(comps))]
    return [Group(0, 0, comps, [r > 0 for r in rewards], rewards)]


def old_step(tr, groups, micro_rows: int) -> None:
    """The previous trainer's forward/backward: full fp32 logits over every position."""
    import torch

    from workbench.engine.batch import PackedGroups
    from workbench.engine.model.forward import causal_lm_forward
    from workbench.rl.head import token_entropy, token_logprobs
    from workbench.rl.losses import policy_loss

    _, rows, _ = tr.prepare(PackedGroups.from_groups(groups))
    for start in range(0, rows.num_rows, micro_rows):
        sl = slice(start, start + micro_rows)
        ids = rows.input_ids[sl]
        with tr._autocast():
            logits = causal_lm_forward(tr.model, ids, rows.attention_mask[sl], fp32_head=True)[0][:, :-1]
        logp = token_logprobs(logits, ids[:, 1:])
        with torch.no_grad():
            token_entropy(logits)
        loss, _ = policy_loss(tr.recipe.loss, logp, rows.gen_logp[sl], rows.advantages[sl], rows.loss_mask[sl],
                              rows.weights[sl])  # fmt: skip
        loss.backward()
        del logits, logp, loss


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> None:
    """Start this process's high-water mark (VmHWM, read by bench_real_shape.vm_hwm) again from
    its resident set now.

    Not `ru_maxrss`: Linux carries that over from the parent across fork and exec, so a child of a
    large process (pytest after vLLM, 2 GB) reports the parent's size as its own peak."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure(variant: str, model_dir: Path, rows: int, micro_rows: int, prompt: int, completion: int, device: str) -> dict:
    import torch

    tr = make_trainer(model_dir, device, micro_rows * (prompt + completion))
    groups = make_groups(rows, prompt, completion)
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        base = rss_bytes()
        reset_peak_rss()
    if variant == "before":
        old_step(tr, groups, micro_rows)
    else:
        result = tr.train_step(groups, 0)[0]
        stats = result.stats
        assert stats["train/skipped"] == 0.0, result.skipped
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        from benchmarks.bench_real_shape import vm_hwm

        peak = vm_hwm(os.getpid()) - base
    return {"variant": variant, "peak_bytes": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2, help="sequences in the step (one prompt group, >= 2)")
    ap.add_argument("--micro-rows", type=int, default=1, help="sequences per forward/backward")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--completion", type=int, default=1536)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--variant", choices=["before", "after"], help=argparse.SUPPRESS)  # one child process
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.variant:
        print(json.dumps(measure(a.variant, Path(a.model_dir), a.rows, a.micro_rows, a.prompt, a.completion, a.device)))
        return
    rows, length, mb = max(2, a.rows), a.prompt + a.completion, a.micro_rows
    gib = 2**30
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "qwen2"
        build_model_dir(model_dir, a.hidden, a.layers)
        print(f"Qwen2-shaped model: vocab {VOCAB:,}, hidden {a.hidden}, {a.layers} layers, tied head; device {a.device}")
        print(f"step: {rows} rows x {length:,} tokens ({a.prompt:,} prompt + {a.completion:,} completion trained on), "
              f"{mb} row(s) per forward/backward")  # fmt: skip
        print(f"before: full fp32 logits [micro-rows, length-1, vocab] = [{mb}, {length - 1}, {VOCAB}]: "
              f"{mb * (length - 1) * VOCAB * 4 / gib:.2f} GiB per copy")  # fmt: skip
        from workbench.rl.head import head_chunk_rows

        print(f"after: the head on [{mb * a.completion}, {a.hidden}] completion positions per micro-batch, "
              f"in chunks of {head_chunk_rows(VOCAB)} rows x {VOCAB} = {head_chunk_rows(VOCAB) * VOCAB * 4 / gib:.2f} GiB")
        peaks = {}
        for variant in ("before", "after"):
            cmd = [sys.executable, __file__, "--variant", variant, "--model-dir", str(model_dir), "--rows", str(rows),
                   "--micro-rows", str(mb), "--prompt", str(a.prompt), "--completion", str(a.completion),
                   "--device", a.device]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"the {variant} step failed:\n{proc.stderr[-3000:]}")
            out = proc.stdout.strip().splitlines()[-1]
            peaks[variant] = json.loads(out)["peak_bytes"]
            print(f"{variant:>6}: peak memory of one step above the resident state: {peaks[variant] / gib:.2f} GiB")
        print(f"ratio before/after: {peaks['before'] / max(peaks['after'], 1):.1f}x")


if __name__ == "__main__":
    main()
