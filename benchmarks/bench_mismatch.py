"""The training/inference mismatch on the pretrained chat model, for the torch and vLLM generators.

    .venv/bin/python benchmarks/bench_mismatch.py [--steps 4] [--tokens 32] [--dtype bfloat16] [--json]

SmolLM2-135M-Instruct (the GGUF `make setup` installs, converted once into `--cache`) runs
`--steps` steps through `workbench run` with each generator backend in turn, one at a time: its
chat template with a system prompt, `--prompts` x `--generations` completions of up to `--tokens`
tokens a step, scored by bench_real_shape's seeded hash checker (about half pass, so every group
trains), a weight push after each step, in `--dtype` (model.dtype; auto: fp32 on a CPU). Printed per
backend and step (a dash: no token measured): `train/mismatch_kl` (mean k3
KL between the generator's and the trainer's log-probs on the trained tokens, rl/mismatch.py),
`train/mismatch_ratio_max` and `train/mismatch_frac` (the share of tokens whose ratio is outside
[0.5, 2]), and the tokens measured. The trainer scores each token under the policy version that
sampled it (its own version's in the loss's forward, the version before's with its kept weights:
engine/train/lagged.py), so the gap is numerics alone (dtypes, kernels, the sampler), not staleness.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

from cli_run import workbench_run
KEYS = ("train/mismatch_kl", "train/mismatch_ratio_max", "train/mismatch_frac", "train/mismatch_tokens")


def config(backend: str, a: argparse.Namespace, data: Path, gguf: Path) -> dict:
    """The run: SmolLM2 on sums, the hash checker, `backend`'s generator, nothing kept but metrics."""
    return {
        "name": f"mismatch-{backend}", "recipe": {"base": "scalerl", "length_control": {"type": "none"},
                                                  "zero_variance_filter": False, "no_positive_resampling": False},
        "model": {"path": str(gguf), "cache_dir": a.cache, "dtype": a.dtype},
        "task": {"name": "jsonl", "path": str(data), "num_val": 2, "chat_template": True,
                 "system_prompt": "Answer with only the number.", "checker": "bench_real_shape:hash_checker"},
        "generation": {"backend": backend, "max_new_tokens": a.tokens, "max_batch_sequences": a.prompts * a.generations},
        "train": {"prompts_per_step": a.prompts, "generations_per_prompt": a.generations, "max_steps": a.steps,
                  "lr": 1e-5, "warmup_steps": 1},
        "eval": {"at_start": False, "every_steps": 1000, "num_prompts": 2},
        "checkpoint": {"every_steps": 1000, "export_policy": False}, "tracking": {"mlflow": False},
        "resources": {"generator_cpus": 1, "trainer_cpus": 1, "evaluator_cpus": 0},
    }  # fmt: skip


def run_backend(backend: str, a: argparse.Namespace, work: Path, data: Path, gguf: Path) -> list[dict]:
    """`workbench run` with `backend`'s generator; its step rows' mismatch figures."""
    path = work / f"{backend}.yaml"
    path.write_text(yaml.safe_dump(config(backend, a, data, gguf)))
    rows = workbench_run(path, work / backend, timeout=1800).rows
    return [{"step": int(r["step"]), **{k: r.get(k) for k in KEYS}} for r in rows if "train/sequences_trained" in r]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--backends", default="torch,vllm")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"], help="model.dtype of both sides")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "workbench" / "models"), help="model.cache_dir")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    from workbench.engine.model.gguf import smollm2_path

    gguf = smollm2_path()
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-mismatch-") as tmp:
        work = Path(tmp)
        data = work / "sums.jsonl"
        data.write_text("".join(json.dumps({"prompt": f"What is {x} + {y}?", "answer": str(x + y)}) + "\n"
                                for x in range(1, 9) for y in range(1, 5)))  # fmt: skip
        for backend in a.backends.split(","):
            t0 = time.perf_counter()
            print(f"{backend}: {a.steps} steps of {a.prompts} x {a.generations} completions ...", file=sys.stderr, flush=True)
            results[backend] = run_backend(backend, a, work, data, gguf)
            print(f"{backend}: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(results))
        return 0
    print(f"{'backend':8s} {'step':>4s} {'mismatch_kl':>12s} {'ratio_max':>10s} {'frac':>8s} {'tokens':>7s}")
    for backend, rows in results.items():
        for r in rows:
            kl, top, frac, n = (r[k] for k in KEYS)
            if not n:  # no token of the step was measured (rl/mismatch.py)
                print(f"{backend:8s} {r['step']:4d} {'-':>12s} {'-':>10s} {'-':>8s} {0:7d}")
                continue
            print(f"{backend:8s} {r['step']:4d} {kl:12.2e} {top:10.4f} {frac:8.4f} {n:7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
