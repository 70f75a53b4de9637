"""The memory plan of a RunConfig: its model's config.json (or GGUF header), the cluster's shape, and the launch guard.

    plan = plan_for(cfg, cluster_shape(gpus_per_node=8, gpu_memory_gb=80))   # a Plan (memory.py)
    print(plan)                                   # the table; plan.fits, plan.verdict
    guard(cfg)                                    # launch: UserError when the plan does not fit

Only config.json is read (builtin:tiny: its GPT-2 shape from model.n_* and the task's alphabet; a
.gguf file: its header, sources.gguf_config, nothing converted); no weights are loaded, no dataset is downloaded, and the hub is never waited on (sources.py: a local
folder or config.json, the HF cache's snapshot, or a hub that answers in seconds; the longest
prompt from `--prompt-tokens`, the task's cached prompts, or the model's bound). The cluster is what the caller gives (`--gpus-per-node`, `--gpu-memory`,
`--nodes`), else the connected Ray cluster's own figures (GPUs per node; memory from the node's
accelerator type or `resources.gpu_memory_gb`), else (no Ray cluster with GPUs) the hardware the
config names (`resources.num_gpus` per node, `resources.gpu_memory_gb`, `resources.nodes`: the
configs/gpu/ recipes), else this host's memory for a CPU run. A config
without GPU shares planned on GPUs is planned as half the GPUs for FSDP2 trainer workers and half
for vLLM generators (one GPU each; one GPU: shared 0.5 / 0.5), and the plan says so.

The guard (`preflight.check_resources` calls it, so `workbench run`, `Session.start` and sweeps
all pass through it) refuses a plan that does not fit in one line; `resources.plan_check: false`
overrides it. On a CPU run it plans against this host's memory (a local cluster only); on GPUs
whose memory it cannot tell it warns and lets the run start.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any, Optional

from workbench.config import RunConfig
from workbench.engine.plan.fit import make_plan
from workbench.engine.plan.memory import GB, Cluster, ModelShape, Plan, Settings, generator_terms, kv_bytes_per_token
from workbench.engine.plan.sources import local_task, model_config, prompt_tokens, read_config_json
from workbench.errors import UserError

log = logging.getLogger(__name__)

# GPU memory by Ray accelerator type (GB, as sold); Ray's "A100" alone is the 40 GB part.
GPU_MEMORY_GB = {"T4": 16, "V100": 16, "A10": 24, "A10G": 24, "L4": 24, "A100": 40, "A100-40G": 40, "A100-80G": 80,
                 "L40": 48, "L40S": 48, "A6000": 48, "H100": 80, "H200": 141, "B200": 180}  # fmt: skip


def cluster_shape(gpus_per_node: Optional[int] = None, gpu_memory_gb: Any = None, nodes: Optional[int] = None,
                  cfg: Optional[RunConfig] = None) -> Cluster:  # fmt: skip
    """The cluster from explicit figures, else the connected Ray cluster, else this host (CPU)."""
    if gpu_memory_gb is not None:
        try:
            mem = float(gpu_memory_gb)
        except (TypeError, ValueError):
            raise UserError(f"--gpu-memory: {gpu_memory_gb!r} is not a number of GB (e.g. --gpu-memory 80)") from None
        if not 0 < mem < 10_000:
            raise UserError(f"--gpu-memory: {mem:g} GB is not a GPU's memory (give GB per GPU, e.g. 24 or 80)")
    if gpus_per_node is not None and gpus_per_node < 1:
        raise UserError(f"--gpus-per-node: {gpus_per_node} GPUs cannot hold a run (give 1 or more; omit it for a CPU plan)")
    if nodes is not None and nodes < 1:
        raise UserError(f"--nodes: {nodes} nodes cannot hold a run (give 1 or more)")
    if gpus_per_node is None and gpu_memory_gb is None and nodes is None:
        return _ray_or_host(cfg)
    if gpus_per_node is None and gpu_memory_gb is not None:
        gpus_per_node = 1
    if gpus_per_node is not None and gpu_memory_gb is None:
        raise UserError("--gpus-per-node needs --gpu-memory GB (the memory of one GPU, e.g. 80)")
    nodes = nodes or (cfg.resources.nodes if cfg is not None else None)  # a recipe's own node count
    if gpus_per_node is None:
        return dataclasses.replace(_ray_or_host(cfg), nodes=int(nodes or 1))
    return Cluster(int(gpus_per_node), mem * GB, int(nodes or 1), "given")


def host_memory() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _ray_or_host(cfg: Optional[RunConfig]) -> Cluster:
    ray = sys.modules.get("ray")  # never imported: no cluster is connected (and `import ray` costs seconds)
    given = getattr(cfg.resources, "gpu_memory_gb", None) if cfg is not None else None
    r = cfg.resources if cfg is not None else None
    named = None  # the hardware a recipe names (configs/gpu/): planned where no GPU cluster is there to read
    if r is not None and r.num_gpus and r.gpu_memory_gb:
        named = Cluster(int(r.num_gpus), float(r.gpu_memory_gb) * GB, int(r.nodes or 1), "the config's resources.*")
    if ray is None or not ray.is_initialized():
        return named or Cluster(0, host_memory(), 1, "this host")
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gpus = max([int(n["Resources"].get("GPU", 0)) for n in nodes] or [0])
    if gpus == 0:
        return named or Cluster(0, host_memory(), 1, "this host (Ray cluster without GPUs)")
    kinds = {k.split(":", 1)[1] for n in nodes for k in n["Resources"] if k.startswith("accelerator_type:")}
    known = [GPU_MEMORY_GB[k] for k in kinds if k in GPU_MEMORY_GB]
    if given:
        mem, src = float(given), "Ray cluster, resources.gpu_memory_gb"
    elif known:
        mem, src = float(min(known)), f"Ray cluster ({', '.join(sorted(kinds))})"
    else:
        raise UserError(f"the Ray cluster's GPUs ({', '.join(sorted(kinds)) or 'no accelerator type'}) have no known memory "
                        "size: give --gpu-memory GB, or set resources.gpu_memory_gb")  # fmt: skip
    return Cluster(gpus, mem * GB, sum(1 for n in nodes if n["Resources"].get("GPU", 0) > 0), src)


def model_shape(data: dict[str, Any], where: Optional[Path]) -> ModelShape:
    """The shape; an architecture the formulas do not know is counted on the meta device (no memory)."""
    try:
        shape = ModelShape.from_config(data)
    except ValueError as e:
        raise UserError(f"model.path: {where}: {e}") from None
    if shape.known or where is None:
        return shape
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.for_model(**data)  # from the fields read: a folder's config.json or a config.json alone
    except (KeyError, ValueError) as e:
        raise UserError(f"model.path: {where}: transformers does not know model_type {shape.model_type!r} ({e})") from None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return dataclasses.replace(shape, given_params=sum(p.numel() for p in model.parameters()))


def assumed_layout(cfg: RunConfig, c: Cluster) -> tuple[RunConfig, Optional[str]]:
    """A GPU plan of a config without GPU shares: half the GPUs train (FSDP2), half generate (vLLM)."""
    r = cfg.resources
    if c.cpu or r.trainer_gpus or r.generator_gpus or r.evaluator_gpus:
        return cfg, None
    total = c.gpus_per_node * c.nodes
    if total == 1:
        sets = {"resources.trainer_gpus": 0.5, "resources.generator_gpus": 0.5, "generation.vllm_gpu_memory_utilization": 0.4}
    else:
        half = max(1, total // 2)
        sets = {"resources.trainer_gpus": 1, "resources.trainer_workers": half, "resources.generator_gpus": 1,
                "generation.num_generators": total - half}  # fmt: skip
    from workbench.config import run_config_from_dict
    from workbench.configtools import to_dict

    out = run_config_from_dict(to_dict(cfg), {**sets, "generation.backend": "vllm"})
    said = ", ".join(f"{k.split('.')[-1]}={v:g}" for k, v in sets.items())
    return out, f"the config gives no GPU shares: planned as vLLM + {said} (set resources.* to plan yours)"


def settings_from_config(cfg: RunConfig, c: Cluster, prompt: int) -> Settings:
    from workbench.engine.model.devices import CPU_KV_CACHE_GIB, trainer_precision

    g, r, t = cfg.generation, cfg.resources, cfg.train
    if c.cpu:  # the trainer's own rule, which the CPU vLLM engine follows: bf16 where asked and native here
        compute = trainer_precision(cfg.model.dtype, "cpu").compute.itemsize
    else:
        compute = 4 if cfg.model.dtype == "float32" else 2  # devices.trainer_precision: auto is bf16 on CUDA
    return Settings(compute_bytes=compute, fp32_head=bool(cfg.recipe.fp32_head), trainer_workers=r.trainer_workers,
                    trainer_gpus=r.trainer_gpus, generator_gpus=r.generator_gpus, num_generators=g.num_generators,
                    evaluator_gpus=r.evaluator_gpus, backend=g.backend, tp=g.vllm_tensor_parallel_size,
                    vllm_util=g.vllm_gpu_memory_utilization, enforce_eager=g.vllm_enforce_eager,
                    max_batch_sequences=g.max_batch_sequences, micro_batch_size=t.micro_batch_size,
                    micro_batch_tokens=t.micro_batch_tokens, gradient_checkpointing=t.gradient_checkpointing,
                    prompt_tokens=prompt, max_new_tokens=g.max_new_tokens,
                    vllm_kv_bytes=int(CPU_KV_CACHE_GIB * 2**30), kl_reference=bool(cfg.recipe.loss.kl_coef),
                    kept_versions=cfg.kept_versions(), model_dtype=str(cfg.model.dtype or "auto"),
                    eval_rows=eval_rows(cfg), evaluator_vllm_cpu=evaluator_on_vllm(cfg) and cfg.resources.evaluator_gpus == 0,
                    evaluates=cfg.eval.enabled,
                    **lora_settings(cfg))  # fmt: skip


def evaluator_on_vllm(cfg: RunConfig) -> bool:
    """Whether the run's evaluator is a vLLM engine (else the torch generator): with
    generation.backend=vllm, on a GPU share (resources.evaluator_gpus > 0), or for an environment
    (task.name env) on a CPU run (no role asks for a GPU: the vLLM-CPU build). An episode's context
    grows every turn; vLLM's prefix cache serves it, where the torch evaluator re-reads it each
    turn (64 calculator episodes took over 9 minutes beside training on 2 cores, and its HF KV cache
    pushed a 24 GB host into Ray's OOM killer). run/actors.py and the plan both ask here."""
    g, r = cfg.generation, cfg.resources
    if g.backend != "vllm":
        return False
    cpu_run = r.trainer_gpus == 0 and r.generator_gpus == 0 and r.evaluator_gpus == 0
    return r.evaluator_gpus > 0 or (cfg.task.name == "env" and cpu_run)


def eval_rows(cfg: RunConfig) -> int:
    """The rows the evaluator decodes at once (rollout/worker.evaluate): max_batch_sequences // k
    prompts a call (k = eval.samples_per_prompt), at most the evaluation's prompts (each domain's
    eval.num_prompts for a task mix), times k."""
    e, g = cfg.eval, cfg.generation
    k = max(1, e.samples_per_prompt)
    prompts = e.num_prompts * max(1, len(cfg.task.mix))
    return min(max(1, g.max_batch_sequences // k), prompts) * k


def lora_settings(cfg: RunConfig) -> dict[str, Any]:
    """Settings' model.lora fields: its rank and targets (none: full fine-tuning)."""
    lora = cfg.model.lora
    if lora is None:
        return {}
    targets = lora.target_modules
    return {"lora_rank": lora.rank, "lora_targets": (targets,) if isinstance(targets, str) else tuple(targets)}


def count_adapters(s: Settings, shape: ModelShape, where: Optional[Path], fields: Optional[dict[str, Any]] = None) -> Settings:
    """`s` with the adapters of an architecture plan/lora.py does not know counted on the meta
    device (engine/model/lora.adapter_shapes: the trainer's own wrapping, from `fields` written as
    a config.json where `where` is a GGUF file); a target the model lacks is one line, as when the model loads."""
    if not s.lora_rank:
        return s
    from workbench.config import ALL_LINEAR, LoraConfig
    from workbench.engine.plan.lora import adapted

    if shape.known:  # memory.adapters counts them from the shape; here only the targets are checked
        try:
            adapted(shape, s.lora_targets)
        except ValueError as e:
            raise UserError(str(e)) from None
        return s
    from workbench.engine.model.lora import adapter_shapes

    targets = ALL_LINEAR if s.lora_targets == (ALL_LINEAR,) else list(s.lora_targets)
    lora = LoraConfig(rank=s.lora_rank, target_modules=targets)
    if fields is not None and where is not None and where.suffix.lower() == ".gguf":  # its header's fields, as a config.json
        import json
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "config.json").write_text(json.dumps(fields))
            shapes, _ = adapter_shapes(tmp, lora)
    else:
        shapes, _ = adapter_shapes(where, lora)
    return dataclasses.replace(s, adapter_params=sum(math.prod(v) for v in shapes.values()))


def plan_for(cfg: RunConfig, cluster: Optional[Cluster] = None, *, prompt: Optional[int] = None, task: Any = None) -> Plan:
    """The memory plan of `cfg` on `cluster` (default: `cluster_shape(cfg=cfg)`). The task is read only
    from this machine (sources.local_task): the plan never needs a dataset to be reachable."""
    from workbench.engine.model.builtin import BUILTIN_PREFIX

    c = cluster or cluster_shape(cfg=cfg)
    builtin, why = cfg.model.path.startswith(BUILTIN_PREFIX), ""
    if task is None and (prompt is None or builtin):  # a given prompt needs no data (builtin: its alphabet does)
        task, why = local_task(cfg)
        if task is None and builtin:
            raise UserError(f"builtin:tiny's shape comes from its task, and {why}")
    data, where = model_config(cfg, task)
    shape = model_shape(data, where)
    cfg, layout = assumed_layout(cfg, c)
    how = "given"
    if prompt is None:
        prompt, how = prompt_tokens(cfg, data, where, task, why)
    plan = make_plan(shape, count_adapters(settings_from_config(cfg, c, prompt), shape, where, data), c)
    plan.notes = [n for n in (layout, f"prompt tokens: {prompt:,} ({how})") if n]
    plan.prompt_bound = how.startswith("the model's bound")
    return plan


def guard(cfg: RunConfig, task: Any = None) -> Optional[Plan]:
    """Refuse (UserError) a run whose plan does not fit, before any actor starts; see the docstring."""
    if not getattr(cfg.resources, "plan_check", True):
        return None
    try:
        c = cluster_shape(cfg=cfg)
    except UserError as e:  # GPUs of unknown memory: the plan cannot judge; the run may still fit
        log.warning("memory plan skipped: %s", e)
        return None
    if c.cpu and cfg.resources.ray_address:
        return None  # a remote CPU cluster: this host's memory says nothing about its nodes
    if task is None:  # a launch reads its data as the run will (the hub allowed): its own longest prompt, never a bound
        from workbench.tasks.base import load_task

        task = load_task(cfg.task)
    plan = plan_for(cfg, c, task=task)
    if not plan.fits:
        raise UserError(f"the memory plan {plan.verdict} (`workbench plan` shows every term; "
                        "resources.plan_check=false starts it anyway)")  # fmt: skip
    return plan


def gpu_settings(cfg: RunConfig) -> Settings:
    """The plan's figures of `cfg` for a role on a GPU (no prompt): what a vLLM generator sizes its
    KV cache by (`vllm_kv_cache_bytes`). The driver picks them (run/actors.generator_parts)."""
    return settings_from_config(cfg, Cluster(1, 0.0, 1, "a GPU"), prompt=0)  # only the device kind is read


def vllm_kv_cache_bytes(s: Settings, model_dir: str | Path, gpu_bytes: float) -> int:
    """The KV cache (bytes per TP rank) a vLLM generator gets on a GPU of `gpu_bytes`: its budget
    (vllm_gpu_memory_utilization x memory) less the plan's other terms, the fp32 head copy among
    them (`s`: the run's `gpu_settings`). Given to vLLM as `kv_cache_memory_bytes`, it skips memory
    profiling, so a generator Ray restarts beside a live trainer sizes the same cache instead of asserting."""
    folder = Path(model_dir)
    shape = model_shape(read_config_json(folder), folder)
    kv = s.vllm_util * gpu_bytes - sum(generator_terms(shape, s, False).values())
    least = kv_bytes_per_token(shape, s) * (s.max_new_tokens + 1)
    if kv < least:
        raise UserError(f"the vLLM generator's budget (generation.vllm_gpu_memory_utilization={s.vllm_util:g} of "
                        f"{gpu_bytes / GB:.1f} GB) leaves {max(kv, 0) / GB:.2f} GB for the KV cache, less than one sequence: "
                        "raise it, or generation.vllm_tensor_parallel_size (`workbench plan` shows the terms)")  # fmt: skip
    return int(kv)
