"""The GPU check: the GPU tests, then two short runs that share ONE GPU between generator and trainer.

    make gpu-check                                  # = python benchmarks/gpu_check.py
    python benchmarks/gpu_check.py --steps 30 --model /data/Qwen2.5-0.5B-Instruct --chat-template

1. `pytest -m gpu` (tests/rl/test_gpu.py, tests/engine/rollout/test_vllm.py::TestOnGpu, ...).
2. The torch generator and the GPU trainer on one GPU (generator 0.5 + trainer 0.5).
3. The vLLM generator and the GPU trainer on one GPU (generator 0.5 with
   vllm_gpu_memory_utilization 0.35, trainer 0.5): fractional GPU shares.

For each run it prints generated tokens per wall-second, the trainer's busy share (forward,
backward and optimizer time over its wall time) and trained samples per wall-second; then a
JSON line with everything. The evaluator runs on the CPU (evaluator_gpus 0). Needs CUDA, and
vLLM for run 3 (env/requirements-gpu.txt); without CUDA it stops at once with one line.
Exit status: 0 when every part passed, 1 when one failed, 2 when there is no CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

SHARES = {"resources.num_gpus": 1, "resources.trainer_gpus": 0.5, "resources.evaluator_gpus": 0, "resources.generator_gpus": 0.5}
RUNS = {
    "torch generator + GPU trainer": {"generation.backend": "torch"},
    "vLLM generator + GPU trainer": {"generation.backend": "vllm", "generation.vllm_gpu_memory_utilization": 0.35},
}


def require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        print(f"gpu-check needs a CUDA GPU, but torch {torch.__version__} sees none; run it on a GPU machine "
              "(pip install -r env/requirements-gpu.txt && pip install -e '.[gpu]')", file=sys.stderr)  # fmt: skip
        sys.exit(2)


def gpu_tests() -> bool:
    print("== pytest -m gpu", flush=True)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rs"], cwd=ROOT)
    return proc.returncode == 0


def short_run(label: str, overrides: dict, args: argparse.Namespace, out: str) -> dict:
    from workbench.config import load_run_config
    from workbench.engine import run_to_end

    name = "gpu-check-" + overrides["generation.backend"]
    sets = {**SHARES, **overrides, "train.max_steps": args.steps, "eval.every_steps": args.steps, "eval.at_start": False,
            "out_dir": os.path.join(out, name), "name": name}  # fmt: skip
    if args.model:
        sets["model.path"] = args.model
    if args.chat_template:
        sets["task.chat_template"] = True
    cfg = load_run_config(args.config, [f"{k}={v}" for k, v in sets.items()])
    t0 = time.perf_counter()
    summary = run_to_end(cfg, resume=False)
    summary["label"], summary["total_seconds"] = label, time.perf_counter() - t0
    summary["tokens_per_second"] = summary.get("tokens/generated", 0.0) / max(summary["wall_seconds"], 1e-9)
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "quickstart.yaml"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--model", default=None, help="a local Hugging Face folder (default: the config's model)")
    ap.add_argument("--chat-template", action="store_true", help="wrap prompts with the tokenizer's chat template")
    ap.add_argument("--skip-tests", action="store_true")
    args = ap.parse_args()
    require_cuda()
    import ray
    import torch

    ok = {"gpu tests": True if args.skip_tests else gpu_tests()}
    results = []
    with tempfile.TemporaryDirectory() as out:
        for label, overrides in RUNS.items():
            print(f"== {label}", flush=True)
            try:
                results.append(short_run(label, overrides, args, out))
                ok[label] = results[-1]["status"] == "finished"
            except Exception as e:  # noqa: BLE001 - report every part, then fail
                print(f"{label}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
                ok[label] = False
    if ray.is_initialized():
        ray.shutdown()
    print(f"\nGPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; ray {ray.__version__}")
    print(f"{'run':34s}{'tokens/s':>12s}{'trainer busy':>14s}{'samples/s':>12s}{'steps':>7s}")
    for r in results:
        print(f"{r['label']:34s}{r['tokens_per_second']:12.0f}{r['trainer_utilisation']:14.1%}{r['samples_per_second']:12.1f}{r['steps']:7d}")
    for part, passed in ok.items():
        print(f"{part:34s}{'passed' if passed else 'FAILED'}")
    print(json.dumps({"ok": ok, "runs": results}, default=str))
    sys.exit(0 if all(ok.values()) else 1)


if __name__ == "__main__":
    main()
